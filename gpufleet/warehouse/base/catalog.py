"""Whether a warehouse holds a table (or view): for code that reads a warehouse an older
release wrote, or one not built yet."""

from __future__ import annotations

from collections.abc import Iterable

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


def relation_kinds(con: duckdb.DuckDBPyConnection, names: Iterable[str]) -> dict[str, str]:
    """'table' or 'view' for each of `names` that is a relation of the current database's
    `main` schema, in one catalog query."""
    here = "database_name = current_database() and schema_name = 'main'"
    rows = con.execute(
        f"""
        select table_name, 'table' from duckdb_tables()
        where {here} and list_contains($names::varchar[], table_name)
        union all
        select view_name, 'view' from duckdb_views()
        where {here} and list_contains($names::varchar[], view_name)
        """,
        {"names": sorted(set(names))},
    ).fetchall()
    return {str(name): str(kind) for name, kind in rows}
