"""Compacted files written from the rows as ingest loads them, straight into the lake, so
a backfill reads each collector file once and a build has nothing to move.

A host-day whose every listed file is new and in one batch (a backfill, or a day that
arrives whole) is compacted from that batch's rows, already read and checked for the load:
the file goes into the partition's staging directory instead of the rows into
`samples_stored`. Compaction swaps it in if the host-day still has exactly those files
then, and lists it in `build_state.lake_files` with this publish's load id (the samples of
a load, for the next build); otherwise its rows go into `samples_stored` after all
(`load_rest`). Any other host-day is compacted from its files, as before. The file itself
is written by compacted_file.py.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from gpufleet.config import Config
from gpufleet.integrations.pending import fetch_pending
from gpufleet.warehouse.base.raw_tables import QUOTED_SAMPLE_COLUMNS, SAMPLE_TYPES, literal_path
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.lake.compacted_file import (
    collector_versions,
    compacted_name,
    joined_versions,
    partition_day,
    run_id,
    staging_directory,
    write_compacted,
    write_compacted_batches,
)
from gpufleet.warehouse.publish.log import current_generation

# What the ingest modules import from here (`collector_versions` and `staging_directory`
# are compacted_file.py's, offered here too).
__all__ = [
    "NOT_AHEAD",
    "WRITER_THREADS",
    "CompactAhead",
    "collector_versions",
    "staging_directory",
]

# Threads writing a backfill's compacted files: the writing is a third of a compacting
# ingest's CPU, and with one thread the batches waited for it.
WRITER_THREADS = 2
NOT_AHEAD = -1  # the part of a file whose host-day is not written ahead


@dataclass(frozen=True)
class _Written:
    files: tuple[str, ...]  # the collector files it was written from, relative
    target: Path  # the compacted file, in the partition's staging directory
    gpus: frozenset[str]  # the GPUs of its samples
    day: dt.date  # the partition's UTC day


@dataclass(frozen=True)
class _Job:
    target: Path
    rows: pa.Table
    versions: str  # the collector versions of its files, joined
    sources: int  # how many collector files it is written from
    replaced: dict[str, int]  # those files' sizes, by name


@dataclass
class CompactAhead:
    """The host-days an ingest may write ahead, and the ones it wrote.

    The files are written in a thread of their own while the next batch is read (pyarrow
    and DuckDB release the GIL, and a batch's read leaves part of the machine idle): one
    batch's files at a time, so at most one batch's rows wait to be written. Everything
    that reads the written files (`paths_between`, `take`, `load_rest`) waits for them
    first, and a failed write raises there. `close` when done."""

    config: Config
    today: dt.date
    listed: dict[str, tuple[str, ...]]  # directory -> every file listed there, relative
    run: str = field(default_factory=run_id)  # names its staging directories (and compaction's)
    written: dict[str, _Written] = field(default_factory=dict)  # by directory
    write_seconds: float = 0.0  # how long the writer thread spent writing, so far
    _writer: ThreadPoolExecutor | None = None
    _pending: list[Future[None]] = field(default_factory=list)

    @classmethod
    def plan(cls, config: Config, files: Sequence[SampleFile], today: dt.date) -> CompactAhead:
        listed: dict[str, list[str]] = {}
        for file in files:
            listed.setdefault(file.directory, []).append(file.path)
        return cls(config, today, {d: tuple(sorted(paths)) for d, paths in listed.items()})

    def whole(self, batch: Sequence[SampleFile]) -> bool:
        """Whether every host-day of the batch is over and has all its listed files in it
        (so `parts` writes all of them ahead, unless a file is set aside or has a column
        beyond the contract's)."""
        in_batch: dict[str, list[str]] = {}
        for file in batch:
            in_batch.setdefault(file.directory, []).append(file.path)
        return all(
            (day := partition_day(directory)) is not None
            and day < self.today
            and tuple(sorted(paths)) == self.listed.get(directory)
            for directory, paths in in_batch.items()
        )

    def adopt(self, directory: str, files: tuple[str, ...], gpus: frozenset[str]) -> None:
        """Count the compacted file a Dask worker wrote for `directory` from `files` as
        written here (`ingest/fanned.py`)."""
        day = partition_day(directory)
        assert day is not None
        target = staging_directory(self.config.data_dir / directory, self.run) / compacted_name(day)
        if not target.is_file():
            raise FileNotFoundError(f"{target}: the worker's compacted file is missing")
        self.written[directory] = _Written(files, target, gpus, day)

    def parts(
        self, batch: Sequence[SampleFile], columns: Mapping[str, Collection[str]]
    ) -> list[int]:
        """Each file's part: one number per host-day to write from this batch's rows, or
        NOT_AHEAD. A host-day qualifies when every file listed in its directory is in the
        batch, its day is over and no file has a column beyond the contract's (`columns`:
        each file's, by path; a newer collector's extra column, which only compaction from
        the files keeps)."""
        in_batch: dict[str, list[str]] = {}
        for file in batch:
            in_batch.setdefault(file.directory, []).append(file.path)
        numbers: dict[str, int] = {}
        for directory, paths in in_batch.items():
            day = partition_day(directory)
            if (
                day is not None
                and day < self.today
                and tuple(sorted(paths)) == self.listed.get(directory)
                and all(set(columns[path]).issubset(SAMPLE_TYPES) for path in paths)
            ):
                numbers[directory] = len(numbers)
        return [numbers.get(file.directory, NOT_AHEAD) for file in batch]

    def write(
        self,
        rows: pa.Table,
        batch: Sequence[SampleFile],
        parts: list[int],
        versions: Mapping[str, str],
    ) -> None:
        """Start writing the compacted file of each part from `rows` (sorted by _part,
        gpu_uuid, ts; `_file_index` and `_part` are dropped) into its staging
        directory, once the previous batch's files are written. `versions`: the collector
        version of each file, by absolute path (`collector_versions`)."""
        self.wait()
        members: dict[int, list[SampleFile]] = {}
        for file, part in zip(batch, parts, strict=True):
            if part != NOT_AHEAD:
                members.setdefault(part, []).append(file)
        runs = pc.run_end_encode(rows.column("_part").combine_chunks())
        ends = runs.run_ends.to_pylist()
        jobs: list[_Job] = []
        for part, start, end in zip(runs.values.to_pylist(), [0, *ends[:-1]], ends, strict=True):
            if part == NOT_AHEAD:
                continue
            files = tuple(sorted(file.path for file in members[part]))
            directory = files[0].rsplit("/", 1)[0]
            staging = staging_directory(self.config.data_dir / directory, self.run)
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            day = partition_day(directory)
            assert day is not None
            part_rows = rows.slice(start, end - start)
            target = staging / compacted_name(day)
            gpus = frozenset(part_rows.column("gpu_uuid").unique().to_pylist())
            self.written[directory] = _Written(files, target, gpus, day)
            sources = [str(self.config.data_dir / path) for path in files]
            jobs.append(
                _Job(
                    target,
                    part_rows.drop_columns(["_file_index", "_part"]),
                    joined_versions([versions[p] for p in sources if p in versions]),
                    len(sources),
                    {file.path.rsplit("/", 1)[-1]: file.size_bytes for file in members[part]},
                )
            )
        if jobs:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(
                    WRITER_THREADS, thread_name_prefix="gpufleet-compact"
                )
            self._pending = [
                self._writer.submit(self._write_jobs, jobs[i::WRITER_THREADS])
                for i in range(min(WRITER_THREADS, len(jobs)))
            ]

    def write_file(self, file: SampleFile, rows: pa.RecordBatchReader, version: str | None) -> None:
        """Write the compacted file of the host-day whose only file is `file` (its part, by
        `parts`) from its rows as they come (each (gpu_uuid, ts) once, in that order), here
        and now: a file too large to hold (`ingest/sliced.py`)."""
        self.wait()
        directory = file.directory
        staging = staging_directory(self.config.data_dir / directory, self.run)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        day = partition_day(directory)
        assert day is not None
        target = staging / compacted_name(day)
        gpus: set[str] = set()

        def noting_gpus() -> Iterator[pa.RecordBatch]:
            for batch in rows:
                gpus.update(pc.unique(batch.column("gpu_uuid")).to_pylist())
                yield batch

        started = time.perf_counter()
        try:
            write_compacted_batches(
                pa.RecordBatchReader.from_batches(rows.schema, noting_gpus()),
                target,
                versions=joined_versions([version] if version else []),
                sources=1,
                replaced={file.path.rsplit("/", 1)[-1]: file.size_bytes},
            )
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            self.write_seconds += time.perf_counter() - started
        self.written[directory] = _Written((file.path,), target, frozenset(gpus), day)

    def _write_jobs(self, jobs: Sequence[_Job]) -> None:
        """Write one batch's compacted files (in the writer thread)."""
        started = time.perf_counter()
        try:
            for job in jobs:
                write_compacted(
                    job.rows,
                    job.target,
                    versions=job.versions,
                    sources=job.sources,
                    replaced=job.replaced,
                )
        finally:
            self.write_seconds += time.perf_counter() - started

    def wait(self) -> None:
        """Until the files started are written; a failed write raises here."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self) -> None:
        """Stop the writer thread (after the file it is writing)."""
        if self._writer is not None:
            self._writer.shutdown(wait=True, cancel_futures=True)
            self._writer = None

    def paths_between(self, first: dt.date, last: dt.date, gpus: set[str]) -> list[str]:
        """The files written so far for days from `first` to `last` with samples of one of
        `gpus` (absolute paths): their samples are loaded, though in no table yet. (Reading
        only these keeps a backfill linear: a day's later batches hold other hosts' GPUs.)"""
        paths = [
            str(item.target)
            for item in self.written.values()
            if first <= item.day <= last and not item.gpus.isdisjoint(gpus)
        ]
        if paths:
            self.wait()
        return paths

    def take(self, directory: str, files: tuple[str, ...]) -> Path | None:
        """The file written ahead for this partition if it was written from exactly `files`
        (it is then compaction's to swap in)."""
        self.wait()
        found = self.written.get(directory)
        if found is None or found.files != files or not found.target.is_file():
            return None
        del self.written[directory]
        return found.target

    def load_rest(self, con: duckdb.DuckDBPyConnection) -> None:
        """Insert the rows of the files compaction did not take into `samples_stored` (they
        were loaded, but their day stays as collector files) and remove the files."""
        self.wait()
        for item in self.written.values():
            fetch_pending(self.config, item.files)  # the day stays as its files: here, then
            con.execute(
                f"insert into samples_stored ({QUOTED_SAMPLE_COLUMNS}, load_id) "
                f"select {QUOTED_SAMPLE_COLUMNS}, $load_id "
                "from read_parquet($path, hive_partitioning = false)",
                {"path": literal_path(str(item.target)), "load_id": current_generation(con)},
            )
            shutil.rmtree(item.target.parent, ignore_errors=True)
        self.written.clear()
