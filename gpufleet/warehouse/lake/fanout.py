"""The compaction of host-days from their files on Dask workers (`[compute] dask`, docs/dask.md).

With `[compute] dask` set, the ingest flows pass a `CompactFanOut` into compaction
(`compact.py`): `run` runs tasks somewhere (Prefect tasks on a Dask cluster:
gpufleet/flows/fanout.py) and returns what each did. A task is a run of host-days; its
worker (`compact_task.py`) reads each one's collector files where they lie and writes its
compacted file into the host-day's staging directory (`.host=H.compacting-<run>`, made
here, hidden from every listing, named by the ingest's run: a late task of a run given up
writes where no later run reads), under the name and with the bytes the pipeline host's
own compaction writes. The pipeline host then swaps them in and records them in one step,
as it does its own. A task that fails, or whose worker dies on every try, fails the ingest
before anything is swapped in: the staging directories go, the lake and the warehouse stay
as they were.

With `raw_location = "s3://..."` the workers need no shared filesystem: a task names each
host-day's objects (`stored_objects`: what the mirror copied) and paths below the data
directory only; the worker reads the objects from the store into a folder of its own and
sends the compacted file's bytes back, which the pipeline host writes into the staging
directory. A host-day with a file that is no object (its compacted file of an earlier
ingest beside a late file) is compacted here, on the pipeline host, as on a worker.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import duckdb

from gpufleet.collectors.writer import write_bytes_atomically
from gpufleet.config import Config, S3Config
from gpufleet.integrations.mirror import reads_object_storage, stored_objects
from gpufleet.storage.s3 import StoredObject
from gpufleet.warehouse.base.raw_tables import literal_path
from gpufleet.warehouse.lake.compacted_file import compacted_name, staging_directory

T = TypeVar("T")
SCRATCH_DIR_NAME = "scratch"  # under the data directory, as a fanned-out build's
# Collector bytes one task reads at most (a task holds at least one host-day): a daily
# compaction of a thousand hosts is a few dozen tasks, not a thousand Prefect task runs.
TASK_SOURCE_BYTES = 1 << 30


def scratch_folder(config: Config, kind: str) -> Path:
    """A new scratch folder for one fanned-out run of `kind` (build, compact), named by the
    run: `scratch/<kind>-<id>`. The folders of `kind`'s earlier runs go first (dead ones':
    a crash of the pipeline host, a late task's spill); the caller holds the writer lock."""
    root = config.data_dir.absolute() / SCRATCH_DIR_NAME
    for folder in root.glob(f"{kind}-*"):
        shutil.rmtree(folder, ignore_errors=True)
    return root / f"{kind}-{uuid.uuid4().hex}"


@dataclass(frozen=True, kw_only=True)
class HostDay:
    """One host-day to compact: absolute paths, so that any worker finds them; or, read
    from the store (`objects`), paths below the data directory, which the worker makes
    below a folder of its own."""

    directory: str  # raw/samples/date=D/host=H, absolute (or below the data directory)
    sources: tuple[str, ...]  # its collector files, sorted (`literal_path` patterns)
    target: str  # the compacted file, in the host-day's staging directory
    size_bytes: int  # of the sources together
    # The collector files its compacted file replaces, (name, size) (`replaced.py`).
    replaced: tuple[tuple[str, int], ...] = ()
    files: tuple[str, ...] = ()  # the sources, relative to the data directory
    objects: tuple[StoredObject, ...] = ()  # the sources in the store, when read from there

    @classmethod
    def of(
        cls,
        config: Config,
        directory: Path,
        day: dt.date,
        files: Sequence[str],
        size_bytes: int,
        *,
        replaced: tuple[tuple[str, int], ...] = (),
        run: str,
    ) -> HostDay:
        """The host-day of `directory` (under the data directory) and its `files` (relative
        to it), compacted into run `run`'s staging directory."""
        data_dir = config.data_dir.absolute()
        absolute = data_dir / directory.relative_to(config.data_dir)
        return cls(
            directory=str(absolute),
            sources=tuple(literal_path(str(data_dir / path)) for path in files),
            target=str(staging_directory(absolute, run) / compacted_name(day)),
            size_bytes=size_bytes,
            replaced=replaced,
            files=tuple(files),
        )

    def in_store(self, config: Config, objects: Mapping[str, StoredObject]) -> HostDay | None:
        """This host-day as a worker reads it from the store: its paths below the data
        directory, its files' objects; None when a file of it is no object."""
        found = [objects.get(path) for path in self.files]
        if not found or None in found:
            return None
        data_dir = config.data_dir.absolute()
        return replace(
            self,
            directory=Path(self.directory).relative_to(data_dir).as_posix(),
            sources=(),
            target=Path(self.target).relative_to(data_dir).as_posix(),
            objects=tuple(item for item in found if item is not None),
        )


@dataclass(frozen=True, kw_only=True)
class CompactTask:
    """What a worker needs to compact a run of host-days: plain values, sent by pickle."""

    index: int  # 0-based
    count: int  # tasks in the ingest
    host_days: tuple[HostDay, ...]
    temp_dir: str  # where the worker's DuckDB spills ("": a folder of the worker's own)
    time_zone: str  # the pipeline host's DuckDB TimeZone (a zone-less timestamp's cast)
    threads: int | None = None  # DuckDB threads on the worker (None: its cores)
    memory_limit: str | None = None  # DuckDB's memory limit on the worker (None: its default)
    store: S3Config | None = None  # where the host-days' `objects` are, when read from there

    @property
    def label(self) -> str:
        first, last = self.host_days[0].directory, self.host_days[-1].directory
        return task_label("compaction", self.index, self.count, first, last)


@dataclass(frozen=True, kw_only=True)
class CompactTaskResult:
    """What a task did: the host-days it could not read (directory -> why, in one line)
    and, read from the store, each other one's compacted file (directory -> its bytes)."""

    index: int
    seconds: float
    failed: dict[str, str] = field(default_factory=dict)
    worker: str = ""  # host:pid of the process that ran it
    files: dict[str, bytes] = field(default_factory=dict)


def task_label(kind: str, index: int, count: int, first: str, last: str) -> str:
    """How a failure names task `index` (0-based) of `count` of a `kind`: by its first and
    last host-day directories (`date=D/host=H`)."""
    days = ("/".join(PurePosixPath(directory).parts[-2:]) for directory in (first, last))
    return f"{kind} task {index + 1} of {count} (host-days {' .. '.join(days)})"


def task_runs(
    items: Sequence[T], workers: int, size_bytes: Callable[[T], int]
) -> list[tuple[T, ...]]:
    """`items` (host-days, a backfill's batches: `ingest/fanned.py`), in their order, in runs
    of about equal bytes: at least one per worker (as far as there are items), and one per
    TASK_SOURCE_BYTES."""
    sizes = [size_bytes(item) for item in items]
    total = sum(sizes)
    count = min(len(items), max(1, workers, -(-total // TASK_SOURCE_BYTES)))
    runs: list[tuple[T, ...]] = []
    pending: list[T] = []
    done = 0  # bytes of the runs closed, and of `pending`
    for position, (item, size) in enumerate(zip(items, sizes, strict=True)):
        pending.append(item)
        done += size
        left = len(items) - position - 1
        if len(runs) == count - 1:
            continue  # the last run takes the rest
        # A run closes at its share of the bytes, or when each run still to come needs one.
        if done * count >= total * (len(runs) + 1) or left == count - len(runs) - 1:
            runs.append(tuple(pending))
            pending = []
    if pending:
        runs.append(tuple(pending))
    return runs


class _Result(Protocol):
    """A task's result: a frozen dataclass with the compacted files read from the store."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def files(self) -> dict[str, bytes]: ...  # host-day directory -> its compacted file


Task = TypeVar("Task")
Result = TypeVar("Result", bound=_Result)


@dataclass(frozen=True, kw_only=True)
class TasksReport(Generic[Result]):
    """What a fan-out's last tasks did, for `bench/dask_build.py`."""

    tasks: int = 0
    results: tuple[Result, ...] = ()
    run_seconds: float = 0.0  # from the first task submitted to the last done


@dataclass(kw_only=True)
class FanOut(Generic[Task, Result]):
    """Where an ingest's tasks run (compaction's, `CompactFanOut`; a backfill's loads,
    `ingest/fanned.py`): `run` takes the tasks and returns each one's result in their
    order, or raises (a GpufleetError of one line) when one failed."""

    config: Config
    run: Callable[[Sequence[Task]], Sequence[Result]]
    workers: Callable[[], int]  # how many there are
    last: TasksReport[Result] | None = None
    # The compacted file of each host-day sent, by directory (as the tasks name it).
    _targets: dict[str, Path] = field(default_factory=dict)

    def _run_tasks(self, tasks: Sequence[Task]) -> tuple[Result, ...]:
        """Each task's result, `receive`d, as `run` gives them; the run noted in `last`."""
        started = time.perf_counter()
        results = tuple(self.receive(result) for result in self.run(tasks)) if tasks else ()
        self.last = TasksReport(
            tasks=len(tasks), results=results, run_seconds=time.perf_counter() - started
        )
        return results

    def receive(self, result: Result) -> Result:
        """Write the compacted files a task sent back (read from the store) into their
        staging directories; the result without them. `run` may call it on each result as
        it comes (the flows' does: the host then holds one task's files at a time)."""
        for directory, data in result.files.items():
            write_bytes_atomically(data, self._targets[directory])
        return replace(result, files={}) if result.files else result


@dataclass(kw_only=True)
class CompactFanOut(FanOut[CompactTask, CompactTaskResult]):
    """Where compaction from files runs (`FanOut`)."""

    threads: int | None = None  # each worker's DuckDB threads (None: all its cores)
    memory_limit: str | None = None  # each worker's DuckDB memory limit (None: its default)

    def compact(
        self,
        con: duckdb.DuckDBPyConnection,
        host_days: Sequence[HostDay],
        *,
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, str]:
        """Write each host-day's compacted file into its (new, empty) staging directory on
        the workers (`con`: the ingest's, whose settings they take); the host-days that
        could not be read, by directory (their staging directories removed). Raises, every
        staging directory removed, when a task failed."""
        [(time_zone,)] = con.execute("select current_setting('TimeZone')").fetchall()
        scratch = scratch_folder(self.config, "compact")
        staging = [Path(day.target).parent for day in host_days]
        sent, here = self._where(host_days)
        store = self.config.s3 if reads_object_storage(self.config) else None
        try:
            for folder in staging:
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
            (scratch / "spill").mkdir(parents=True)
            runs = task_runs(sent, self.workers(), lambda day: day.size_bytes) if sent else []
            tasks = [
                CompactTask(
                    index=index,
                    count=len(runs),
                    host_days=run,
                    temp_dir="" if store else str(scratch / "spill" / f"{index:05d}"),
                    time_zone=str(time_zone),
                    threads=self.threads,
                    memory_limit=self.memory_limit,
                    store=store,
                )
                for index, run in enumerate(runs)
            ]
            if progress:
                progress(
                    f"compact: {len(host_days)} host-days from their files in {len(tasks)} tasks"
                    + (f", {len(here)} on this host (files not in the store)" if here else "")
                )
            data_dir = self.config.data_dir.absolute()
            self._targets = {day.directory: data_dir / day.target for day in sent}
            results = self._run_tasks(tasks)
            # (an absolute directory, of a task that read the files where they lie, stays so)
            failed = {
                str(data_dir / path): why
                for result in results
                for path, why in result.failed.items()
            }
            if here:
                failed.update(self._compact_here(here, str(time_zone), scratch))
        except BaseException:
            for folder in staging:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        for day, folder in zip(host_days, staging, strict=True):
            if day.directory in failed:
                shutil.rmtree(folder, ignore_errors=True)
                continue
            # What a killed try left (its file's temporary name) goes before the swap.
            for entry in os.scandir(folder):
                if entry.path != day.target:
                    os.remove(entry.path)
        return failed

    def _where(self, host_days: Sequence[HostDay]) -> tuple[list[HostDay], list[HostDay]]:
        """The host-days to send to the workers (as they read them from the store, with
        `raw_location = "s3://..."`), and those to compact on this host (a file of them is
        no object)."""
        if not reads_object_storage(self.config):
            return list(host_days), []
        objects = stored_objects(self.config)
        sent: list[HostDay] = []
        here: list[HostDay] = []
        for day in host_days:
            stored = day.in_store(self.config, objects)
            if stored is None:
                here.append(day)
            else:
                sent.append(stored)
        return sent, here

    def _compact_here(
        self, host_days: Sequence[HostDay], time_zone: str, scratch: Path
    ) -> dict[str, str]:
        """Compact `host_days` on this host, as a worker would (their files lie here)."""
        # compact_task.py imports this module: its task runs here as it would on a worker.
        from gpufleet.warehouse.lake.compact_task import run_compact_task

        task = CompactTask(
            index=0,
            count=1,
            host_days=tuple(host_days),
            temp_dir=str(scratch / "spill" / "here"),
            time_zone=time_zone,
            threads=self.threads,
            memory_limit=self.memory_limit,
        )
        return dict(run_compact_task(task).failed)
