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

An incremental build right after a publish whose marts passed the tests (the last one, as
`build_state.marts_tested` records) tests only the rows it replaced (`replaced_rows`: those
of the keys it logged for the other slot, `publish/log.py`): every other row is as it was
tested, and a cycle reads what it changed, not every retained day. A `unique` test is
restricted so only where each key it logged names columns of the test's (a repeat of a
replaced row then has the same key, and is replaced too); otherwise it reads the table. (A
run's key comes with a bound on its end, `publish/log.py` REPLAY_BOUNDS: a repeat of a
replaced run's id among runs that ended before the bound is not read.)
After any other publish (one that may have changed the marts untested) every row is tested.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
from sqlglot import exp

from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base.sql_text import literal
from gpufleet.warehouse.build.models import DOCS_FILE_NAME, shared_docs
from gpufleet.warehouse.build.sql_tree import parse
from gpufleet.warehouse.publish.log import REPLAY_KEYS, current_generation, replay_match

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
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"{where}: a column name or a list of them")


def parse_data_tests(table: str, entries: object, source: Path) -> list[DataTest]:
    """A table's `data_tests` list from the docs file; a ValueError naming `source` and the
    table for a test it cannot read."""
    where = f"{source}: [{table}] data_tests"
    if not isinstance(entries, list | tuple):
        raise ValueError(f"{where}: a list of tests")
    tests: list[DataTest] = []
    for entry in entries:
        if not isinstance(entry, Mapping) or len(entry) != 1 or next(iter(entry)) not in _KINDS:
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
            named = value.get("column") if isinstance(value, Mapping) else None
            values = value.get("values") if isinstance(value, Mapping) else None
            if not isinstance(named, str) or not isinstance(values, list | tuple) or not values:
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
    """Every table's tests from the docs file's entries (models.shared_docs)."""
    tests: list[DataTest] = []
    for table, entry in docs.items():
        if "data_tests" in entry:
            tests += parse_data_tests(table, entry["data_tests"], source)
    return tests


TESTED_DDL = """
create schema if not exists build_state;
-- the publish whose marts last passed the data tests
create table if not exists build_state.marts_tested (generation bigint not null);
"""


def check_marts(con: duckdb.DuckDBPyConnection, sql_dir: Path, *, incremental: bool) -> None:
    """Run the data tests of `sql/marts/_docs.toml` on the build's connection: after an
    `incremental` build that follows a tested publish, on the rows it replaced; else on
    every row (see the module's docstring). Records the publish as tested."""
    docs = shared_docs(sql_dir)
    tests = load_data_tests(docs, sql_dir / "marts" / DOCS_FILE_NAME)
    con.execute(TESTED_DDL)
    generation = current_generation(con)
    ((tested,),) = con.execute("select max(generation) from build_state.marts_tested").fetchall()
    if incremental and tested == generation - 1:
        tables = dict.fromkeys(test.table for test in tests)
        replaced = {table: replaced_rows(con, table, generation) for table in tables}
        run_data_tests(con, tests, replaced)
    else:
        run_data_tests(con, tests)
    con.execute("delete from build_state.marts_tested")
    con.execute("insert into build_state.marts_tested values (?)", [generation])


# The columns of a table each logged key selects its rows by (REPLAY_KEYS' `{t}.column`).
_KEY_COLUMNS = {
    kind: frozenset(re.findall(r"\{t\}\.(\w+)", match)) for kind, match in REPLAY_KEYS.items()
}


@dataclass(frozen=True)
class ReplacedRows:
    """SQL of the rows of a table that one publish replaced (`rows`), and the columns
    every key it logged for the table selects them by (`keyed_by`)."""

    rows: str
    keyed_by: frozenset[str]


def replaced_rows(con: duckdb.DuckDBPyConnection, table: str, generation: int) -> ReplacedRows:
    """The rows of `table` that publish `generation` replaced, by the keys it logged."""
    kinds = [
        kind
        for (kind,) in con.execute(
            "select distinct key from build_state.replaced"
            " where generation = ? and table_name = ? order by key",
            [generation, table],
        ).fetchall()
    ]
    if not kinds:
        return ReplacedRows(f"(select * from {table} limit 0)", frozenset())
    scoped = "\nunion all\n".join(
        f"""select rows.*, rows.rowid as _tested_rowid,
            from {table} as rows
            semi join (
                select * from build_state.replaced
                where generation = {int(generation)} and table_name = {literal(table)}
                    and key = {literal(kind)}
            ) as keys on {replay_match(kind, t="rows", k="keys")}"""
        for kind in kinds
    )
    rows = f"""(
        select distinct on (_tested_rowid) * exclude (_tested_rowid) from ({scoped})
    )"""
    return ReplacedRows(rows, frozenset().union(*(_KEY_COLUMNS[kind] for kind in kinds)))


def run_data_tests(
    con: duckdb.DuckDBPyConnection,
    tests: Sequence[DataTest],
    replaced: Mapping[str, ReplacedRows] | None = None,
) -> None:
    """Raise a GpufleetError for the first test with a failing row, naming it and the row;
    a table in `replaced` is tested on those rows of it only (see the module's docstring)."""
    tables = list(dict.fromkeys(test.table for test in tests))
    for table in tables:
        scope = replaced.get(table) if replaced is not None else None
        rows = f"{scope.rows} as {table}" if scope is not None else table
        row_tests = [test for test in tests if test.table == table and test.failing]
        if row_tests:
            counts = con.execute(
                "select "
                + ", ".join(f"count(*) filter (where {test.failing})" for test in row_tests)
                + f" from {rows}"
            ).fetchone()
            for test, failed in zip(row_tests, counts or (), strict=True):
                if failed:
                    _fail(con, test, int(failed), f"select * from {rows} where {test.failing}")
        for test in tests:
            if test.table != table or not test.columns:
                continue
            keys = ", ".join(_quoted(column) for column in test.columns)
            source = rows if scope is not None and scope.keyed_by <= set(test.columns) else table
            repeated = (
                f"select {keys}, count(*) as repeats from {source} group by all having repeats > 1"
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
