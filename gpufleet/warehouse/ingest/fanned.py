"""Where a backfill's batches of whole host-days run: on Dask workers (`[compute] dask`,
docs/dask.md). A worker puts each batch through the pipeline's steps as the host would
(`read_and_check`, `new_keys`, `CompactAhead.write`) into the host-days' staging
directories, and sends back only what the host records. A batch it does not take whole (a
file set aside, too large to read at once, a repeated key) writes nothing and comes back
refused, as does one whose keys the host finds loaded already: the host loads it itself.
A task that fails fails the ingest before anything is published; the staging directories go.

With `raw_location = "s3://..."` a worker reads a batch's objects from the store itself
(`_take_from_store`) and sends its compacted files' bytes back (`FanOut.receive`; docs/dask.md).
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from gpufleet.config import Config, S3Config
from gpufleet.integrations.mirror import reads_object_storage, stored_objects
from gpufleet.storage.s3 import StoredObject, downloaded
from gpufleet.warehouse.base.sample_files import LoadedFile, SampleFile
from gpufleet.warehouse.ingest.check import Checked, read_and_check
from gpufleet.warehouse.ingest.insert import BatchOutcome, Keys, any_loaded, loaded_files, new_keys
from gpufleet.warehouse.ingest.values import TimeLimits
from gpufleet.warehouse.lake.compact_ahead import NOT_AHEAD, CompactAhead
from gpufleet.warehouse.lake.compacted_file import remove_staging, staged_file, staging_directory
from gpufleet.warehouse.lake.fanout import FanOut, task_label, task_runs


@dataclass(frozen=True, kw_only=True)
class LoadTask:
    """What a worker needs to read a run of batches: plain values, sent by pickle."""

    index: int  # 0-based
    count: int  # tasks in the ingest
    data_dir: str  # absolute: the batches' paths are relative to it ("": read from `store`)
    batches: tuple[tuple[SampleFile, ...], ...]
    listed: dict[str, tuple[str, ...]]  # each host-day's files (directory -> relative paths)
    today: dt.date  # host-days before it are over
    limits: TimeLimits  # the times a sample may have (the host's [ingest] keys, its time)
    run: str  # the ingest's run, which names its staging directories (`CompactAhead.run`)
    store: S3Config | None = None  # where the batches' objects are, when read from there
    objects: dict[str, StoredObject] = field(default_factory=dict)  # by relative path

    @property
    def label(self) -> str:
        first, last = self.batches[0][0].directory, self.batches[-1][-1].directory
        return task_label("load", self.index, self.count, first, last)


@dataclass(frozen=True, kw_only=True)
class BatchTaken:
    """A batch a worker read and wrote as compacted files."""

    loaded: tuple[LoadedFile, ...]  # each file with its rows and time range
    rows: int
    keys: Keys  # its GPUs and times
    written: dict[str, frozenset[str]]  # host-day directory -> the GPUs of its file


@dataclass(frozen=True, kw_only=True)
class LoadTaskResult:
    """What a task did: per batch, what it took, or None (the host loads that batch); read
    from the store, each compacted file (host-day directory -> its bytes)."""

    seconds: float
    batches: tuple[BatchTaken | None, ...]
    files: dict[str, bytes] = field(default_factory=dict)


def run_load_task(task: LoadTask) -> LoadTaskResult:
    """Read, check and compact the task's batches (on a worker). A retried task writes the
    same bytes under the same names (`write_compacted` writes beside, then renames)."""
    started = time.perf_counter()
    files: dict[str, bytes] = {}
    if task.store is None:
        config = Config(data_dir=Path(task.data_dir))
        taken = tuple(_take(config, task, list(batch)) for batch in task.batches)
    else:
        taken = tuple(
            _take_from_store(task.store, task, list(batch), files) for batch in task.batches
        )
    return LoadTaskResult(seconds=time.perf_counter() - started, batches=taken, files=files)


def _take_from_store(
    store: S3Config, task: LoadTask, batch: list[SampleFile], files: dict[str, bytes]
) -> BatchTaken | None:
    """`_take` of a batch whose objects are read from the store into a folder of the
    worker's own, its compacted files' bytes put in `files`; None (the host loads it from
    its copies) when an object does not read as the host copied it."""
    objects = [task.objects[file.path] for file in batch]
    try:
        with downloaded(objects, endpoint_url=store.endpoint_url, region=store.region) as own:
            for directory in {file.directory for file in batch}:
                staging_directory(own / directory, task.run).mkdir()
            taken = _take(Config(data_dir=own), task, batch)
            if taken is not None:
                files.update({d: staged_file(own, d, task.run).read_bytes() for d in taken.written})
            return taken
    except OSError:
        return None


def _take(config: Config, task: LoadTask, batch: list[SampleFile]) -> BatchTaken | None:
    ahead = CompactAhead(config, task.today, task.listed, run=task.run)
    checked = read_and_check(config, batch, ahead, task.limits)
    if not isinstance(checked, Checked) or checked.bad or NOT_AHEAD in checked.parts:
        return None
    for directory in {file.directory for file in batch}:
        if not staging_directory(config.data_dir / directory, task.run).is_dir():  # the host's
            raise FileNotFoundError(f"{config.data_dir / directory}: the ingest is over")
    rows = checked.rows
    keys = new_keys(rows)
    if keys is None:
        return None
    try:
        ahead.write(rows, checked.files, checked.parts, checked.versions)
        ahead.wait()
    finally:
        ahead.close()
    return BatchTaken(
        loaded=tuple(loaded_files(checked.files, rows)),
        rows=rows.num_rows,
        keys=keys,
        written={directory: item.gpus for directory, item in ahead.written.items()},
    )


@dataclass(kw_only=True)
class LoadFanOut(FanOut[LoadTask, LoadTaskResult]):
    """Where a backfill's whole host-days are read (`FanOut`)."""

    def load(
        self,
        batches: Sequence[Sequence[SampleFile]],
        ahead: CompactAhead,
        limits: TimeLimits,
        *,
        progress: Callable[[str], None],
    ) -> list[BatchTaken | None]:
        """Each batch read (its times checked against `limits`) and compacted on the workers
        (None: left to the host). Batches whose host-days are not all whole and over here,
        or with a file that is no object in the store, are left to the host unread."""
        # Read from the store (raw_location = "s3://..."): each file of a batch sent an object.
        store = self.config.s3 if reads_object_storage(self.config) else None
        objects = stored_objects(self.config) if store else {}
        sent = [
            index
            for index, batch in enumerate(batches)
            if ahead.whole(batch) and (not store or all(f.path in objects for f in batch))
        ]
        found: list[BatchTaken | None] = [None] * len(batches)
        if not sent:
            return found
        directories = {file.directory for i in sent for file in batches[i]}
        self._targets = {d: staged_file(self.config.data_dir, d, ahead.run) for d in directories}
        for target in self._targets.values():
            shutil.rmtree(target.parent, ignore_errors=True)
            target.parent.mkdir(parents=True)  # (its date= folder is new when left in the store)
        runs = task_runs(
            [batches[i] for i in sent], self.workers(), lambda b: sum(f.size_bytes for f in b)
        )
        tasks = [
            LoadTask(
                index=index,
                count=len(runs),
                data_dir="" if store else str(self.config.data_dir.absolute()),
                batches=tuple(tuple(batch) for batch in run),
                # the run's host-days (whole: every one is listed)
                listed={f.directory: ahead.listed[f.directory] for b in run for f in b},
                today=ahead.today,
                limits=limits,
                run=ahead.run,
                store=store,
                objects={f.path: objects[f.path] for b in run for f in b} if store else {},
            )
            for index, run in enumerate(runs)
        ]
        files = sum(len(batches[i]) for i in sent)
        progress(
            f"ingest: {len(sent)} batches of whole host-days ({files:,} files) read on "
            f"the Dask workers in {len(tasks)} tasks"
        )
        # (the caller discards the staging when it fails)
        taken = [batch for result in self._run_tasks(tasks) for batch in result.batches]
        for index, batch in zip(sent, taken, strict=True):
            found[index] = batch
            if batch is None:  # the host loads it: its (empty) staging directories go
                self._remove({file.directory for file in batches[index]})
        return found

    def adopt(
        self, con: duckdb.DuckDBPyConnection, taken: BatchTaken, ahead: CompactAhead
    ) -> BatchOutcome | None:
        """Record a batch a worker took as written `ahead` (compaction swaps its files in; a
        worker writes only whole host-days, each of the files `ahead` listed), or None, its
        staging directories removed, when one of its keys is loaded already (the host loads
        it then, and drops the repeats)."""
        if any_loaded(con, self.config, taken.keys, ahead):
            self._remove(taken.written)
            return None
        for directory, gpus in sorted(taken.written.items()):
            ahead.adopt(directory, ahead.listed[directory], gpus)
        return BatchOutcome(
            rows_read=taken.rows, rows_inserted=taken.rows, loaded=list(taken.loaded)
        )

    def discard(self) -> None:
        """Remove the staging directories of the batches sent (the ingest failed)."""
        self._remove(self._targets)

    def _remove(self, directories: Iterable[str]) -> None:
        for directory in directories:
            remove_staging(self._targets[directory].parent)
