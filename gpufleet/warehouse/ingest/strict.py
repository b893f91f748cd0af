"""A batch read in one pass, whoever wrote its files: the common case.

Each file's footer is read once (`footers.read_footer`): a file that cannot load (its footer
does not read, a column of a type the contract refuses, a required column missing) is set
aside from it alone. The others are read by polars in one pass per distinct set of column
types (a collector's files share one; a fleet of other writers' files a few): their
contract columns only, cast to the contract's types (times to UTC microseconds, float64
to float32, any integer width, dictionary text to text; a missing nullable column as
NULLs). The rows are then checked, vectorised (`values.value_problems`): a file with a NULL
in a required column, a value that does not fit its type or one out of its range is set
aside with its reason, and the batch's other files load from the same read. Only a batch
with a file polars does not read so (a process list of other fields, data pages that do
not decode) is left to the caller, which probes and loads it as before (`probe_batch`,
`load_batch`).

A batch of more than `MAX_ROWS_PER_READ` rows is not read at once (`Oversized`): the
caller reads it in pieces of whole files, and a larger file in slices (`sliced.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.warehouse.base.folder_sites import folder_site
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest.footers import Footer, contract_schema, read_footer
from gpufleet.warehouse.ingest.schemas import CONTRACT_TYPES
from gpufleet.warehouse.ingest.values import (
    TimeLimits,
    time_window,
    unfit_reason,
    value_problems,
)
from gpufleet.warehouse.lake.compact_ahead import NOT_AHEAD, CompactAhead

_PATH = "_path"  # the column polars names each row's file in (no contract column starts _)
_UNFIT = "_unfit"  # why a row's value did not fit its type (only while one did not)
_INDEX = "_file_index"
# The sort key of a row: (_part + 1) * _PART_STEP + its GPU's number (_NO_GPU for none, last).
_PART_STEP = 1 << 32
_NO_GPU = _PART_STEP - 1
_READ_ERRORS = (pl.exceptions.PolarsError, OSError, pl.exceptions.PanicException)

# The most rows read at once: a batch of 1,000 ten-minute files of 8 GPUs at 10 s holds
# 480,000. At up to three batches in memory at once (one loading, two read ahead) and about
# 0.6 KB a row while one is read and sorted, this keeps an ingest within its 2 GB.
MAX_ROWS_PER_READ = 600_000


@dataclass(frozen=True)
class StrictRead:
    """A batch read in one pass: the rows of the files that load, as `load_rows` takes
    them, each such file's part, and the files set aside with their reasons."""

    rows: pa.Table
    parts: list[int]
    versions: dict[str, str]  # collector version by absolute path (files written ahead)
    files: list[SampleFile] = field(default_factory=list)  # the files `rows` holds
    bad: dict[str, str] = field(default_factory=dict)  # the batch's files set aside


@dataclass(frozen=True)
class Oversized:
    """A batch of more than `MAX_ROWS_PER_READ` rows, not read: read it in pieces."""


def read_strict(
    config: Config, batch: Sequence[SampleFile], ahead: CompactAhead | None, limits: TimeLimits
) -> StrictRead | Oversized | None:
    """The batch read in one pass (`read_batch`), or `Oversized` past `MAX_ROWS_PER_READ`."""
    return read_batch(config, batch, ahead, max_rows=MAX_ROWS_PER_READ, limits=limits)


def read_batch(
    config: Config,
    batch: Sequence[SampleFile],
    ahead: CompactAhead | None,
    *,
    max_rows: int | None,
    limits: TimeLimits,
) -> StrictRead | Oversized | None:
    """The batch's rows (contract columns, then `_file_index`, `_part` and `_null`) sorted
    by (_part, gpu_uuid, ts), with the files set aside (a time outside `limits` among the
    reasons); `Oversized` when it holds more than `max_rows` rows; None when a file is not
    one the one pass reads."""
    paths = [str(config.data_dir / file.path) for file in batch]
    footers = [read_footer(path, file.path) for path, file in zip(paths, batch, strict=True)]
    bad = {
        file.path: f.plan.problem for file, f in zip(batch, footers, strict=True) if f.plan.problem
    }
    groups: dict[tuple[tuple[str, pl.DataType], ...], list[str]] = {}
    for path, footer in zip(paths, footers, strict=True):
        if footer.plan.problem is None:
            if footer.plan.columns is None:
                return None  # the careful path reads it
            groups.setdefault(footer.plan.columns, []).append(path)
    frames: list[pl.DataFrame] = []
    read = 0
    try:
        for columns, members in groups.items():
            scan = pl.scan_parquet(
                members,
                schema=dict(columns),
                hive_partitioning=False,
                glob=False,  # the paths are names, not patterns
                include_file_paths=_PATH,
                missing_columns="raise",
                extra_columns="ignore",
            )
            if max_rows is not None:
                scan = scan.head(max_rows + 1 - read)
            frame = scan.collect()
            read += frame.height
            if max_rows is not None and read > max_rows:
                return Oversized()
            frames.append(to_contract(frame))
    except _READ_ERRORS:
        return None  # a file's data does not read: the probe finds which
    frame = _concat(frames)
    file_index = frame.get_column(_PATH).cast(pl.Enum(paths)).to_physical()
    frame = frame.drop(_PATH).with_columns(file_index.alias(_INDEX))
    windows = [time_window(file.path, limits) for file in batch]
    sites = [folder_site(file.path) for file in batch]
    unfit = _UNFIT if _UNFIT in frame.columns else None
    problems = value_problems(frame, windows, file_index=_INDEX, unfit=unfit, sites=sites)
    for index, reason in problems.items():
        bad[batch[index].path] = reason
    return _sorted_read(frame.drop(_UNFIT, strict=False), batch, footers, bad, paths, ahead)


def to_contract(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame`'s contract columns (as read) cast to the contract's types, NULL where it has
    none, and its other columns after them; plus `_unfit` when a value did not fit."""
    selects: list[pl.Expr] = []
    lossy: list[str] = []
    for name, target in contract_schema().items():
        source = frame.schema.get(name)
        if source is None:
            selects.append(pl.lit(None, target).alias(name))
        elif source == target:
            selects.append(pl.col(name))
        elif name == "ts":
            utc = pl.col(name).dt.convert_time_zone("UTC")
            selects.append(utc.dt.cast_time_unit("us").alias(name))
        elif target.is_integer():
            selects.append(pl.col(name).cast(target, strict=False))
            lossy.append(name)
        else:
            selects.append(pl.col(name).cast(target))
    others = [pl.col(name) for name in frame.columns if name not in CONTRACT_TYPES]
    cast = frame.select(*selects, *others)
    lost = {n: cast.get_column(n).is_null() & frame.get_column(n).is_not_null() for n in lossy}
    hit = [name for name, rows in lost.items() if rows.any()]
    if hit:
        reasons = pl.coalesce([pl.when(pl.lit(lost[n])).then(unfit_reason(n)) for n in hit])
        cast = cast.with_columns(frame.select(reasons.alias(_UNFIT)).to_series())
    return cast


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    if not frames:
        return pl.DataFrame(schema={**contract_schema(), _PATH: pl.String})
    if len(frames) == 1:
        return frames[0]
    same = all(frame.columns == frames[0].columns for frame in frames)
    return pl.concat(frames, how="vertical" if same else "diagonal")


def _sorted_read(
    frame: pl.DataFrame,
    batch: Sequence[SampleFile],
    footers: Sequence[Footer],
    bad: dict[str, str],
    paths: Sequence[str],
    ahead: CompactAhead | None,
) -> StrictRead:
    """The rows of the files not set aside, each with its part, sorted for the load."""
    kept = [index for index, file in enumerate(batch) if file.path not in bad]
    files = [batch[index] for index in kept]
    if len(kept) < len(batch):  # renumber the rows' files among the files kept
        number = [-1] * len(batch)
        for new, old in enumerate(kept):
            number[old] = new
        frame = frame.filter(pl.col(_INDEX).is_in(kept))
        renumbered = pl.Series(_INDEX, number, pl.Int32).gather(frame.get_column(_INDEX))
        frame = frame.with_columns(renumbered)
    if ahead is not None:
        names = {batch[i].path: footers[i].plan.names for i in kept}
        parts = ahead.parts(
            files, {p: dict.fromkeys(n, "") for p, n in names.items()}, CONTRACT_TYPES
        )
    else:
        parts = [NOT_AHEAD] * len(files)
    versions = {
        paths[old]: version
        for old, part in zip(kept, parts, strict=True)
        if part != NOT_AHEAD and (version := footers[old].version) is not None
    }
    file_index = frame.get_column(_INDEX).cast(pl.Int32)
    gpus = frame.get_column("gpu_uuid")
    frame = frame.with_columns(
        file_index.alias(_INDEX),
        pl.Series("_part", parts, pl.Int64).gather(file_index),
        pl.lit(False).alias("_null"),  # a file with a NULL in a required column is set aside
        # The GPUs as numbers in the order of their names: cheaper to sort by.
        gpus.cast(pl.Enum(gpus.unique().drop_nulls().sort())).to_physical().alias("_gpu"),
    )
    rows = sort_rows(frame).drop("_gpu").to_arrow(compat_level=pl.CompatLevel.oldest())
    return StrictRead(rows, parts, versions, files, bad)


def sort_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` sorted by (_part, gpu_uuid, ts) (`_gpu`: each row's GPU as a number in name
    order). A collector's files list a GPU's samples in time order and a batch's files come
    in time order per host, so a stable sort by part and GPU alone usually sorts it (a
    third of the work); only when it does not are the times sorted too. Part and GPU are
    sorted as one 64-bit key: polars sorts several columns by comparing their rows as
    bytes, four times as long here."""
    gpu = pl.col("_gpu").cast(pl.Int64).fill_null(_NO_GPU)
    keyed = frame.with_columns(((pl.col("_part") + 1) * _PART_STEP + gpu).alias("_key"))
    by_gpu = keyed.sort("_key", maintain_order=True)
    same_series = pl.col("_key").diff() == 0
    out_of_order = by_gpu.select((same_series & (pl.col("ts").diff() <= pl.duration())).any())
    if not out_of_order.item():
        return by_gpu.drop("_key")
    return keyed.sort("_key", "ts", nulls_last=True).drop("_key")
