"""Reading a batch: its rows in the contract's columns and types, whoever wrote its files.

polars reads the files whose footer allows it (`footers.py`), one scan per distinct set of
column types, cast to the contract's types, a value that does not fit named in `_unfit`;
DuckDB reads the others (`_read_with_duckdb`), `try_cast`ing what the type rules accept and
finding a file whose data does not decode. Both give the same frame."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from gpufleet.config import Config
from gpufleet.warehouse.base.connect import connect
from gpufleet.warehouse.base.raw_tables import SAMPLE_COLUMNS, SAMPLE_TYPES, literal_path
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest.footers import (
    READ_ERRORS,
    Footer,
    contract_schema,
    read_footer,
    schema_problem,
    unreadable_reason,
)
from gpufleet.warehouse.ingest.values import FILE_INDEX, UNFIT, unfit_reason

_PATH = "_path"  # the column polars names each row's file in (no contract column starts _)
# The files DuckDB reads go through a connection of their own, capped.
READER_MEMORY_LIMIT = "1GB"


@dataclass(frozen=True)
class Read:
    """A batch's rows as read: the contract's columns, then `_file_index` and `_unfit`, each
    file's rows together and in file order; the files set aside with their reasons."""

    frame: pl.DataFrame
    footers: list[Footer]
    bad: dict[str, str]  # path -> reason
    by_duckdb: bool  # whether DuckDB read a file of it


@dataclass(frozen=True)
class Oversized:
    """A batch of more rows than one read may hold, not read: it is cut in pieces."""


def read_batch(
    config: Config, batch: Sequence[SampleFile], *, max_rows: int | None
) -> Read | Oversized:
    """The batch's rows, or `Oversized` when its files hold more than `max_rows` rows."""
    paths = [str(config.data_dir / file.path) for file in batch]
    footers = [read_footer(path, file.path) for path, file in zip(paths, batch, strict=True)]
    bad = {
        file.path: f.plan.problem for file, f in zip(batch, footers, strict=True) if f.plan.problem
    }
    groups: dict[tuple[tuple[str, pl.DataType], ...], list[int]] = {}
    by_duckdb: list[int] = []
    for index, footer in enumerate(footers):
        if footer.plan.problem is None:
            if footer.plan.columns is None:
                by_duckdb.append(index)
            else:
                groups.setdefault(footer.plan.columns, []).append(index)
    frames: list[pl.DataFrame] = []
    read = 0
    for columns, members in groups.items():
        scan = pl.scan_parquet(
            [paths[index] for index in members],
            schema=dict(columns),
            hive_partitioning=False,
            glob=False,  # the paths are names, not patterns
            include_file_paths=_PATH,
            missing_columns="raise",
            extra_columns="ignore",
        )
        if max_rows is not None:
            scan = scan.head(max_rows + 1 - read)
        try:
            frame = scan.collect()
        except READ_ERRORS:
            by_duckdb += members  # a file's data does not read: DuckDB finds which
            continue
        read += frame.height
        if max_rows is not None and read > max_rows:
            return Oversized()
        file_index = frame.get_column(_PATH).cast(pl.Enum(paths)).to_physical().cast(pl.Int32)
        frames.append(to_contract(frame.drop(_PATH)).with_columns(file_index.alias(FILE_INDEX)))
    if by_duckdb:
        if max_rows is not None and read + row_count([paths[i] for i in by_duckdb]) > max_rows:
            return Oversized()
        frames += _read_with_duckdb(config, batch, sorted(by_duckdb), bad)
    return Read(_concat(frames), footers, bad, bool(by_duckdb))


def row_count(paths: Sequence[str]) -> int:
    """The rows the files at `paths` hold, by their footers (0 for one that does not read)."""
    count = 0
    for path in paths:
        with contextlib.suppress(pa.ArrowException, OSError):  # its read sets it aside
            count += pq.read_metadata(path).num_rows
    return count


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
    others = [pl.col(name) for name in frame.columns if name not in SAMPLE_TYPES]
    cast = frame.select(*selects, *others)
    lost = {n: cast.get_column(n).is_null() & frame.get_column(n).is_not_null() for n in lossy}
    hit = [name for name, rows in lost.items() if rows.any()]
    if hit:
        reasons = pl.coalesce([pl.when(pl.lit(lost[n])).then(unfit_reason(n)) for n in hit])
        cast = cast.with_columns(frame.select(reasons.alias(UNFIT)).to_series())
    return cast


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    if not frames:
        return pl.DataFrame(schema={**contract_schema(), FILE_INDEX: pl.Int32})
    same = all(frame.columns == frames[0].columns for frame in frames)
    return pl.concat(frames, how="vertical" if same else "diagonal")


def _read_with_duckdb(
    config: Config, batch: Sequence[SampleFile], indexes: list[int], bad: dict[str, str]
) -> list[pl.DataFrame]:
    """The rows of the batch's files at `indexes`, read by DuckDB: each file's schema read
    (a file that does not read, or whose columns the type rules refuse, goes into `bad`),
    then one read_parquet per set of column types, every value a `try_cast` to its
    contract type; a group whose data does not read is read file by file, and the file
    that does not goes into `bad`."""
    groups: dict[tuple[tuple[str, str], ...], list[int]] = {}
    frames: list[pl.DataFrame] = []
    with connect(config={"memory_limit": READER_MEMORY_LIMIT}) as con:
        for index in indexes:
            columns = _duckdb_columns(con, config, batch[index])
            if isinstance(columns, str):
                bad[batch[index].path] = columns
                continue
            key = tuple((n, t) for n, t in columns.items() if n in SAMPLE_TYPES)
            groups.setdefault(key, []).append(index)
        reads = [(members, dict(key)) for key, members in groups.items()]
        while reads:
            members, columns = reads.pop(0)
            try:
                frames.append(_duckdb_rows(con, config, batch, members, columns))
            except duckdb.OutOfMemoryException:
                raise  # the machine's problem, not a file's
            except duckdb.Error as exc:
                if len(members) > 1:  # a file's footer reads but its data does not: which?
                    reads[:0] = [([index], columns) for index in members]
                else:
                    path = batch[members[0]].path
                    bad[path] = unreadable_reason(exc, str(config.data_dir / path), path)
    return frames


_SOURCE_SQL = "{} from read_parquet(?, hive_partitioning = false) as src"


def duckdb_schema_problem(config: Config, file: SampleFile) -> str | None:
    """Why DuckDB does not read `file`, or the type rules refuse its columns as DuckDB reads
    them; None when it loads."""
    with connect() as con:
        columns = _duckdb_columns(con, config, file)
    return columns if isinstance(columns, str) else None


def _duckdb_columns(
    con: duckdb.DuckDBPyConnection, config: Config, file: SampleFile
) -> dict[str, str] | str:
    """The top-level columns of `file` as DuckDB reads them (name -> type), or why it is set
    aside: its schema does not read, or the type rules refuse it."""
    path = str(config.data_dir / file.path)
    try:
        found = con.sql(_SOURCE_SQL.format("describe select *"), params=[[literal_path(path)]])
        columns = {str(row[0]): str(row[1]) for row in found.fetchall()}
    except duckdb.OutOfMemoryException:
        raise  # the machine's problem, not the file's
    except duckdb.Error as exc:
        return unreadable_reason(exc, path, file.path)
    return schema_problem(columns) or columns


def _duckdb_rows(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    members: list[int],
    columns: dict[str, str],
) -> pl.DataFrame:
    """One set of files' rows, read by DuckDB (all or nothing), as `read_batch` gives them."""
    # `file_index`: read_parquet's position of the row's file in the list of paths.
    select = f"select {_cast_sql(columns)}, file_index"
    paths = [literal_path(str(config.data_dir / batch[index].path)) for index in members]
    rows = con.sql(_SOURCE_SQL.format(select), params=[paths]).to_arrow_table()
    frame = pl.from_arrow(rows)
    assert isinstance(frame, pl.DataFrame)
    index = pl.Series(members, dtype=pl.Int32).gather(frame.get_column("file_index"))
    return to_contract(frame.drop("file_index")).with_columns(index.alias(FILE_INDEX))


def cast_slice(rows: pa.RecordBatch, *, by_duckdb: bool) -> pl.DataFrame:
    """A slice of one file's rows (as pyarrow reads them) in the contract's columns and
    types, `_unfit` naming a value that did not fit: cast by polars, or by DuckDB for a file
    polars does not read (`by_duckdb`)."""
    if by_duckdb:
        with connect() as con:
            con.register("src", pa.Table.from_batches([rows]))
            source = con.table("src")
            columns = {str(n): str(t) for n, t in zip(source.columns, source.types, strict=True)}
            cast = con.sql(f"select {_cast_sql(columns)} from src").to_arrow_table()
        frame = pl.from_arrow(cast)
    else:
        frame = pl.from_arrow(rows)
    assert isinstance(frame, pl.DataFrame)
    return to_contract(frame)


def _cast_sql(columns: dict[str, str]) -> str:
    """The select list of the contract's columns from `src`, which holds `columns` (name ->
    DuckDB type): each a `try_cast` to its contract type (NULL where absent), then
    `_unfit`, the reason of a row's first value that did not fit."""
    selects: list[str] = []
    unfit: list[str] = []
    for name, kind in SAMPLE_COLUMNS:
        quoted = f'"{name}"'
        if name not in columns:
            selects.append(f"null::{kind} as {quoted}")
            continue
        value = f"try_cast(src.{quoted} as {kind})"
        selects.append(f"{value} as {quoted}")
        unfit.append(
            f"case when src.{quoted} is not null and {value} is null "
            f"then 'column {name}: value ' || left(src.{quoted}::varchar, 40) "
            f"|| ' does not fit {kind.upper()}' end"
        )
    return f"{', '.join(selects)}, coalesce(null::varchar, {', '.join(unfit)}) as {UNFIT}"
