"""The sandbox every analyst's query runs in: one statement that only reads, on a DuckDB of
its own that attaches the published warehouse read-only and reads the lake through Arrow.

`connect_sandboxed` is not just behind a statement filter: a DuckDB of its own attaches the
warehouse read-only, the lake's files are read through Arrow, and DuckDB's file access is
then switched off and its settings locked. No statement (`explain analyze copy ... to`,
`pragma enable_profiling`, `read_text('/proc/self/environ')`, `attach`, `load`,
`set enable_external_access = true`) can read or write a file, the lake's included; DuckDB
only spills to a temporary directory of its own.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator

import duckdb
import pyarrow.dataset as pads

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base.connect import connect
from gpufleet.warehouse.base.raw_tables import SAMPLE_COLUMNS
from gpufleet.warehouse.lake.samples import STORED, evicted_paths

# Statements that only read: one of these, and only one, per query.
READ_STATEMENTS = frozenset(
    {
        duckdb.StatementType.SELECT,
        duckdb.StatementType.EXPLAIN,
        duckdb.StatementType.PRAGMA,
        duckdb.StatementType.CALL,
    }
)


def check_read_only(query: str) -> None:
    """A GpufleetError unless `query` is exactly one statement that only reads."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise GpufleetError(f"query: {one_line(exc)}") from exc
    if len(statements) != 1:
        raise GpufleetError(f"query: expected one SQL statement, got {len(statements)}")
    kind = statements[0].type
    if kind not in READ_STATEMENTS:
        raise GpufleetError(
            f"query: only statements that read are allowed (select, describe, show, "
            f"summarize, explain), not {kind.name.lower()}"
        )


def one_line(exc: BaseException) -> str:
    """An error's message on one line, as the CLI prints it."""
    return " ".join(str(exc).split())


# The name the sandbox attaches the warehouse as: a file's own stem, as when it is opened.
WAREHOUSE_ALIAS = "warehouse"
# The registered Arrow dataset of the lake's evicted files that the sandbox's `samples` reads.
LAKE_DATASET = "_lake_samples"


@contextlib.contextmanager
def connect_sandboxed(config: Config) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection that reads the published warehouse and its lake, and no other file.

    An in-memory DuckDB of its own (a file opened twice in one process shares one DuckDB
    and its settings; this one shares nothing) attaches the warehouse read-only, and a
    temporary view `samples` reads the lake's evicted files through Arrow rather than
    DuckDB. Then DuckDB's external access is switched off and its configuration locked:
    no statement reads or writes a file, the lake's included (a path DuckDB may read, it may
    also write), or turns that back on. DuckDB spills only to a temporary directory of this
    connection's own, removed on close.
    """
    warehouse = config.warehouse_path
    if not warehouse.is_file():
        raise GpufleetError(f"{warehouse}: no warehouse yet; run 'gpufleet ingest' first")
    with (
        tempfile.TemporaryDirectory(prefix="gpufleet-query-") as spill,
        contextlib.closing(connect(":memory:", config={"temp_directory": spill})) as con,
    ):
        try:
            con.execute(
                f"attach $path as {WAREHOUSE_ALIAS} (read_only)",
                {"path": str(warehouse.absolute())},
            )
        except duckdb.Error as exc:
            raise GpufleetError(f"{warehouse}: cannot open the warehouse: {one_line(exc)}") from exc
        con.execute(f"use {WAREHOUSE_ALIAS}")
        _read_lake_through_arrow(con, config)
        con.execute("set autoinstall_known_extensions = false")
        con.execute("set python_enable_replacements = false")
        con.execute("set enable_external_access = false")
        con.execute("set lock_configuration = true")
        yield con


def _read_lake_through_arrow(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    """Temporary view `samples` (found before the warehouse's own): the warehouse's
    `samples_stored` and the lake's evicted files, these read by Arrow, with the view's
    columns and types. Without evicted files the warehouse's view reads no file at all.
    With one missing, `samples` fails saying so, and the other tables still read."""
    has_lake = con.execute(
        "select 1 from duckdb_tables() where database_name = current_database()"
        " and schema_name = 'build_state' and table_name = 'lake_files'"
    ).fetchone()
    if not has_lake:
        return
    stored = f"{WAREHOUSE_ALIAS}.main.{STORED}"
    # The sample columns samples_stored has: a warehouse not opened for writing since an
    # older release lacks the newer ones (the Arrow dataset reads NULL where a file does).
    found = con.sql(f"select * from {stored} limit 0").columns
    columns = ", ".join(f'"{name}"' for name, _ in SAMPLE_COLUMNS if name in found)
    try:
        paths = evicted_paths(con, config)
    except GpufleetError as exc:
        message = "'" + str(exc).replace("'", "''") + "'"
        con.execute(
            f"create temp view samples as select {columns} from {stored} "
            f"where error({message}) is null"
        )
        return
    if not paths:
        return
    schema = con.sql(f"select {columns} from {stored} limit 0").to_arrow_table()
    con.register(LAKE_DATASET, pads.dataset(paths, schema=schema.schema, format="parquet"))
    con.execute(
        f"create temp view samples as "
        f"select {columns} from {stored} "
        f"union all select {columns} from {LAKE_DATASET}"
    )
