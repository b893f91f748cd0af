"""COMMENT ON for the tables gpufleet creates outside the models (contacts, the sent log).

The marts and the tables `ingest` has always written are documented from
`sql/marts/_docs.toml` by a full build, which expects every table named there to exist;
these tables appear only once their command has run, so they carry their texts here and
are documented when they are created.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import duckdb

from gpufleet.warehouse.base.sql_text import literal

# (table, column or None for the table itself, text)
TableDoc = tuple[str, str | None, str]


# The comment of each of some tables of `main` and of their columns, in one catalog query.
_COMMENTS_SQL = """
select table_name, null, comment from duckdb_tables()
where database_name = current_database() and schema_name = 'main'
    and list_contains($tables::varchar[], table_name)
union all
select table_name, column_name, comment from duckdb_columns()
where database_name = current_database() and schema_name = 'main'
    and list_contains($tables::varchar[], table_name)
"""


def table_comments(
    con: duckdb.DuckDBPyConnection, tables: Iterable[str]
) -> dict[tuple[str, str | None], str | None]:
    """The comment of each of `tables` (in `main`) that exists, keyed (table, None), and of
    each of their columns, keyed (table, column); None where there is none."""
    rows = con.execute(_COMMENTS_SQL, {"tables": sorted(set(tables))}).fetchall()
    return {(table, column): comment for table, column, comment in rows}


def document(
    con: duckdb.DuckDBPyConnection,
    docs: Sequence[TableDoc],
    *,
    current: Mapping[tuple[str, str | None], str | None] | None = None,
) -> None:
    """COMMENT ON each table and column named in `docs`, but those whose comment is its
    text already in `current` (`table_comments`): each comment is a write of the catalog."""
    for table, column, text in docs:
        if current is not None and current.get((table, column)) == text:
            continue
        target = f'column {table}."{column}"' if column else f"table {table}"
        con.execute(f"comment on {target} is {literal(text)}")
