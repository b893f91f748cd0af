"""Compaction of the Parquet lake: one sorted zstd file per host per completed day.

Collectors write one file per host per flush (144 a day at the default 10 minutes), and at
fleet scale the cost of reading the lake is opening files, not decoding them. Once every
file of a completed UTC day of a host has been loaded, those files are replaced by one file
sorted by (gpu_uuid, ts): the partition directory is rebuilt beside the original and the two
are swapped with one `renameat2(RENAME_EXCHANGE)`, so a reader listing the directory sees
either the collector files or the compacted file, never both and never neither.

The compacted file takes the originals' place in `loaded_files`, so it is never loaded
again. Should the process die between the swap and the warehouse publish, the next ingest
finds the compacted file unrecorded, loads it, and deduplication on (gpu_uuid, ts) keeps
every sample once: the lake heals itself.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from collectors.schema import SCHEMA_VERSION
from gpufleet.config import Config

COMPACTED_PREFIX = "compacted-"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@dataclass(frozen=True)
class CompactionResult:
    partitions: int
    files_replaced: int
    bytes_before: int
    bytes_after: int

    def __str__(self) -> str:
        return (
            f"compact: {self.partitions} host-days, {self.files_replaced} files -> "
            f"{self.partitions}, {self.bytes_before:,} -> {self.bytes_after:,} bytes"
        )


@dataclass(frozen=True)
class _Partition:
    directory: Path  # raw/samples/date=D/host=H
    day: dt.date
    files: tuple[str, ...]  # paths relative to the data directory


def _exchange(a: Path, b: Path) -> None:
    """Atomically swap two directories (Linux renameat2); two renames where unsupported."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
        if result == 0:
            return
    parked = a.with_name(a.name + ".swap")
    os.rename(a, parked)
    os.rename(b, a)
    os.rename(parked, b)


def _candidates(con: duckdb.DuckDBPyConnection, config: Config, today: dt.date) -> list[_Partition]:
    """Host-days before `today` (UTC) whose loaded files are more than one, or not compacted."""
    rows = con.execute(
        """
        select
            regexp_extract(path, '^(.*)/[^/]+$', 1) as directory,
            list(path order by path) as files,
        from loaded_files
        where path like 'raw/samples/date=%/host=%/%'
        group by directory
        having count(*) > 1 or bool_or(not regexp_matches(path, '/compacted-[^/]+$'))
        order by directory
        """
    ).fetchall()
    partitions: list[_Partition] = []
    for directory, files in rows:
        day_part = Path(directory).parent.name.removeprefix("date=")
        try:
            day = dt.date.fromisoformat(day_part)
        except ValueError:
            continue
        if day >= today:
            continue
        absolute = config.data_dir / directory
        present = (
            {
                f"{directory}/{entry.name}"
                for entry in os.scandir(absolute)
                if entry.is_file() and not entry.name.startswith((".", "_"))
            }
            if absolute.is_dir()
            else set()
        )
        # Only when every visible file there is loaded: a late file waits for the next ingest.
        if present and present == set(files):
            partitions.append(_Partition(absolute, day, tuple(files)))
    return partitions


def _compact_one(
    con: duckdb.DuckDBPyConnection, config: Config, partition: _Partition
) -> tuple[int, int]:
    """Rebuild one partition as a single file, swap it in; returns (bytes before, after)."""
    directory = partition.directory
    staging = directory.with_name(f".{directory.name}.compacting")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    target_name = f"{COMPACTED_PREFIX}{partition.day.isoformat()}.parquet"
    sources = [str(config.data_dir / path) for path in partition.files]
    before = sum(os.path.getsize(path) for path in sources)
    con.execute(
        f"""
        copy (
            select * exclude (_rank)
            from (
                select
                    *,
                    row_number() over (partition by gpu_uuid, ts) as _rank,
                from read_parquet($sources, union_by_name = true, hive_partitioning = false)
            )
            where _rank = 1
            order by gpu_uuid, ts
        ) to '{_sql_path(staging / target_name)}' (
            format parquet,
            compression zstd,
            row_group_size 122880,
            kv_metadata {{
                'gpufleet.schema_version': '{SCHEMA_VERSION}',
                'gpufleet.compacted_from': '{len(sources)}'
            }}
        )
        """,
        {"sources": sources},
    )
    _exchange(directory, staging)
    # `staging` now holds the originals; a file that arrived meanwhile goes back to the lake.
    for entry in os.scandir(staging):
        relative = f"{directory.relative_to(config.data_dir).as_posix()}/{entry.name}"
        if not entry.name.startswith((".", "_")) and relative not in partition.files:
            os.rename(entry.path, directory / entry.name)
    shutil.rmtree(staging)
    after = os.path.getsize(directory / target_name)
    _record(con, config, partition, directory / target_name)
    return before, after


def _record(
    con: duckdb.DuckDBPyConnection, config: Config, partition: _Partition, compacted: Path
) -> None:
    """Let the compacted file stand in `loaded_files` for the files it replaced."""
    relative = compacted.relative_to(config.data_dir).as_posix()
    stat = compacted.stat()
    con.execute(
        """
        insert or replace into loaded_files
        select
            $relative,
            $size,
            $mtime,
            sum(row_count),
            min(min_ts),
            max(max_ts),
            now(),
        from loaded_files
        where list_contains($files, path)
        """,
        {
            "relative": relative,
            "size": stat.st_size,
            "mtime": stat.st_mtime_ns,
            "files": list(partition.files),
        },
    )
    con.execute(
        "delete from loaded_files where list_contains($files, path) and path <> $relative",
        {"files": list(partition.files), "relative": relative},
    )


def _sql_path(path: Path) -> str:
    """A path as a SQL string literal body (COPY ... TO takes no parameter)."""
    return str(path).replace("'", "''")


def compact_completed_days(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    today: dt.date | None = None,
    progress: Callable[[str], None] | None = None,
) -> CompactionResult:
    """Compact every fully loaded host-day before `today` (UTC) inside a write transaction."""
    day = today or dt.datetime.now(dt.UTC).date()
    partitions = _candidates(con, config, day)
    before_total = after_total = replaced = 0
    for number, partition in enumerate(partitions, start=1):
        before, after = _compact_one(con, config, partition)
        before_total += before
        after_total += after
        replaced += len(partition.files)
        if progress and (number % 50 == 0 or number == len(partitions)):
            progress(f"compact: {number}/{len(partitions)} host-days")
    return CompactionResult(len(partitions), replaced, before_total, after_total)
