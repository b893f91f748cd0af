"""A file too large to read at once, read a slice of rows at a time, twice: its checked
columns first (`_survey`: a file that breaks a rule is set aside whole, nothing loaded),
then every column, written straight into its host-day's compacted file when it is the day's
only file and new and in key order, else inserted slice by slice without the keys loaded
before (its own earlier slices' too)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from itertools import chain

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from gpufleet.config import Config
from gpufleet.warehouse.base.folder_sites import fill_sites, folder_site
from gpufleet.warehouse.base.raw_tables import SAMPLE_TYPES
from gpufleet.warehouse.base.sample_files import LoadedFile, SampleFile
from gpufleet.warehouse.ingest import cut
from gpufleet.warehouse.ingest.footers import contract_schema, read_footer
from gpufleet.warehouse.ingest.insert import BatchOutcome, Keys, any_loaded, insert_first_new
from gpufleet.warehouse.ingest.read import cast_slice, duckdb_schema_problem
from gpufleet.warehouse.ingest.values import CHECKED_COLUMNS, FILE_INDEX, TimeLimits, value_problems
from gpufleet.warehouse.lake.compact_ahead import NOT_AHEAD, CompactAhead

_READ_ERRORS = (pa.ArrowException, OSError, pl.exceptions.PolarsError, duckdb.Error)


@dataclass
class _Survey:
    problem: str | None = None  # why the file is set aside
    in_key_order: bool = True  # each (gpu_uuid, ts) once, in order
    loaded_before: bool = False  # a key of it is loaded already
    rows: int = 0
    first: dt.datetime | None = None
    last: dt.datetime | None = None


def load_sliced(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    file: SampleFile,
    *,
    ahead: CompactAhead | None,
    limits: TimeLimits,
) -> BatchOutcome | None:
    """Load one large file `cut.MAX_ROWS_PER_READ` rows at a time (or set it aside, a time
    outside `limits` among the reasons); None when a slice does not read (the file is then
    read whole, and set aside if it does not)."""
    path = str(config.data_dir / file.path)
    outcome = BatchOutcome()
    footer = read_footer(path, file.path)
    by_duckdb = footer.plan.columns is None  # a file polars does not read (`read.py`)
    if by_duckdb and (problem := duckdb_schema_problem(config, file)) is not None:
        outcome.bad[file.path] = problem
        return outcome
    names = {file.path: footer.plan.names}
    parts = ahead.parts([file], names) if ahead is not None else [NOT_AHEAD]
    written_ahead = ahead if parts != [NOT_AHEAD] else None  # its host-day compacted as it loads
    try:
        source = pq.ParquetFile(path)
        survey = _survey(con, config, source, file, written_ahead, limits, by_duckdb)
        if survey.problem is not None:
            outcome.bad[file.path] = survey.problem
            return outcome
        present = [name for name in source.schema_arrow.names if name in SAMPLE_TYPES]
        slices = source.iter_batches(batch_size=cut.MAX_ROWS_PER_READ, columns=present)
        site = folder_site(file.path)
        if written_ahead is not None and survey.in_key_order and not survey.loaded_before:
            written = (_contract_rows(batch, site, by_duckdb).to_batches() for batch in slices)
            rows = pa.RecordBatchReader.from_batches(_arrow_schema(), chain.from_iterable(written))
            written_ahead.write_file(file, rows, footer.version)
            inserted = survey.rows
        else:
            inserted = sum(
                insert_first_new(con, config, _contract_rows(batch, site, by_duckdb), ahead)
                for batch in slices
            )
    except _READ_ERRORS:
        return None
    outcome.loaded.append(LoadedFile(file, survey.rows, survey.first, survey.last))
    outcome.rows_read, outcome.rows_inserted = survey.rows, inserted
    return outcome


def _contract_rows(batch: pa.RecordBatch, site: str | None, by_duckdb: bool) -> pa.Table:
    """A slice's contract columns (polars' oldest Arrow types), a NULL or empty `cluster`
    its folder's `site`."""
    rows = cast_slice(batch, by_duckdb=by_duckdb).select(contract_schema().names())
    rows = rows.with_columns(pl.lit(0, pl.Int32).alias(FILE_INDEX))
    filled = fill_sites(rows.to_arrow(compat_level=pl.CompatLevel.oldest()), [site], FILE_INDEX)
    return filled.drop_columns(FILE_INDEX)


def _arrow_schema() -> pa.Schema:
    """The contract's columns as the slices hand them over (polars' oldest Arrow types)."""
    empty = pl.DataFrame(schema=contract_schema())
    return empty.to_arrow(compat_level=pl.CompatLevel.oldest()).schema


def _survey(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    source: pq.ParquetFile,
    file: SampleFile,
    ahead: CompactAhead | None,
    limits: TimeLimits,
    by_duckdb: bool,
) -> _Survey:
    """Read the checked columns slice by slice: the first bad row's reason, if any (the
    rest unread), else the file's rows and times, whether its keys are in order, and, with
    `ahead` (a file to write ahead), whether one was loaded before."""
    survey = _Survey()
    checked = CHECKED_COLUMNS if folder_site(file.path) else CHECKED_COLUMNS - {"cluster"}
    columns = [n for n in source.schema_arrow.names if n in checked]
    previous: tuple[str, dt.datetime] | None = None  # the last key of the slice before
    for batch in source.iter_batches(batch_size=cut.MAX_ROWS_PER_READ, columns=columns):
        frame = cast_slice(batch, by_duckdb=by_duckdb).with_columns(pl.lit(0).alias(FILE_INDEX))
        problems = value_problems(frame, [file.path], limits)
        if problems:
            survey.problem = problems[0]
            return survey
        if frame.height == 0:
            continue
        keys = frame.select("gpu_uuid", "ts")
        low, high = keys.get_column("ts").min(), keys.get_column("ts").max()
        assert isinstance(low, dt.datetime) and isinstance(high, dt.datetime)
        survey.rows += frame.height
        survey.first = low if survey.first is None else min(survey.first, low)
        survey.last = high if survey.last is None else max(survey.last, high)
        if survey.in_key_order:
            survey.in_key_order = _in_key_order(keys, previous)
            previous = keys.row(-1)
        if ahead is not None and not survey.loaded_before:
            gpus = keys.get_column("gpu_uuid").unique().to_list()
            survey.loaded_before = any_loaded(con, config, Keys(gpus, low, high), ahead)
    return survey


def _in_key_order(keys: pl.DataFrame, previous: tuple[str, dt.datetime] | None) -> bool:
    """Whether `keys` (gpu_uuid, ts) increase strictly, from `previous` on."""
    if previous is not None and keys.row(0) <= previous:
        return False
    gpu, ts = pl.col("gpu_uuid"), pl.col("ts")
    later = (gpu > gpu.shift()) | ((gpu == gpu.shift()) & (ts > ts.shift()))
    return bool(keys.select(later.slice(1).all()).item())
