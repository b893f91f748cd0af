"""The marts' data tests (`data_tests` beside their docs in `sql/marts/_docs.toml`), which
every build runs before it publishes.

A table's tests, as dbt writes them beside its docs:

    data_tests = [
        { unique = ["day", "cluster", "team"] },             # no two rows share these
        { not_null = ["day", "team"] },                      # each column has a value
        { accepted_values = { column = "attributed_by", values = ["allocation", "none"] } },
        { expression = "waste_usd >= 0" },                   # true (or null) in every row
    ]

A table is read twice at most: one pass counts the failing rows of every row test, one
aggregate per `unique`. A failure is a GpufleetError naming the table, the test and a row;
raised inside the build's write transaction, it leaves the published warehouse as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
from sqlglot import exp

from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base.sql_text import literal
from gpufleet.warehouse.build.models import DOCS_FILE_NAME, load_docs
from gpufleet.warehouse.build.sql_tree import parse

_KINDS = ("unique", "not_null", "accepted_values", "expression")
_SHOWN_CHARS = 300  # of the failing row, in the one-line message


@dataclass(frozen=True, kw_only=True)
class DataTest:
    """One test of one table: `failing` is SQL true for a failing row (a row test), or
    `columns` must be unique together."""

    table: str
    label: str  # how the message names it: unique(day, team), waste_usd >= 0, ...
    failing: str = ""
    columns: tuple[str, ...] = ()


def _quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _names(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"{where}: a column name or a list of them")


def parse_data_tests(table: str, entries: object, source: Path) -> list[DataTest]:
    """A table's `data_tests` list from the docs file; a ValueError naming `source` and the
    table for a test it cannot read."""
    where = f"{source}: [{table}] data_tests"
    if not isinstance(entries, list):
        raise ValueError(f"{where}: a list of tests")
    tests: list[DataTest] = []
    for entry in entries:
        if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in _KINDS:
            raise ValueError(f"{where}: each test is one of {', '.join(_KINDS)}, not {entry!r}")
        kind, value = next(iter(entry.items()))
        if kind == "unique":
            columns = _names(value, f"{where}: unique")
            tests.append(
                DataTest(table=table, label=f"unique({', '.join(columns)})", columns=columns)
            )
        elif kind == "not_null":
            for column in _names(value, f"{where}: not_null"):
                tests.append(
                    DataTest(
                        table=table,
                        label=f"not_null({column})",
                        failing=f"{_quoted(column)} is null",
                    )
                )
        elif kind == "accepted_values":
            named = value.get("column") if isinstance(value, dict) else None
            values = value.get("values") if isinstance(value, dict) else None
            if not isinstance(named, str) or not isinstance(values, list) or not values:
                raise ValueError(f'{where}: accepted_values = {{ column = "...", values = [...] }}')
            listed = ", ".join(literal(str(v)) for v in values)
            tests.append(
                DataTest(
                    table=table,
                    label=f"accepted_values({named})",
                    failing=f"{_quoted(named)} not in ({listed})",
                )
            )
        else:
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{where}: expression = a SQL condition on one row")
            tests.append(DataTest(table=table, label=value, failing=f"not ({value})"))
    return tests


def load_data_tests(docs: Mapping[str, Mapping[str, object]], source: Path) -> list[DataTest]:
    """Every table's tests from the docs file's entries (models.load_docs)."""
    tests: list[DataTest] = []
    for table, entry in docs.items():
        if "data_tests" in entry:
            tests += parse_data_tests(table, entry["data_tests"], source)
    return tests


def check_marts(con: duckdb.DuckDBPyConnection, sql_dir: Path) -> None:
    """Run the data tests of `sql/marts/_docs.toml` on the build's connection."""
    docs = load_docs(sql_dir)
    run_data_tests(con, load_data_tests(docs, sql_dir / "marts" / DOCS_FILE_NAME))


def run_data_tests(con: duckdb.DuckDBPyConnection, tests: Sequence[DataTest]) -> None:
    """Raise a GpufleetError for the first test with a failing row, naming it and the row."""
    tables = list(dict.fromkeys(test.table for test in tests))
    for table in tables:
        row_tests = [test for test in tests if test.table == table and test.failing]
        if row_tests:
            counts = con.execute(
                "select "
                + ", ".join(f"count(*) filter (where {test.failing})" for test in row_tests)
                + f" from {table}"
            ).fetchone()
            for test, failed in zip(row_tests, counts or (), strict=True):
                if failed:
                    _fail(con, test, int(failed), f"select * from {table} where {test.failing}")
        for test in tests:
            if test.table != table or not test.columns:
                continue
            keys = ", ".join(_quoted(column) for column in test.columns)
            repeated = (
                f"select {keys}, count(*) as repeats from {table} group by all having repeats > 1"
            )
            row = con.execute(f"select count(*) from ({repeated})").fetchone()
            if row and row[0]:
                _fail(con, test, int(row[0]), repeated, what="keys repeated")


def _fail(
    con: duckdb.DuckDBPyConnection, test: DataTest, failed: int, rows_sql: str, what: str = "rows"
) -> None:
    cursor = con.execute(f"{rows_sql} limit 1")
    names = [column[0] for column in cursor.description or ()]
    row = dict(zip(names, cursor.fetchone() or (), strict=False))
    # the columns the test reads first, then the rest of the row
    tested = [name for name in names if name in _columns_of(test)]
    shown = ", ".join(
        f"{name}={_shown(row[name])}" for name in [*tested, *(n for n in names if n not in tested)]
    )
    if len(shown) > _SHOWN_CHARS:
        shown = shown[: _SHOWN_CHARS - 3] + "..."
    raise GpufleetError(
        f"data test failed, nothing published: {test.table}: {test.label}: {failed:,} {what}, "
        f"e.g. {shown} (sql/marts/_docs.toml)"
    )


def _columns_of(test: DataTest) -> set[str]:
    if test.columns:
        return set(test.columns)
    return {column.name for column in parse(test.failing).find_all(exp.Column)}


def _shown(value: object) -> str:
    """A value on one line: text quoted (names are untrusted: newlines escaped), the rest
    as it prints."""
    return repr(value) if isinstance(value, str) else str(value)
