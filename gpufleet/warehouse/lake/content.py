"""A loaded file judged by what it holds, not by its mtime: a backup tool, `rsync -t` or a
restore that changes only a file's mtime changes nothing in the warehouse.

A compacted file is gpufleet's own: `loaded_files.content_hash` keeps the CRC-32 of its
bytes as compaction wrote it (or as loaded, one loaded as a new file: `raw/loaded.py`), and
a compacted file found with another mtime is read again.
The same size and CRC-32 is the same file (its new mtime is recorded); anything else is an
edit. An edit is never quarantined, as a lake file is part of the warehouse: a file whose
samples are still in `samples_stored` is written again from them; a file of the lake (its
samples kept there alone) cannot be, and is named in a warning on every ingest until it is
put back. A collector's file, whose CRC-32 is not kept (ingest would read every file twice
for it), is the same when it reads to the same rows as the warehouse holds of it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from gpufleet.collectors.schema import host_folder
from gpufleet.collectors.writer import safe_host
from gpufleet.config import Config
from gpufleet.warehouse.base.folder_sites import contract_columns_sql, pattern_site
from gpufleet.warehouse.base.raw_tables import (
    QUOTED_SAMPLE_COLUMNS,
    literal_path,
)
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.lake.compacted_file import compacted_name, partition_day, write_compacted
from gpufleet.warehouse.lake.replaced import replaced_files

COMPACTED_PATH = re.compile(
    r"^raw/samples/date=(?P<day>[0-9]{4}-[0-9]{2}-[0-9]{2})/host=(?P<host>[^/]+)/compacted-[^/]+$"
)
_ROW_HASH = f"hash({QUOTED_SAMPLE_COLUMNS})"


def content_hash(path: Path) -> int:
    """The CRC-32 of the file's bytes (about 2 GB/s: a lake file's day in a millisecond)."""
    crc = 0
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def is_compacted(path: str) -> bool:
    """Whether `path` (relative to the data directory) names a host-day's compacted file."""
    return COMPACTED_PATH.match(path) is not None


def replaced_in(directory: Path) -> dict[str, int]:
    """The collector files the compacted file of the host-day folder `directory`
    (`.../samples/date=D/host=H`) replaced, size by name; empty when it has none."""
    day = partition_day(directory.as_posix())
    return {} if day is None else replaced_files(directory / compacted_name(day))


@dataclass(frozen=True)
class ChangedFile:
    """A loaded file found with another size or mtime than `loaded_files` keeps."""

    file: SampleFile  # as found now
    size_bytes: int  # as loaded
    mtime_ns: int  # as loaded
    content_hash: int | None  # as written (compacted files only)
    lake_rows: int | None  # its rows in build_state.lake_files; None: not in the lake


def settle_compacted(
    con: duckdb.DuckDBPyConnection, config: Config, changed: Sequence[ChangedFile]
) -> list[str]:
    """Record the new mtime of each compacted file whose content is the same; write an
    edited one again from `samples_stored` where its samples are there; the warnings (one
    line each) about the edited ones. Never moves a file."""
    warnings: list[str] = []
    for item in changed:
        path = config.data_dir / item.file.path
        try:
            digest = content_hash(path)
        except FileNotFoundError:
            continue  # gone: not the listing's to judge
        if item.file.size_bytes == item.size_bytes and (
            digest == item.content_hash
            or (item.content_hash is None and _same_as_before(con, config, item))
        ):
            _record_file(con, item.file, digest)
        elif item.lake_rows is not None:
            warnings.append(
                f"{item.file.path}: this compacted file changed after it was loaded "
                f"({_was(item)}), and its samples are kept in it alone (build_state.lake_files): "
                "the warehouse cannot write it again. Put it back from a backup; until then "
                "it stays in place and `samples` reads it as it is now"
            )
        else:
            rows = rewrite_from_warehouse(con, config, item.file.path)
            if rows is None:
                warnings.append(
                    f"{item.file.path}: this compacted file changed after it was loaded "
                    f"({_was(item)}) and the warehouse holds none of its samples to write it "
                    "again from; it stays in place as it is"
                )
                continue
            warnings.append(
                f"{item.file.path}: this compacted file changed after it was loaded "
                f"({_was(item)}); written again from the warehouse's {rows:,} samples of "
                "its host-day (the edit is undone)"
            )
    return warnings


def _was(item: ChangedFile) -> str:
    if item.file.size_bytes != item.size_bytes:
        return f"{item.size_bytes:,} bytes, now {item.file.size_bytes:,}"
    return "the same size, other bytes"


def _same_as_before(con: duckdb.DuckDBPyConnection, config: Config, item: ChangedFile) -> bool:
    """For a compacted file written before its CRC-32 was kept: the lake's row count from
    its footer, or every row as the warehouse holds it."""
    path = config.data_dir / item.file.path
    if item.lake_rows is not None:
        try:
            return pq.read_metadata(path).num_rows == item.lake_rows
        except (OSError, ValueError):
            return False
    return same_rows_as_warehouse(con, config, item.file.path)


def _record_file(con: duckdb.DuckDBPyConnection, file: SampleFile, digest: int | None) -> None:
    con.execute(
        "update loaded_files set size_bytes = $size, mtime_ns = $mtime,"
        " content_hash = coalesce($digest, content_hash) where path = $path",
        {"size": file.size_bytes, "mtime": file.mtime_ns, "digest": digest, "path": file.path},
    )


def record_same(con: duckdb.DuckDBPyConnection, file: SampleFile) -> None:
    """Record the new size and mtime of a loaded file found to hold the same rows."""
    _record_file(con, file, None)


def _contract_columns(con: duckdb.DuckDBPyConnection, source: str) -> str:
    """The contract's columns of `source` cast to the contract's types (NULL where missing;
    a NULL `cluster` its `host=<host>@<site>` folder's site, as loaded)."""
    probe = con.execute(
        "select * from read_parquet($source, hive_partitioning = false) limit 0",
        {"source": source},
    )
    present = {column[0] for column in probe.description or ()}
    return ", ".join(contract_columns_sql(present, pattern_site(source)))


def same_rows_as_warehouse(con: duckdb.DuckDBPyConnection, config: Config, path: str) -> bool:
    """Whether the file reads to as many rows as when it was loaded (a file `loaded_files`
    no longer lists: any number), each with the same values as the warehouse's sample of
    its (gpu_uuid, ts) (a 64-bit hash of the row)."""
    try:
        with _row_hashes(con, config, path, "_touched_rows"):
            row = con.execute(
                f"""
                with bounds as (
                    select min(ts) as first_ts, max(ts) as last_ts from _touched_rows
                ),
                kept as (
                    select gpu_uuid, ts, {_ROW_HASH} as row_hash
                    from samples
                    where ts between (select first_ts from bounds)
                        and (select last_ts from bounds)
                )
                select
                    count(*),
                    count(*) filter (where kept.row_hash = touched.row_hash),
                    coalesce((select row_count from loaded_files where path = $path), count(*)),
                from _touched_rows as touched
                left join kept using (gpu_uuid, ts)
                """,
                {"path": path},
            ).fetchone()
    except duckdb.Error:
        return False  # it does not read as a sample file any more
    return row is not None and row[0] == row[1] == row[2]


@contextlib.contextmanager
def _row_hashes(
    con: duckdb.DuckDBPyConnection, config: Config, path: str, table: str
) -> Iterator[None]:
    """The file's rows as the temporary table `table` while inside: gpu_uuid, ts and a
    64-bit hash of the row's contract columns (`_ROW_HASH`), as the warehouse's are hashed."""
    source = literal_path(str((config.data_dir / path).absolute()))
    try:
        con.execute(
            f"""
            create or replace temp table {table} as
            select gpu_uuid, ts, {_ROW_HASH} as row_hash
            from (
                select {_contract_columns(con, source)}
                from read_parquet($source, hive_partitioning = false)
            )
            """,
            {"source": source},
        )
        yield
    finally:
        con.execute(f"drop table if exists temp.{table}")


def rewrite_from_warehouse(con: duckdb.DuckDBPyConnection, config: Config, path: str) -> int | None:
    """Write the compacted file `path` again from `samples_stored`'s rows of its host-day;
    the rows written, or None when there are none (the file is left as it is). Columns
    beyond the contract's (a newer collector's) are not in the warehouse, so not in it."""
    match = COMPACTED_PATH.match(path)
    if match is None:
        return None
    start = dt.datetime.combine(dt.date.fromisoformat(match["day"]), dt.time(), tzinfo=dt.UTC)
    window = {"start": start, "end": start + dt.timedelta(days=1)}
    # the (host, site) pairs whose folder it is: `host=<host>@<site>` for a site's host
    keys = [
        {"host": host, "cluster": cluster}
        for (host, cluster) in con.execute(
            """
            select distinct host, coalesce(cluster, '') from samples_stored
            where ts >= $start and ts < $end
            """,
            window,
        ).fetchall()
        if host_folder(safe_host(host), cluster) == match["host"]
    ]
    if not keys:
        return None
    table = con.sql(
        f"""
        select {QUOTED_SAMPLE_COLUMNS} from samples_stored
        where ts >= $start and ts < $end
            and list_contains($keys, {{'host': host, 'cluster': coalesce(cluster, '')}})
        order by gpu_uuid, ts
        """,
        params={**window, "keys": keys},
    ).to_arrow_table()
    target = config.data_dir / path
    write_compacted(
        table, target, versions=_versions(target), sources=0, replaced=replaced_files(target)
    )
    stat = target.stat()
    _record_file(con, SampleFile(path, stat.st_size, stat.st_mtime_ns), content_hash(target))
    return table.num_rows


def _versions(path: Path) -> str:
    """The collector versions the edited file names, if it still says."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, ValueError):
        return "unknown"
    return metadata.get(b"gpufleet.collector_version", b"unknown").decode(errors="replace")


def grown_from_warehouse(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    path: str,
    first: dt.datetime | None,
    last: dt.datetime | None,
) -> bool:
    """Whether the file holds every sample the warehouse keeps of its GPUs from `first` to
    `last` (a compacted file's as recorded), with the same values, contradicts none of the
    warehouse's other samples, and holds samples the warehouse lacks: a compaction's
    output that took in a late file (`interrupted.py`), not an edit."""
    if first is None or last is None:
        return False
    try:
        with _row_hashes(con, config, path, "_grown_rows"):
            row = con.execute(
                f"""
                with bounds as (select min(ts) as first_ts, max(ts) as last_ts from _grown_rows),
                kept as (
                    select gpu_uuid, ts, {_ROW_HASH} as row_hash
                    from samples
                    where ts between (select first_ts from bounds) and (select last_ts from bounds)
                        and gpu_uuid in (select gpu_uuid from _grown_rows)
                ),
                joined as (
                    select
                        kept.ts is not null as in_warehouse,
                        kept.row_hash = grown.row_hash as same,
                    from _grown_rows as grown
                    left join kept using (gpu_uuid, ts)
                )
                select
                    (select count(*) from kept where ts between $first and $last),
                    (
                        select count(*) from kept
                        inner join _grown_rows as grown using (gpu_uuid, ts)
                        where kept.ts between $first and $last and kept.row_hash = grown.row_hash
                    ),
                    count(*) filter (where in_warehouse and not same),
                    count(*) filter (where not in_warehouse),
                from joined
                """,
                {"first": first, "last": last},
            ).fetchone()
    except duckdb.Error:
        return False
    if row is None:
        return False
    kept, kept_same, contradicted, new = row
    return kept == kept_same and contradicted == 0 and new > 0
