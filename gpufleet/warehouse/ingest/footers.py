"""What a raw file's footer says about it: whether it can load, and how polars reads it.

Each file's footer is read once (`read_footer`: polars reads its key-value metadata, which
holds the Arrow schema its writer stored; only a file that stored none has its Parquet
schema read instead). The schema decides, by the rules of type acceptance
(`schemas.schema_problem`, docs/warehouse.md), whether the file is set aside, read in the
one pass (`FilePlan.columns`: its contract columns as polars reads them, cast afterwards to
the contract's types), or left to the careful path (a column polars would not cast
without loss, such as a process list of other fields). A fleet's files share a few
schemas, so each distinct one is decided once.
"""

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
from gpufleet.warehouse.ingest.schemas import TEXT_FROM_INTEGERS, one_line, schema_problem

_ARROW_SCHEMA_KEY = "ARROW:schema"
_VERSION_KEY = "gpufleet.collector_version"
_READ_ERRORS = (pl.exceptions.PolarsError, OSError, pl.exceptions.PanicException)


@functools.cache
def contract_schema() -> pl.Schema:
    """The contract's sample columns as polars types."""
    return pl.DataFrame(SAMPLE_SCHEMA.empty_table()).schema


@dataclass(frozen=True)
class FilePlan:
    """How one file's columns load into the contract's, decided from its schema."""

    problem: str | None = None  # why it cannot load (its quarantine reason)
    # Its contract columns as polars reads them, in contract order (None: the careful path).
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
    except _READ_ERRORS as exc:
        text = one_line(exc).replace(path, relative)
        return Footer(FilePlan(problem=f"cannot read Parquet: {text}"))
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
    with _DUCKDB:
        con = duckdb.connect()
        try:
            relation = con.from_arrow(schema.empty_table())
            return tuple(
                (str(n), str(t)) for n, t in zip(relation.columns, relation.types, strict=True)
            )
        finally:
            con.close()


def plan_for_schema(schema: pa.Schema) -> FilePlan:
    """The plan of a file of this Arrow schema."""
    names = frozenset(schema.names)
    try:
        types = _duckdb_types(schema)
    except (duckdb.Error, pa.ArrowException, ValueError, TypeError):
        return FilePlan(columns=None, names=names)  # let the careful path decide
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
