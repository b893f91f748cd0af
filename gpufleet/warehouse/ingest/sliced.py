"""A file too large to read at once (more rows than a batch may hold), loaded in slices.

The file is read twice, a slice of rows at a time, so that memory holds one slice, not the
file: first the columns the rules check, to find whether it breaks one (it is then set
aside whole, nothing of it loaded), then every contract column, each slice sorted by
(gpu_uuid, ts) and inserted into `samples_stored` without the keys loaded before (its own
earlier slices' too: the first row of a key in the file wins, as it does in a batch). Its
host-day is compacted from its files afterwards, as any host-day not written ahead.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from gpufleet.config import Config
from gpufleet.warehouse.base.raw_tables import QUOTED_SAMPLE_COLUMNS
from gpufleet.warehouse.base.sample_files import LoadedFile, SampleFile
from gpufleet.warehouse.ingest.batch import EXISTING_KEYS_SQL, BatchOutcome, create_existing_view
from gpufleet.warehouse.ingest.footers import contract_schema
from gpufleet.warehouse.ingest.schemas import CONTRACT_TYPES
from gpufleet.warehouse.ingest.strict import to_contract
from gpufleet.warehouse.ingest.values import time_window, value_problems
from gpufleet.warehouse.lake.compact_ahead import CompactAhead
from gpufleet.warehouse.publish.log import current_generation

_UNCHECKED = frozenset({"gpu_name", "processes"})  # the columns no rule looks at
_READ_ERRORS = (pa.ArrowException, OSError, pl.exceptions.PolarsError)
_SLICE = "_ingest_slice"
_INSERT_SQL = f"""
insert into samples_stored ({QUOTED_SAMPLE_COLUMNS}, load_id)
with existing as ({EXISTING_KEYS_SQL.format(batch=_SLICE)})
select {QUOTED_SAMPLE_COLUMNS}, $load_id
from {_SLICE} anti join existing using (gpu_uuid, ts)
order by gpu_uuid, ts
"""


def load_sliced(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    file: SampleFile,
    *,
    slice_rows: int,
    ahead: CompactAhead | None,
) -> BatchOutcome | None:
    """Load one large file `slice_rows` rows at a time (or set it aside); None when a slice
    does not read as the one pass reads (the careful path then loads it)."""
    path = str(config.data_dir / file.path)
    outcome = BatchOutcome()
    try:
        source = pq.ParquetFile(path)
        present = [name for name in source.schema_arrow.names if name in CONTRACT_TYPES]
        checked = [name for name in present if name not in _UNCHECKED]
        problem = _first_problem(source, checked, file.path, slice_rows)
        if problem is not None:
            outcome.bad[file.path] = problem
            return outcome
        rows = inserted = 0
        first: dt.datetime | None = None
        last: dt.datetime | None = None
        for batch in source.iter_batches(batch_size=slice_rows, columns=present):
            frame = _contract_rows(batch)
            if frame.height == 0:
                continue
            rows += frame.height
            low, high = frame.get_column("ts").min(), frame.get_column("ts").max()
            assert isinstance(low, dt.datetime) and isinstance(high, dt.datetime)
            first = low if first is None else min(first, low)
            last = high if last is None else max(last, high)
            inserted += _insert_new(con, config, _first_of_each_key(frame), low, high, ahead)
    except _READ_ERRORS:
        return None
    outcome.loaded.append(LoadedFile(file, rows, first, last))
    outcome.rows_read, outcome.rows_inserted = rows, inserted
    return outcome


def _contract_rows(batch: pa.RecordBatch) -> pl.DataFrame:
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    return to_contract(frame).select(contract_schema().names())


def _first_problem(
    source: pq.ParquetFile, columns: list[str], relative: str, slice_rows: int
) -> str | None:
    """Why the file is set aside (its first slice with a bad row decides), if it is."""
    windows = [time_window(relative)]
    for batch in source.iter_batches(batch_size=slice_rows, columns=columns):
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        frame = to_contract(frame).with_columns(pl.lit(0).alias("_file_index"))
        unfit = "_unfit" if "_unfit" in frame.columns else None
        problems = value_problems(frame, windows, file_index="_file_index", unfit=unfit)
        if problems:
            return problems[0]
    return None


def _first_of_each_key(frame: pl.DataFrame) -> pl.DataFrame:
    """The slice sorted by (gpu_uuid, ts), the first row of a repeated key only."""
    frame = frame.sort("gpu_uuid", "ts", maintain_order=True)
    repeated = (pl.col("gpu_uuid") == pl.col("gpu_uuid").shift()) & (
        pl.col("ts") == pl.col("ts").shift()
    )
    if frame.select(repeated.any()).item():
        frame = frame.unique(["gpu_uuid", "ts"], keep="first", maintain_order=True)
    return frame


def _insert_new(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    frame: pl.DataFrame,
    low: dt.datetime,
    high: dt.datetime,
    ahead: CompactAhead | None,
) -> int:
    """Insert the slice's rows whose key is not loaded yet; how many."""
    con.register(_SLICE, frame.to_arrow(compat_level=pl.CompatLevel.oldest()))
    try:
        create_existing_view(con, config, low, high, ahead, _SLICE)
        row = con.execute(
            _INSERT_SQL, {"min_ts": low, "max_ts": high, "load_id": current_generation(con)}
        ).fetchone()
    finally:
        con.unregister(_SLICE)
    return int(row[0]) if row else 0
