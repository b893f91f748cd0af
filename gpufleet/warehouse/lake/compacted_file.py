"""A host-day's compacted file: its name, the staging directory it is built in (named by
the run), writing it (one row group per GPU, the encodings and statistics the lake's readers
want) from a table or from batches of rows, and swapping the directory in."""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import itertools
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from gpufleet.collectors.schema import SAMPLE_SCHEMA, file_metadata
from gpufleet.collectors.writer import write_row_groups_atomically, write_table_atomically
from gpufleet.warehouse.lake.replaced import replaced_metadata

COMPACTED_PREFIX = "compacted-"
STAGING_SUFFIX = ".compacting"  # of a staging directory's name, before its run's id
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
# The measured floats: every floating-point column of the contract (a new one included).
_MEASURED_FLOATS = tuple(field.name for field in SAMPLE_SCHEMA if pa.types.is_floating(field.type))
# Parquet encodings of the compacted files; every other column keeps pyarrow's dictionary
# (the process lists' fields are plain: dictionaries cost the writer time and save them
# nothing).
# Times and cumulative counters grow by small steps (delta encoding stores the steps), and
# measured floats differ in their low bytes (byte stream split puts each byte of the values
# together, so that lz4 finds the repeated high ones): the same values in far fewer bytes,
# written and read with less CPU than dictionaries whose values hardly repeat. The floats
# that hardly change (the interval, the power limit) cost a few bytes more a row group so.
COMPACTED_ENCODINGS = {
    **dict.fromkeys(
        ("ts", "energy_mj", "thermal_violation_ns", "power_violation_ns"), "DELTA_BINARY_PACKED"
    ),
    **dict.fromkeys(_MEASURED_FLOATS, "BYTE_STREAM_SPLIT"),
    **dict.fromkeys(
        (f"processes.list.element.{name}" for name in ("pid", "user", "used_mem_bytes", "job_id")),
        "PLAIN",
    ),
}
# The columns whose min and max each row group keeps: those the lake's readers filter on (the
# GPU of a full build's slice, the time of an incremental one). Every column's would cost
# the writer time and prune nothing: a row group is one GPU-day.
COMPACTED_STATISTICS = ("ts", "gpu_uuid", "host", "gpu_index", "status")
# lz4, not zstd: with the encodings above zstd's file is only 3 % smaller, its writing and
# DuckDB's reading of it a sixth to a quarter dearer.
COMPACTED_COMPRESSION = "lz4"


def run_id() -> str:
    """A new id for one ingest's compaction, naming its staging directories."""
    return uuid.uuid4().hex[:12]


def staging_directory(directory: Path, run: str) -> Path:
    """Where run `run` builds a partition's compacted file before the swap (hidden from
    listings): `.host=H.compacting-<run>`. Named by the run, so that a late task of a run
    given up (a remote Dask worker's) writes where no later run reads."""
    return directory.with_name(f".{directory.name}{STAGING_SUFFIX}-{run}")


def remove_staging(staging: Path) -> None:
    """Remove a staging directory, and its `date=` folder when that is left empty: made for
    it, where the host-day's files were left in the store (docs/dask.md)."""
    shutil.rmtree(staging, ignore_errors=True)
    with contextlib.suppress(OSError):  # not empty: another host-day's files are there
        staging.parent.rmdir()


def staged_file(data_dir: Path, directory: str, run: str) -> Path:
    """The compacted file of host-day `directory` (`raw/samples/date=D/host=H`, below
    `data_dir`) in run `run`'s staging directory."""
    day = partition_day(directory)
    assert day is not None
    return staging_directory(data_dir / directory, run) / compacted_name(day)


def remove_other_staging(samples_dir: Path, run: str) -> None:
    """Remove every staging directory under `samples_dir` but run `run`'s: those of runs
    that died or were given up (late tasks' files), and of the naming without a run."""
    for folder in samples_dir.glob(f"date=*/.host=*{STAGING_SUFFIX}*"):
        if not folder.name.endswith(f"{STAGING_SUFFIX}-{run}"):
            shutil.rmtree(folder, ignore_errors=True)


def exchange_directories(a: Path, b: Path) -> None:
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


def compacted_name(day: dt.date) -> str:
    return f"{COMPACTED_PREFIX}{day.isoformat()}.parquet"


def partition_day(directory: str) -> dt.date | None:
    """The UTC day of a `raw/samples/date=D/host=H` directory, None if it names none."""
    try:
        return dt.date.fromisoformat(PurePosixPath(directory).parent.name.removeprefix("date="))
    except ValueError:
        return None


def _compacted_schema(
    schema: pa.Schema, *, versions: str, sources: int, replaced: Mapping[str, int]
) -> pa.Schema:
    """The contract's schema plus the extra columns of `schema`, with the file metadata."""
    extras = [field for field in schema if field.name not in SAMPLE_SCHEMA.names]
    return pa.schema([*SAMPLE_SCHEMA, *extras]).with_metadata(
        {
            **file_metadata(),
            b"gpufleet.collector_version": versions.encode(),
            b"gpufleet.compacted_from": str(sources).encode(),
            **(replaced_metadata(replaced) if replaced else {}),
        }
    )


def write_compacted(
    table: pa.Table,
    target: Path,
    *,
    versions: str,
    sources: int,
    replaced: Mapping[str, int] | None = None,
) -> None:
    """Write one host-day's rows (each (gpu_uuid, ts) once, sorted by (gpu_uuid, ts)) in the
    contract's schema plus any extra columns, lz4, one row group per GPU; `replaced`: the
    collector files it replaces, size by name (`replaced.py`)."""
    schema = _compacted_schema(
        table.schema, versions=versions, sources=sources, replaced=replaced or {}
    )
    # One row group per GPU: a reader of some GPUs (a full build's slices) skips the rest
    # by the row groups' gpu_uuid statistics.
    runs = pc.run_end_encode(table.column("gpu_uuid").combine_chunks())
    ends = runs.run_ends.to_pylist()
    row_groups = tuple(end - start for start, end in itertools.pairwise([0, *ends]))
    write_table_atomically(
        table.cast(schema),
        target,
        row_groups=row_groups,
        encodings=COMPACTED_ENCODINGS,
        statistics=COMPACTED_STATISTICS,
        compression=COMPACTED_COMPRESSION,
    )


def write_compacted_batches(
    batches: pa.RecordBatchReader,
    target: Path,
    *,
    versions: str,
    sources: int,
    replaced: Mapping[str, int] | None = None,
) -> None:
    """`write_compacted` for rows that come in batches (a host-day larger than memory should
    hold): the same file, with one GPU's rows in memory at a time."""
    schema = _compacted_schema(
        batches.schema, versions=versions, sources=sources, replaced=replaced or {}
    )

    def by_gpu() -> Iterator[pa.Table]:
        pending: list[pa.Table] = []  # the rows of the GPU whose rows may still come
        pending_gpu: object = None
        for batch in batches:
            table = pa.Table.from_batches([batch]).cast(schema)
            runs = pc.run_end_encode(table.column("gpu_uuid").combine_chunks())
            start = 0
            for gpu, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist(), strict=True):
                if pending and gpu != pending_gpu:  # a new GPU begins: the pending one is whole
                    yield pa.concat_tables(pending)
                    pending = []
                pending_gpu = gpu
                pending.append(table.slice(start, end - start))
                start = end
        if pending:
            yield pa.concat_tables(pending)

    write_row_groups_atomically(
        schema,
        by_gpu(),
        target,
        encodings=COMPACTED_ENCODINGS,
        statistics=COMPACTED_STATISTICS,
        compression=COMPACTED_COMPRESSION,
    )


def collector_versions(con: duckdb.DuckDBPyConnection, sources: list[str]) -> dict[str, str]:
    """Each source's collector versions (from its Parquet metadata), by the path of the
    file (`sources` may be `literal_path` patterns)."""
    rows = con.execute(
        """
        select file_name, decode(value)
        from parquet_kv_metadata($sources)
        where decode(key) = 'gpufleet.collector_version'
        """,
        {"sources": sources},
    ).fetchall()
    return {str(name): str(version) for name, version in rows}


def joined_versions(versions: Sequence[str]) -> str:
    return ",".join(sorted(set(versions))) or "unknown"
