"""Sample files: a spool segment becomes one Parquet file per UTC date, atomically.

The file is written under a temporary name starting with `.` (ignored by loaders), flushed
to disk and renamed into `raw/samples/date=YYYY-MM-DD/host=<host>/`, so no partial file
ever becomes visible: a file there is complete the moment it appears.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import itertools
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gpufleet.collectors.schema import (
    collector_schema_with_metadata,
    host_folder,
    partition_dir,
)
from gpufleet.errors import GpufleetError

_UNSAFE_PATH_CHARS = re.compile(r"[^A-Za-z0-9._-]")


class SampleWriteError(GpufleetError):
    """A sample file could not be written (disk full, no permission); the spool is kept."""


def safe_host(host: str) -> str:
    """The host name as a path component: no separators, no leading dot, never empty."""
    cleaned = _UNSAFE_PATH_CHARS.sub("_", host).lstrip("._")
    return cleaned or "unknown"


def utc_date(ts_us: int) -> str:
    return dt.datetime.fromtimestamp(ts_us / 1e6, tz=dt.UTC).date().isoformat()


class InvalidSpoolError(GpufleetError):
    """Spooled records that do not fit the sample schema (a hand-edited or foreign file)."""


def records_to_table(records: list[dict[str, Any]]) -> pa.Table:
    """The contract table of spooled records, sorted by (gpu_uuid, ts).

    Sorted in Python: a few thousand rows sort in a millisecond, and pyarrow's compute
    kernels would add to the collector's resident memory.
    """
    try:
        ordered = sorted(records, key=lambda r: (r["gpu_uuid"], r["ts"]))
        return pa.Table.from_pylist(ordered, schema=collector_schema_with_metadata())
    except (KeyError, TypeError, ValueError, pa.ArrowException) as exc:
        raise InvalidSpoolError(f"records do not fit the sample schema: {exc}") from exc


def use_lean_memory_pool() -> None:
    """Allocate Arrow buffers with malloc: the collector's tables are small and rare, and
    mimalloc's arenas would stay resident between flushes. This reaches pyarrow's own
    allocations; `gpufleet collect` also sets ARROW_DEFAULT_MEMORY_POOL before pyarrow is
    imported, for those of Arrow's C++ code (cli/collect.py)."""
    pa.set_memory_pool(pa.system_memory_pool())


def write_sample_files(
    records: list[dict[str, Any]],
    *,
    samples_root: Path,
    host: str,
    stem: str,
    cluster: str | None = None,
) -> list[Path]:
    """Write `records` as `<stem>.parquet` in each UTC date's partition (the host's folder
    at its site, `host_folder`); returns the paths.

    Writing the same stem again replaces the file with the same content, so converting a
    segment twice (a crash between rename and spool removal) duplicates nothing.
    """
    by_date: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        try:
            date_iso = utc_date(record["ts"])
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise InvalidSpoolError(f"a record without a valid ts: {exc}") from exc
        by_date.setdefault(date_iso, []).append(record)
    written: list[Path] = []
    for date_iso, rows in sorted(by_date.items()):
        folder = host_folder(safe_host(host), cluster)
        directory = Path(partition_dir(str(samples_root), date_iso, folder))
        target = directory / f"{stem}.parquet"
        write_table_atomically(records_to_table(rows), target)
        written.append(target)
    return written


@functools.lru_cache(maxsize=16)
def _leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """The Parquet leaf column paths of `schema` (`processes.list.element.pid`...), as
    pyarrow's writer names them (from the footer of an empty file written in memory).
    Cached: a compacting ingest writes a thousand files of one schema."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    parquet_schema = pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema
    return tuple(parquet_schema.column(i).path for i in range(len(parquet_schema)))


def write_table_atomically(
    table: pa.Table,
    target: Path,
    *,
    row_groups: tuple[int, ...] = (),
    encodings: Mapping[str, str] | None = None,
    statistics: Sequence[str] | None = None,
    compression: str = "zstd",
    plain_nulls: bool = False,
) -> None:
    """Write `table` as Parquet (zstd unless `compression` says otherwise) under a temporary
    `.` name, fsync, rename into place.

    `row_groups`: the rows of each row group, in order (pyarrow's default size without).
    `encodings`: a Parquet encoding by column (its leaf path, as `ParquetFile.schema` names
    it); every other column is dictionary-encoded, pyarrow's default. `statistics`: the
    columns (leaf paths) whose min and max each row group stores; every column without.
    `plain_nulls`: the columns that hold only nulls are written plain and uncompressed (the
    same values: a dictionary and zstd have nothing to work on there, and cost a small file
    of many such columns about a third of its CPU)."""
    codecs: str | dict[str, str] = compression
    if plain_nulls:
        empty = _null_leaf_paths(table)
        encodings = {path: "PLAIN" for path in empty} | dict(encodings or {})
        codecs = {
            path: "none" if path in empty else compression
            for path in _leaf_paths(table.schema.remove_metadata())
        }
    if row_groups:
        offsets = itertools.accumulate(row_groups, initial=0)  # one more than row_groups
        pairs = zip(offsets, row_groups, strict=False)
        groups = (table.slice(offset, rows) for offset, rows in pairs)
        write_row_groups_atomically(
            table.schema,
            groups,
            target,
            encodings=encodings,
            statistics=statistics,
            compression=codecs,
        )
        return
    options = _writer_options(table.schema, encodings, statistics, codecs)
    _atomically(target, lambda temporary: pq.write_table(table, temporary, **options))


def _null_leaf_paths(table: pa.Table) -> set[str]:
    """The leaf paths of the columns of `table` that hold nothing but nulls."""
    empty = {
        field.name
        for field, column in zip(table.schema, table.columns, strict=True)
        if column.null_count == len(column)
    }
    return {
        path
        for path in _leaf_paths(table.schema.remove_metadata())
        if path.split(".", 1)[0] in empty
    }


def write_row_groups_atomically(
    schema: pa.Schema,
    row_groups: Iterable[pa.Table],
    target: Path,
    *,
    encodings: Mapping[str, str] | None = None,
    statistics: Sequence[str] | None = None,
    compression: str | Mapping[str, str] = "zstd",
) -> None:
    """`write_table_atomically` for rows that come a row group at a time (each table of
    `row_groups`, of `schema`, is one), so that one row group is in memory, not the file."""
    options = _writer_options(schema, encodings, statistics, compression)

    def write(temporary: Path) -> None:
        with pq.ParquetWriter(temporary, schema, **options) as writer:
            for group in row_groups:
                writer.write_table(group, row_group_size=max(group.num_rows, 1))

    _atomically(target, write)


def _writer_options(
    schema: pa.Schema,
    encodings: Mapping[str, str] | None,
    statistics: Sequence[str] | None,
    compression: str | Mapping[str, str],
) -> dict[str, Any]:
    options: dict[str, Any] = {"compression": compression}
    if statistics is not None:
        options["write_statistics"] = list(statistics)
    if encodings:
        options["column_encoding"] = dict(encodings)
        options["use_dictionary"] = [
            path for path in _leaf_paths(schema.remove_metadata()) if path not in encodings
        ]
    return options


def _atomically(target: Path, write: Callable[[Path], None]) -> None:
    """`write` the file at a temporary `.` name beside `target`, fsync, rename into place."""
    temporary = target.with_name(f".{target.name}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write(temporary)
        with temporary.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, target)
        directory_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        reason = exc.strerror or str(exc)
        raise SampleWriteError(f"cannot write {target}: {reason}") from exc


def write_bytes_atomically(data: bytes, target: Path) -> None:
    """Write a file's bytes (one a Dask worker wrote and sent back) at a temporary `.` name
    beside `target`, fsync, rename into place."""

    def write(temporary: Path) -> None:
        temporary.write_bytes(data)

    _atomically(target, write)
