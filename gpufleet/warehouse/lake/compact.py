"""Compaction of the Parquet lake: one sorted lz4 file per host per completed day.

`compact_completed_days` replaces the collector files of each fully loaded host-day before
today with one file, swapped in atomically, and records it in `loaded_files` in their place.
The encodings, the swap and how a crash heals: `docs/warehouse.md` (compaction).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.errors import GpufleetError
from gpufleet.integrations.pending import pending_by_directory, settle_pending
from gpufleet.warehouse.base.folder_sites import contract_columns_sql, pattern_site
from gpufleet.warehouse.base.raw_tables import SAMPLE_COLUMNS, literal_path
from gpufleet.warehouse.lake.compact_ahead import CompactAhead
from gpufleet.warehouse.lake.compacted_file import (
    collector_versions,
    compacted_name,
    exchange_directories,
    joined_versions,
    partition_day,
    remove_other_staging,
    remove_staging,
    run_id,
    staging_directory,
    write_compacted_batches,
)
from gpufleet.warehouse.lake.content import content_hash
from gpufleet.warehouse.lake.fanout import CompactFanOut, HostDay
from gpufleet.warehouse.lake.replaced import replaced_files
from gpufleet.warehouse.lake.samples import refresh_samples_view
from gpufleet.warehouse.publish.log import current_generation

logger = logging.getLogger("gpufleet.compact")


@dataclass(frozen=True)
class CompactionResult:
    partitions: int
    files_replaced: int
    bytes_before: int
    bytes_after: int
    from_load: int = 0  # host-days written from the rows as they were loaded, not re-read

    def __str__(self) -> str:
        return (
            f"compact: {self.partitions} host-days ({self.from_load} from the load, "
            f"{self.partitions - self.from_load} re-read), {self.files_replaced} files -> "
            f"{self.partitions}, {self.bytes_before:,} -> {self.bytes_after:,} bytes"
        )


@dataclass(frozen=True)
class _Partition:
    directory: Path  # raw/samples/date=D/host=H
    day: dt.date
    files: tuple[str, ...]  # paths relative to the data directory
    size_bytes: int  # of those files together
    # The collector files its compacted file replaces (size by name, as loaded), those its
    # compacted file named before included (`replaced.py`).
    replaced: tuple[tuple[str, int], ...] = ()


def _candidates(
    con: duckdb.DuckDBPyConnection, config: Config, today: dt.date, exclude: set[str]
) -> list[_Partition]:
    """Host-days before `today` (UTC) whose loaded files are more than one, or not compacted,
    and all still exactly as they were loaded (same names, sizes and mtimes)."""
    rows = con.execute(
        """
        select
            regexp_extract(path, '^(.*)/[^/]+$', 1) as directory,
            list((path, size_bytes, mtime_ns) order by path) as files,
        from loaded_files
        where path like 'raw/samples/date=%/host=%/%'
            -- a host-day whose file the warehouse reads from the lake is never rewritten
            and regexp_extract(path, '^(.*)/[^/]+$', 1) not in (
                select regexp_extract(path, '^(.*)/[^/]+$', 1) from build_state.lake_files
            )
        group by directory
        having count(*) > 1 or bool_or(not regexp_matches(path, '/compacted-[^/]+$'))
        order by directory
        """
    ).fetchall()
    partitions: list[_Partition] = []
    pending = pending_by_directory(config)  # checked by the store's sizes and times
    for directory, files in rows:
        day = partition_day(directory)
        if day is None:
            continue
        absolute = config.data_dir / directory
        if day >= today or not (absolute.is_dir() or directory in pending):
            continue
        loaded = {path: (size, mtime) for path, size, mtime in files}
        present = {
            f"{directory}/{entry.name}": (entry.stat().st_size, entry.stat().st_mtime_ns)
            for entry in (os.scandir(absolute) if absolute.is_dir() else ())
            if entry.is_file() and not entry.name.startswith((".", "_"))
        } | pending.get(directory, {})
        # Only when every visible file there is loaded and unchanged since: a late file
        # waits for the next ingest, a changed one for its quarantine.
        if present == loaded and not exclude & loaded.keys():
            size = sum(size for size, _ in loaded.values())
            replaced = _replaced(absolute, day, loaded)
            partitions.append(_Partition(absolute, day, tuple(sorted(loaded)), size, replaced))
    return partitions


def _replaced(
    directory: Path, day: dt.date, loaded: dict[str, tuple[int, int]]
) -> tuple[tuple[str, int], ...]:
    """The collector files a host-day's new compacted file replaces, size by name: its
    loaded files, and those its compacted file, when it is one of them, replaced before."""
    name = compacted_name(day)
    sizes = {path.rsplit("/", 1)[-1]: size for path, (size, _) in loaded.items()}
    replaced = replaced_files(directory / name) if name in sizes else {}
    replaced.update(sizes)
    replaced.pop(name, None)
    return tuple(sorted(replaced.items()))


def _select_list(con: duckdb.DuckDBPyConnection, sources: list[str]) -> str:
    """The contract's columns cast to the contract's types (NULL where no file has one; a
    NULL `cluster` the site of the files' `host=<host>@<site>` folder), then any extra
    columns of newer collectors as they are."""
    probe = con.execute(
        "select * from read_parquet($sources, union_by_name = true, hive_partitioning = false)"
        " limit 0",
        {"sources": sources},
    )
    present = [column[0] for column in probe.description or ()]
    contract = {name for name, _ in SAMPLE_COLUMNS}
    items = contract_columns_sql(present, pattern_site(sources[0]) if sources else None)
    items += [f'"{name}"' for name in present if name not in contract]
    return ", ".join(items)


# Rows a host-day compacted from its files is streamed in: a host-day of millions of samples
# is written a GPU at a time, not held whole (DuckDB sorts it within its memory limit).
COMPACT_BATCH_ROWS = 100_000


def compact_from_files(
    con: duckdb.DuckDBPyConnection,
    sources: list[str],
    target: Path,
    *,
    replaced: Mapping[str, int] | None = None,
) -> None:
    """Compact the sources (their rows read again; each (gpu_uuid, ts) once, the first by
    the sources' order, as the load kept it) into `target`: the same rows and bytes on any
    connection (a Dask worker's: `fanout.py`). `replaced`: the collector files it stands
    for, size by name (`replaced.py`)."""
    versions = joined_versions(list(collector_versions(con, sources).values()))
    # A relation, not an executed statement: DuckDB hands its rows over as they come.
    rows = con.sql(
        f"""
        select * exclude (_rank)
        from (
            select
                {_select_list(con, sources)},
                row_number() over (
                    partition by gpu_uuid, ts order by file_index, file_row_number
                ) as _rank,
            from read_parquet($sources, union_by_name = true, hive_partitioning = false)
        )
        where _rank = 1
        order by gpu_uuid, ts
        """,
        params={"sources": sources},
    ).to_arrow_reader(COMPACT_BATCH_ROWS)
    write_compacted_batches(
        rows, target, versions=versions, sources=len(sources), replaced=replaced
    )


def _compact_one(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    partition: _Partition,
    *,
    ready: bool,
    run: str,
    failure: str | None = None,
) -> tuple[int, int] | None:
    """Swap in one partition's single file (`ready` in its staging directory: written ahead
    from the load or by a Dask worker, else built from its files now); (bytes before,
    after), or None when its files could not be read (`failure`: why, where a worker read
    them; they stay as they are, with a warning)."""
    directory = partition.directory
    staging = staging_directory(directory, run)
    target_name = compacted_name(partition.day)
    try:
        if failure is None and not ready:
            sources = [literal_path(str(config.data_dir / path)) for path in partition.files]
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            compact_from_files(
                con, sources, staging / target_name, replaced=dict(partition.replaced)
            )
    except (duckdb.Error, pa.ArrowException, GpufleetError) as exc:
        text = str(exc).strip()
        failure = text.splitlines()[0] if text else type(exc).__name__
    if failure is not None:
        shutil.rmtree(staging, ignore_errors=True)
        relative = directory.relative_to(config.data_dir).as_posix()
        logger.warning("compact: left %s as it is: %s", printable(relative), printable(failure))
        return None
    directory.mkdir(exist_ok=True)  # none yet when its files were left in the store
    exchange_directories(directory, staging)
    # `staging` now holds the originals; a file that arrived meanwhile goes back to the lake.
    names = {path.rsplit("/", 1)[-1] for path in partition.files}
    for entry in os.scandir(staging):
        if not entry.name.startswith((".", "_")) and entry.name not in names:
            os.rename(entry.path, directory / entry.name)
    shutil.rmtree(staging)
    after = os.path.getsize(directory / target_name)
    return partition.size_bytes, after


def _compact_on_workers(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    fan_out: CompactFanOut,
    partitions: list[_Partition],
    progress: Callable[[str], None] | None,
    run: str,
) -> dict[Path, str]:
    """Write the partitions' compacted files into run `run`'s staging directories on
    `fan_out`'s workers; those whose files could not be read, with why (raises when a task
    failed)."""
    host_days = [
        HostDay.of(config, p.directory, p.day, p.files, p.size_bytes, replaced=p.replaced, run=run)
        for p in partitions
    ]
    failed = fan_out.compact(con, host_days, progress=progress)
    return {
        partition.directory: failed[day.directory]
        for partition, day in zip(partitions, host_days, strict=True)
        if day.directory in failed
    }


def _record(
    con: duckdb.DuckDBPyConnection, config: Config, done: list[tuple[_Partition, bool]]
) -> None:
    """Let each compacted file stand in `loaded_files` for the files it replaced (in one
    statement for all: one per partition would scan loaded_files each time), and list those
    written from this ingest's rows (`written`) in `build_state.lake_files` with its load
    id: their samples are read from them, and are new to a build."""
    if not done:
        return
    new, old, sizes, mtimes, hashes, days, joins = [], [], [], [], [], [], []
    for partition, written in done:
        target = partition.directory / compacted_name(partition.day)
        stat = target.stat()
        digest = content_hash(target)  # a later mtime alone changes nothing (`content.py`)
        relative = target.relative_to(config.data_dir).as_posix()
        for path in partition.files:
            new.append(relative)
            old.append(path)
            sizes.append(stat.st_size)
            mtimes.append(stat.st_mtime_ns)
            hashes.append(digest)
            days.append(partition.day)
            joins.append(written)
    con.register(
        "_compacted",
        pa.table(
            {
                "new": new,
                "old": old,
                "size": sizes,
                "mtime": mtimes,
                "hash": pa.array(hashes, pa.int64()),
                "day": days,
                "join": joins,
            }
        ),
    )
    try:
        con.execute(
            """
            insert or replace into loaded_files
                (path, size_bytes, mtime_ns, row_count, min_ts, max_ts, loaded_at, content_hash)
            select
                compacted.new, any_value(compacted.size), any_value(compacted.mtime),
                sum(loaded.row_count), min(loaded.min_ts), max(loaded.max_ts), now(),
                any_value(compacted.hash),
            from loaded_files as loaded
            inner join _compacted as compacted on compacted.old = loaded.path
            group by compacted.new
            """
        )
        con.execute(
            """
            delete from loaded_files
            where path in (select old from _compacted)
                and path not in (select new from _compacted)
            """
        )
        if not any(joins):
            return
        con.execute(
            """
            insert into build_state.lake_files
                (path, day, row_count, evicted_at, load_id, sample_columns)
            select path, compacted.day, row_count, now(), $load_id, $held
            from loaded_files
            inner join (select distinct new, day from _compacted where "join") as compacted
                on compacted.new = loaded_files.path
            """,
            # Written from the load's rows, in this release's columns (`write_compacted`).
            {"load_id": current_generation(con), "held": len(SAMPLE_COLUMNS)},
        )
    finally:
        con.unregister("_compacted")


def compact_completed_days(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    today: dt.date | None = None,
    exclude: Iterable[str] = (),
    progress: Callable[[str], None] | None = None,
    ahead: CompactAhead | None = None,
    fan_out: CompactFanOut | None = None,
) -> CompactionResult:
    """Compact every fully loaded host-day before `today` (UTC) inside a write transaction.

    Host-days holding a path of `exclude` (files this ingest set aside) are left alone. The
    files `ahead` wrote from the load are swapped in where they were written from the same
    files, and join the lake; the rows of the others go into samples_stored. The host-days
    compacted from their files are so on `fan_out`'s workers when given (`fanout.py`), all
    before the first is swapped in. The staging directories are named by the run (`ahead`'s,
    else a new one): those of any other run are removed at the end.
    """
    day = today or dt.datetime.now(dt.UTC).date()
    run = ahead.run if ahead is not None else run_id()
    partitions = _candidates(con, config, day, set(exclude))
    written = [
        ahead is not None
        and ahead.take(p.directory.relative_to(config.data_dir).as_posix(), p.files) is not None
        for p in partitions
    ]
    failures: dict[Path, str] | None = None  # by the workers, when they read the files
    if fan_out is not None:
        reread = [p for p, ahead_of in zip(partitions, written, strict=True) if not ahead_of]
        try:
            failures = (
                _compact_on_workers(con, config, fan_out, reread, progress, run) if reread else {}
            )
        except BaseException:  # nothing is swapped in yet: the files written ahead go too
            taken = [p.directory for p, w in zip(partitions, written, strict=True) if w]
            left = [item.target.parent for item in ahead.written.values()] if ahead else []
            for folder in [*(staging_directory(d, run) for d in taken), *left]:
                remove_staging(folder)
            raise
    compacted = before_total = after_total = replaced = from_load = 0
    done: list[tuple[_Partition, bool]] = []
    for number, (partition, ahead_of) in enumerate(zip(partitions, written, strict=True), 1):
        outcome = _compact_one(
            con,
            config,
            partition,
            ready=ahead_of or failures is not None,
            run=run,
            failure=None if failures is None else failures.get(partition.directory),
        )
        if outcome is not None:
            done.append((partition, ahead_of))
            from_load += ahead_of
            compacted += 1
            before_total += outcome[0]
            after_total += outcome[1]
            replaced += len(partition.files)
        if progress and (number % 50 == 0 or number == len(partitions)):
            progress(f"compact: {number}/{len(partitions)} host-days")
    _record(con, config, done)
    settle_pending(config, {p.directory.relative_to(config.data_dir).as_posix() for p, _ in done})
    if ahead is not None:
        ahead.load_rest(con)
    remove_other_staging(config.samples_dir, run)  # dead runs' (a crash, a late Dask task)
    if from_load:
        refresh_samples_view(con, config)
    return CompactionResult(compacted, replaced, before_total, after_total, from_load)
