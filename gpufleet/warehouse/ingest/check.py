"""A batch read and checked (`values.py`'s rules: each file with a bad row set aside, with
its first one's reason), its other rows made ready to load: their folder's site filled in,
each file's part (the host-day it is compacted into as it loads, `CompactAhead.parts`), and
sorted by (part, gpu_uuid, ts)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.warehouse.base.folder_sites import fill_sites, folder_site
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest import cut
from gpufleet.warehouse.ingest.read import Oversized, read_batch
from gpufleet.warehouse.ingest.values import FILE_INDEX, UNFIT, TimeLimits, value_problems
from gpufleet.warehouse.lake.compact_ahead import NOT_AHEAD, CompactAhead

# The sort key of a row: (_part + 1) * _PART_STEP + its GPU's number (_NO_GPU for none, last).
_PART_STEP = 1 << 32
_NO_GPU = _PART_STEP - 1


@dataclass(frozen=True)
class Checked:
    """A batch ready to load (the module's docstring)."""

    rows: pa.Table  # the contract's columns, then `_file_index` and `_part`, sorted
    files: list[SampleFile]  # the files that load
    parts: list[int]  # each one's part
    versions: dict[str, str]  # collector version by absolute path (files written ahead)
    bad: dict[str, str]  # path -> reason
    by_duckdb: bool  # whether DuckDB read a file of it (`read.py`)


def read_and_check(
    config: Config,
    batch: Sequence[SampleFile],
    ahead: CompactAhead | None,
    limits: TimeLimits,
    *,
    whole: bool = False,
) -> Checked | Oversized:
    """The batch read and checked (a time outside `limits` among the rules), or `Oversized`
    past `cut.MAX_ROWS_PER_READ` rows unless read `whole`."""
    read = read_batch(config, batch, max_rows=None if whole else cut.MAX_ROWS_PER_READ)
    if isinstance(read, Oversized):
        return read
    frame, bad = read.frame, dict(read.bad)
    for index, reason in value_problems(frame, [file.path for file in batch], limits).items():
        bad[batch[index].path] = reason
    frame = frame.drop(UNFIT, strict=False)
    kept = [index for index, file in enumerate(batch) if file.path not in bad]
    files = [batch[index] for index in kept]
    if len(kept) < len(batch):  # renumber the rows' files among the files kept
        number = pl.col(FILE_INDEX).replace_strict(kept, range(len(kept)), return_dtype=pl.Int32)
        frame = frame.filter(pl.col(FILE_INDEX).is_in(kept)).with_columns(number)
    footers = [read.footers[index] for index in kept]
    names = {file.path: footer.plan.names for file, footer in zip(files, footers, strict=True)}
    parts = ahead.parts(files, names) if ahead is not None else [NOT_AHEAD] * len(files)
    versions = {
        str(config.data_dir / file.path): version
        for file, part, footer in zip(files, parts, footers, strict=True)
        if part != NOT_AHEAD and (version := footer.version) is not None
    }
    file_index = frame.get_column(FILE_INDEX)
    gpus = frame.get_column("gpu_uuid")
    frame = frame.with_columns(
        pl.Series("_part", parts, pl.Int64).gather(file_index),
        # The GPUs as numbers in the order of their names: cheaper to sort by.
        gpus.cast(pl.Enum(gpus.unique().drop_nulls().sort())).to_physical().alias("_gpu"),
    )
    rows = sort_rows(frame).drop("_gpu").to_arrow(compat_level=pl.CompatLevel.oldest())
    rows = fill_sites(rows, [folder_site(file.path) for file in files], FILE_INDEX)
    return Checked(rows, files, parts, versions, bad, read.by_duckdb)


def sort_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` sorted by (_part, gpu_uuid, ts) (`_gpu`: each row's GPU as a number in name
    order), rows of one key in the order they came. A collector's files list a GPU's
    samples in time order and a batch's files come in time order per host, so a stable sort
    by part and GPU alone usually sorts it (a third of the work); only when it does not are
    the times sorted too. Part and GPU are sorted as one 64-bit key: polars sorts several
    columns by comparing their rows as bytes, four times as long here."""
    gpu = pl.col("_gpu").cast(pl.Int64).fill_null(_NO_GPU)
    keyed = frame.with_columns(((pl.col("_part") + 1) * _PART_STEP + gpu).alias("_key"))
    by_gpu = keyed.sort("_key", maintain_order=True)
    same_series = pl.col("_key").diff() == 0
    out_of_order = by_gpu.select((same_series & (pl.col("ts").diff() <= pl.duration())).any())
    if not out_of_order.item():
        return by_gpu.drop("_key")
    return keyed.sort("_key", "ts", nulls_last=True, maintain_order=True).drop("_key")
