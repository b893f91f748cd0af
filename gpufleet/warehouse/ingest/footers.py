"""What a raw file's footer says: whether it may load (the type rules, `schema_problem`),
and whether polars reads it (`FilePlan.columns`) or DuckDB does (a column polars would not
cast without loss). Each footer is read once, each distinct schema decided once."""

from __future__ import annotations

import base64
import binascii
import functools
import threading
from dataclasses import dataclass

import duckdb
import polars as pl
import pyarrow as pa

from gpufleet.collectors.schema import SAMPLE_SCHEMA
from gpufleet.warehouse.base.connect import connect
from gpufleet.warehouse.base.raw_tables import (
    REQUIRED_SAMPLE_COLUMNS,
    SAMPLE_COLUMNS,
    literal_path,
)

_ARROW_SCHEMA_KEY = "ARROW:schema"
_VERSION_KEY = "gpufleet.collector_version"
READ_ERRORS = (pl.exceptions.PolarsError, OSError, pl.exceptions.PanicException)
_INTEGER_TYPES = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
)
_FLOAT_TYPES = frozenset({"FLOAT", "DOUBLE"})
_TZ_TIMESTAMP_TYPES = frozenset({"TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ", "TIMESTAMPTZ_NS"})
_RESERVED_COLUMNS = ("file_index", "file_row_number")  # read_parquet's virtual columns
# Text columns that may come as integers (a foreign writer's Slurm job ids): they load as
# their decimal text, which loses nothing.
TEXT_FROM_INTEGERS = frozenset({"alloc_job_id"})


def _accepts(name: str, target: str, source: str) -> bool:
    """Whether a file column `name` of DuckDB type `source` may load into contract type
    `target` (as `SAMPLE_TYPES` names it)."""
    target = target.upper()
    if name in TEXT_FROM_INTEGERS and source in _INTEGER_TYPES:
        return True
    if target == "TIMESTAMPTZ":
        return source in _TZ_TIMESTAMP_TYPES
    if target in _FLOAT_TYPES:
        return source in _FLOAT_TYPES or source in _INTEGER_TYPES or source.startswith("DECIMAL")
    if target in _INTEGER_TYPES:  # any width: a value that does not fit is the row's problem
        return source in _INTEGER_TYPES
    if target.endswith("[]"):  # a list of what its elements accept
        return source.endswith("[]") and _accepts("", target[:-2], source[:-2])
    if target.startswith("STRUCT("):  # its fields are cast, each to its own type
        return source.startswith("STRUCT(") and source.endswith(")")
    return source == target


def schema_problem(columns: dict[str, str]) -> str | None:
    """Why a file with these top-level columns (name -> DuckDB type) cannot load, if so."""
    for name in _RESERVED_COLUMNS:
        if name in columns:
            return f"column '{name}' is reserved for read_parquet's own use"
    for name in REQUIRED_SAMPLE_COLUMNS:
        if name not in columns:
            return f"missing required column '{name}'"
    for name, target in SAMPLE_COLUMNS:
        source = columns.get(name)
        if source is not None and not _accepts(name, target, source):
            return f"column '{name}' is {source}, expected {target.upper()}"
    return None


@functools.cache
def contract_schema() -> pl.Schema:
    """The contract's sample columns as polars types."""
    return pl.DataFrame(SAMPLE_SCHEMA.empty_table()).schema


@dataclass(frozen=True)
class FilePlan:
    """How one file's columns load into the contract's, decided from its schema."""

    problem: str | None = None  # why it cannot load (its quarantine reason)
    # Its contract columns as polars reads them, in contract order (None: DuckDB reads it).
    columns: tuple[tuple[str, pl.DataType], ...] | None = ()
    names: frozenset[str] = frozenset()  # every column it has, extra ones too


@dataclass(frozen=True)
class Footer:
    plan: FilePlan
    version: str | None = None  # the collector version its metadata names


def read_footer(path: str, relative: str) -> Footer:
    """The footer of the file at `path` (named `relative` in a reason)."""
    try:
        metadata = pl.read_parquet_metadata(path)
        encoded = metadata.get(_ARROW_SCHEMA_KEY)
        plan = _plan_from_stored(encoded) if encoded else None
        if plan is None:  # no Arrow schema stored, or one that does not decode
            plan = _plan_from_polars(tuple(pl.read_parquet_schema(path).items()))
    except READ_ERRORS as exc:
        return Footer(FilePlan(problem=unreadable_reason(exc, path, relative)))
    return Footer(plan, metadata.get(_VERSION_KEY))


@functools.lru_cache(maxsize=64)
def _plan_from_stored(encoded: str) -> FilePlan | None:
    """The plan of a file whose writer stored this Arrow schema (base64 IPC, as pyarrow and
    polars write it); None when it does not decode."""
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(encoded, validate=True)))
    except (binascii.Error, ValueError, pa.ArrowException):
        return None
    return plan_for_schema(schema)


@functools.lru_cache(maxsize=64)
def _plan_from_polars(columns: tuple[tuple[str, pl.DataType], ...]) -> FilePlan:
    return plan_for_schema(pl.DataFrame(schema=dict(columns)).to_arrow().schema)


_DUCKDB = threading.Lock()


@functools.lru_cache(maxsize=64)
def _duckdb_types(schema: pa.Schema) -> tuple[tuple[str, str], ...]:
    """Each column's type as DuckDB names it (the names the type rules and reasons use)."""
    with _DUCKDB, connect() as con:
        relation = con.from_arrow(schema.empty_table())
        return tuple(
            (str(n), str(t)) for n, t in zip(relation.columns, relation.types, strict=True)
        )


def plan_for_schema(schema: pa.Schema) -> FilePlan:
    """The plan of a file of this Arrow schema."""
    names = frozenset(schema.names)
    try:
        types = _duckdb_types(schema)
    except (duckdb.Error, pa.ArrowException, ValueError, TypeError):
        return FilePlan(columns=None, names=names)  # DuckDB reads it, and decides
    problem = schema_problem(dict(types))
    if problem is not None:
        return FilePlan(problem=problem, names=names)
    try:
        read = pl.DataFrame(schema.empty_table()).schema
    except (pl.exceptions.PolarsError, pa.ArrowException, ValueError, TypeError):
        return FilePlan(columns=None, names=names)
    columns: list[tuple[str, pl.DataType]] = []
    for name, target in contract_schema().items():
        source = read.get(name)
        if source is None:
            continue
        if not reads_without_loss(name, source, target):
            return FilePlan(columns=None, names=names)
        columns.append((name, source))
    return FilePlan(columns=tuple(columns), names=names)


def reads_without_loss(name: str, source: pl.DataType, target: pl.DataType) -> bool:
    """Whether polars casts a column read as `source` to its contract type `target` with no
    loss but that of values that do not fit (which the read checks): any time zone's
    timestamps to UTC, dictionary text to text, any number to a float, any integer to an
    integer, and to its decimal text where the rules allow (`TEXT_FROM_INTEGERS`). (The
    type rules have refused the rest already.)"""
    if source == target:
        return True
    if name == "ts":
        return isinstance(source, pl.Datetime) and source.time_zone is not None
    if target == pl.String:
        if name in TEXT_FROM_INTEGERS and source.is_integer():
            return True
        return isinstance(source, pl.Categorical | pl.Enum)
    if target.is_float():
        return source.is_numeric()
    if target.is_integer():
        return source.is_integer()
    return False


def unreadable_reason(exc: BaseException, full: str, relative: str) -> str:
    """The quarantine reason for the file at `full` that did not read: the error's text on
    one line, at most 300 characters, naming the file by `relative`."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else text[:297] + "..."
    text = text.replace(literal_path(full), relative).replace(full, relative)
    return f"cannot read Parquet: {text}"
