"""A batch read in one pass with no schema probe: the common case, a collector's own files.

A batch qualifies when every file's Arrow schema (the `ARROW:schema` its writer stored,
which a collector's pyarrow writer always stores) is the contract's exactly. polars then
reads the batch against that schema, strictly: no column missing or extra, no type cast,
struct fields and all, so a file whose Parquet columns say otherwise fails the read. Each
file's small key-value metadata is read (for that schema and the collector version); its
columns' schema is not probed, and the rows come from polars' reader, which reads every
column of a batch faster than DuckDB's. Any file that differs in any way (an older or newer
collector's columns, another type, a time without a time zone, a file that does not read)
leaves the batch to the caller, which probes and loads it as before (`probe_batch`,
`load_batch`) and so finds the file and sets it aside.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from gpufleet.collectors.schema import SAMPLE_SCHEMA
from gpufleet.config import Config
from gpufleet.warehouse.compact_ahead import NOT_AHEAD, CompactAhead
from gpufleet.warehouse.ingest_files import SampleFile
from gpufleet.warehouse.ingest_schemas import CONTRACT_TYPES, contract_type_names
from gpufleet.warehouse.raw_tables import REQUIRED_SAMPLE_COLUMNS

_PATH = "_path"  # the column polars names each row's file in (no contract column starts _)
_ARROW_SCHEMA_KEY = "ARROW:schema"
_VERSION_KEY = "gpufleet.collector_version"
# The sort key of a row: (_part + 1) * _PART_STEP + its GPU's number (_NO_GPU for none, last).
_PART_STEP = 1 << 32
_NO_GPU = _PART_STEP - 1


@functools.cache
def contract_schema() -> pl.Schema:
    """The contract's sample columns as polars types."""
    return pl.DataFrame(SAMPLE_SCHEMA.empty_table()).schema


@functools.lru_cache(maxsize=64)
def is_contract_arrow_schema(encoded: str) -> bool:
    """Whether a file's stored Arrow schema (base64 IPC, as pyarrow writes it) is the
    contract's: the same columns in the same order, of the same types and nullability.
    (polars would read a time without a time zone as UTC: this is what sets such a file
    aside.) Cached: a fleet's files share one or two."""
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded, validate=True)))
    except (binascii.Error, ValueError, pa.ArrowException):
        return False
    return schema.equals(SAMPLE_SCHEMA)


@dataclass(frozen=True)
class StrictRead:
    """A batch read strictly: its rows, as `load_rows` takes them, and each file's part."""

    rows: pa.Table
    parts: list[int]
    versions: dict[str, str]  # collector version by absolute path (files written ahead)


def read_strict(
    config: Config, batch: Sequence[SampleFile], ahead: CompactAhead | None
) -> StrictRead | None:
    """The batch's rows (contract columns, then `_file_index`, `_part` and `_null`) sorted by
    (_part, gpu_uuid, ts), when every file is of the contract's Arrow schema and reads so;
    None otherwise."""
    paths = [str(config.data_dir / file.path) for file in batch]
    parts = (
        ahead.parts(
            batch, dict.fromkeys((f.path for f in batch), contract_type_names()), CONTRACT_TYPES
        )
        if ahead is not None
        else [NOT_AHEAD] * len(batch)
    )
    versions: dict[str, str] = {}
    try:
        for path, part in zip(paths, parts, strict=True):
            metadata = pl.read_parquet_metadata(path)
            if not is_contract_arrow_schema(metadata.get(_ARROW_SCHEMA_KEY, "")):
                return None
            version = metadata.get(_VERSION_KEY)
            if part != NOT_AHEAD and version is not None:
                versions[path] = version
        frame = pl.scan_parquet(
            paths,
            schema=contract_schema(),
            hive_partitioning=False,
            glob=False,  # the paths are names, not patterns
            include_file_paths=_PATH,
            missing_columns="raise",
            extra_columns="raise",
        ).collect()
        file_index = frame.get_column(_PATH).cast(pl.Enum(paths)).to_physical()
    except (pl.exceptions.PolarsError, OSError, pl.exceptions.PanicException):
        return None  # a file differs or does not read: the probe finds which
    gpus = frame.get_column("gpu_uuid")
    frame = frame.drop(_PATH).with_columns(
        file_index.cast(pl.Int32).alias("_file_index"),
        pl.Series("_part", parts, pl.Int64).gather(file_index),
        pl.any_horizontal(pl.col(REQUIRED_SAMPLE_COLUMNS).is_null()).alias("_null"),
        # The GPUs as numbers in the order of their names: cheaper to sort by.
        gpus.cast(pl.Enum(gpus.unique().drop_nulls().sort())).to_physical().alias("_gpu"),
    )
    rows = _sorted(frame).drop("_gpu").to_arrow(compat_level=pl.CompatLevel.oldest())
    return StrictRead(rows, parts, versions)


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` sorted by (_part, gpu_uuid, ts). A collector's files list a GPU's samples in
    time order and a batch's files come in time order per host, so a stable sort by part
    and GPU alone usually sorts it (a third of the work); only when it does not are the
    times sorted too. Part and GPU are sorted as one 64-bit key: polars sorts several
    columns by comparing their rows as bytes, four times as long here."""
    gpu = pl.col("_gpu").cast(pl.Int64).fill_null(_NO_GPU)
    keyed = frame.with_columns(((pl.col("_part") + 1) * _PART_STEP + gpu).alias("_key"))
    by_gpu = keyed.sort("_key", maintain_order=True)
    same_series = pl.col("_key").diff() == 0
    out_of_order = by_gpu.select((same_series & (pl.col("ts").diff() <= pl.duration())).any())
    if not out_of_order.item():
        return by_gpu.drop("_key")
    return keyed.sort("_key", "ts", nulls_last=True).drop("_key")
