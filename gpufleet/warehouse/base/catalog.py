"""Whether a warehouse holds a table (or view): for code that reads a warehouse an older
release wrote, or one not built yet."""

from __future__ import annotations

import duckdb


def has_table(con: duckdb.DuckDBPyConnection, name: str, *, or_view: bool = False) -> bool:
    """Whether the current database has the table `name` (`schema.name`, or a name in
    `main`); a view of that name counts only `or_view`."""
    schema, _, table = name.rpartition(".")
    rows = con.execute(
        "select count(*) from information_schema.tables where table_catalog = current_database()"
        " and table_schema = ? and table_name = ? and (table_type = 'BASE TABLE' or ?)",
        [schema or "main", table, or_view],
    ).fetchall()  # to the end: DuckDB refuses other work on a connection mid-result
    return bool(rows[0][0])
