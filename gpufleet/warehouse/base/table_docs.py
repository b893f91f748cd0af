"""COMMENT ON for the tables gpufleet creates outside the models (contacts, the sent log).

The marts and the tables `ingest` has always written are documented from
`sql/marts/_docs.toml` by a full build, which expects every table named there to exist;
these tables appear only once their command has run, so they carry their texts here and
are documented when they are created.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from gpufleet.warehouse.base.sql_text import literal

# (table, column or None for the table itself, text)
TableDoc = tuple[str, str | None, str]


def document(con: duckdb.DuckDBPyConnection, docs: Sequence[TableDoc]) -> None:
    """COMMENT ON each table and column named in `docs`."""
    for table, column, text in docs:
        target = f'column {table}."{column}"' if column else f"table {table}"
        con.execute(f"comment on {target} is {literal(text)}")
