"""Schema acceptance: which raw files' columns load into the contract's sample columns.

The type rules (`schema_problem`), the files' schemas read in bulk with `parquet_schema`
(`read_schemas`), a batch's probe before it loads (`probe_batch`), and the quarantine
reason for a file DuckDB cannot read. The rules are listed in `docs/warehouse.md` (type
acceptance).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.base.raw_tables import REQUIRED_SAMPLE_COLUMNS, SAMPLE_COLUMNS, literal_path
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest.files import MAX_FILES_PER_BATCH
from gpufleet.warehouse.lake.compact_ahead import collector_versions

_INTEGER_TYPES = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
)
_FLOAT_TYPES = frozenset({"FLOAT", "DOUBLE"})
_TZ_TIMESTAMP_TYPES = frozenset({"TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ", "TIMESTAMPTZ_NS"})
CONTRACT_TYPES = dict(SAMPLE_COLUMNS)
_RESERVED_COLUMNS = ("file_index", "file_row_number")  # read_parquet's virtual columns
# Text columns that may come as integers (a foreign writer's Slurm job ids): they load as
# their decimal text, which loses nothing.
TEXT_FROM_INTEGERS = frozenset({"alloc_job_id"})


def _accepts(name: str, target: str, source: str) -> bool:
    """Whether a file column `name` of DuckDB type `source` may load into contract type
    `target`."""
    if name in TEXT_FROM_INTEGERS and source in _INTEGER_TYPES:
        return True
    if target == "timestamptz":
        return source in _TZ_TIMESTAMP_TYPES
    if target in {"float", "double"}:
        return source in _FLOAT_TYPES or source in _INTEGER_TYPES or source.startswith("DECIMAL")
    if target in {"usmallint", "bigint", "smallint", "integer", "ubigint"}:
        return source in _INTEGER_TYPES
    if target == "varchar":
        return source == "VARCHAR"
    if target == "boolean":
        return source == "BOOLEAN"
    if target == "integer[]":  # xid_errors: a list of integers of any width
        return source.endswith("[]") and source.removesuffix("[]") in _INTEGER_TYPES
    if target.endswith("[]"):  # processes: a list of structs
        return source.startswith("STRUCT(") and source.endswith(")[]")
    raise AssertionError(f"no acceptance rule for contract type {target}")


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
def contract_type_names() -> dict[str, str]:
    """Each sample column's contract type as `parquet_schema` spells it (DuckDB's name)."""
    con = duckdb.connect()
    names: dict[str, str] = {}
    for name, kind in SAMPLE_COLUMNS:
        row = con.execute(f"select typeof(null::{kind})").fetchone()
        assert row is not None
        names[name] = row[0]
    return names


@dataclass
class BatchProbe:
    """What a batch's files are, read from their footers before the batch loads."""

    schemas: dict[str, dict[str, str]]  # the files that can load: {path: {column: type}}
    problems: dict[str, str]  # the files that cannot: {path: reason}
    versions: dict[str, str]  # collector version by absolute path (when asked for)
    # The connection that read the footers, which it keeps (DuckDB's Parquet metadata
    # cache): the batch is read through it, so each footer is parsed once. Close it.
    reader: duckdb.DuckDBPyConnection


def probe_batch(
    config: Config, files: Sequence[SampleFile], *, versions: bool, memory_limit: str
) -> BatchProbe:
    """Read the schemas (and the collector `versions`) of a batch's files through a new
    in-memory connection, which the batch is then read through."""
    reader = duckdb.connect(config={"memory_limit": memory_limit})
    try:
        reader.execute("set parquet_metadata_cache = true")  # once parquet is loaded
        schemas, problems = read_schemas(reader, config, files)
        for path, columns in schemas.items():
            problem = schema_problem(columns)
            if problem:
                problems[path] = problem
        good = {p: c for p, c in schemas.items() if p not in problems}
        found = (
            collector_versions(reader, [literal_path(str(config.data_dir / p)) for p in good])
            if versions and good
            else {}
        )
    except BaseException:
        reader.close()
        raise
    return BatchProbe(good, problems, found, reader)


def read_schemas(
    con: duckdb.DuckDBPyConnection, config: Config, files: Sequence[SampleFile]
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """({path: {column: type}} for readable files, {path: reason} for unreadable ones).

    One `parquet_schema` call per chunk of files; only when it fails is each file of the
    chunk read alone, to find the one that cannot be read.
    """
    schemas: dict[str, dict[str, str]] = {}
    unreadable: dict[str, str] = {}
    for start in range(0, len(files), MAX_FILES_PER_BATCH):
        chunk = files[start : start + MAX_FILES_PER_BATCH]
        absolute = {str(config.data_dir / f.path): f.path for f in chunk}
        try:
            found = _parquet_schemas(con, list(absolute))
        except duckdb.Error:
            found = {}
            for path in absolute:
                try:
                    found.update(_parquet_schemas(con, [path]))
                except duckdb.OutOfMemoryException:
                    raise  # the machine's problem, not the file's
                except duckdb.Error as exc:
                    unreadable[absolute[path]] = unreadable_reason(exc, path, absolute[path])
        for path, columns in found.items():
            schemas[absolute[path]] = columns
    return schemas, unreadable


def _parquet_schemas(
    con: duckdb.DuckDBPyConnection, absolute_paths: list[str]
) -> dict[str, dict[str, str]]:
    # One signature per file (its schema elements in order), and the files grouped by it in
    # SQL: each distinct signature reaches Python, and is parsed, once (a batch's 2,000
    # files usually share one). A list of structs, not joined text: column names come from
    # the files, and may hold any character.
    rows = con.execute(
        """
        select elements, list(file_name) as files
        from (
            select
                file_name,
                list(
                    (name, coalesce(num_children, 0), coalesce(duckdb_type, ''))
                    order by column_id
                ) as elements,
            from parquet_schema($files)
            group by file_name
        )
        group by elements
        """,
        {"files": [literal_path(path) for path in absolute_paths]},
    ).fetchall()
    result: dict[str, dict[str, str]] = {}
    for elements, files in rows:
        tree = [("", str(n), int(c), str(t)) for n, c, t in elements]
        columns = _top_level_columns(tree).get("", {})
        for file in files:
            result[file] = dict(columns)
    return result


def _top_level_columns(rows: Iterable[tuple[Any, ...]]) -> dict[str, dict[str, str]]:
    """file -> {column: duckdb type} from `parquet_schema` rows (file, name, children, type)."""
    result: dict[str, dict[str, str]] = {}
    # Rows come per file in schema order: the root, then a depth-first walk of the tree.
    pending: dict[str, list[int]] = {}  # file -> stack of children still to visit per level
    for file, name, children, duckdb_type in rows:
        stack = pending.get(file)
        if stack is None:  # the root of a new file
            pending[file] = [children or 0]
            result[file] = {}
            continue
        while stack and stack[-1] == 0:
            stack.pop()
        if not stack:
            continue
        if len(stack) == 1:
            result[file][name] = duckdb_type
        stack[-1] -= 1
        if children:
            stack.append(children)
    return result


def unreadable_reason(exc: BaseException, full: str, relative: str) -> str:
    """The quarantine reason for a file DuckDB could not read, naming it by `relative`."""
    text = one_line(exc).replace(literal_path(full), relative).replace(full, relative)
    return f"cannot read Parquet: {text}"


def one_line(exc: BaseException) -> str:
    """An error's text on one line, at most 300 characters."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."
