"""Run the SQL models in `sql/` (staging, intermediate, marts) against a DuckDB connection.

Finding the models and their order, rendering one (`render`, with relations remapped for an
incremental build), creating and dropping it, and the marts' `COMMENT ON`. The full build:
`full.py`.
The conventions (one select per file, materializations, variables, macros): `docs/warehouse.md`.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import json
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.base.frozen import frozen
from gpufleet.warehouse.base.raw_tables import ensure_raw_tables
from gpufleet.warehouse.base.sql_text import literal
from gpufleet.warehouse.build.memory import fit_memory_limit
from gpufleet.warehouse.build.sql_tree import macro_reads, relations_read, rename_relations

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"
DOCS_FILE_NAME = "_docs.toml"
MACROS_FILE_NAME = "_macros.sql"  # shared macros, run before the models
LAYERS = ("staging", "intermediate", "marts")
MATERIALIZATIONS = ("temp_view", "temp_table", "table", "view")
PERSISTENT = ("table", "view")  # the materializations that stay in the warehouse
TABLES = ("temp_table", "table")  # the materializations that hold rows
DEFAULT_MATERIALIZATION = {"staging": "temp_view", "intermediate": "temp_table", "marts": "table"}

# The one mart an intermediate may read: the per-sample window (int_samples_sequenced),
# stored once; a model reading the view instead would run the window again (minutes).
STORED_WINDOW = "samples_attributed_rows"

_MATERIALIZED_RE = re.compile(r"^\s*--\s*materialized:\s*(\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class Model:
    """One SQL model file."""

    name: str
    layer: str
    path: Path
    sql: str
    materialized: str
    reads: frozenset[str]  # every relation its SQL and its table macros read (sql_tree.py)
    depends_on: frozenset[str]  # the models among them


def _layer_of(path: Path, sql_dir: Path) -> str:
    layer = path.relative_to(sql_dir).parts[0]
    if layer not in LAYERS:
        raise ValueError(f"{path}: models live in sql/{{{','.join(LAYERS)}}}/, not sql/{layer}/")
    return layer


def discover_models(sql_dir: Path = SQL_DIR) -> dict[str, Model]:
    """Every `sql/<layer>/*.sql` (names starting with `_` are skipped), with its dependencies."""
    paths = sorted(p for p in sql_dir.rglob("*.sql") if not p.name.startswith("_"))
    texts: dict[str, tuple[Path, str]] = {}
    for path in paths:
        name = path.stem.lower()
        if name in texts:
            raise ValueError(f"{path}: model '{name}' is also defined in {texts[name][0]}")
        texts[name] = (path, path.read_text(encoding="utf-8").strip().rstrip(";").strip())
    macros_path = sql_dir / MACROS_FILE_NAME
    macros = (
        macro_reads(macros_path.read_text(encoding="utf-8"), source=str(macros_path))
        if macros_path.exists()
        else {}
    )
    models: dict[str, Model] = {}
    for name, (path, sql) in texts.items():
        layer = _layer_of(path, sql_dir)
        match = _MATERIALIZED_RE.search(sql)
        materialized = match.group(1) if match else DEFAULT_MATERIALIZATION[layer]
        if materialized not in MATERIALIZATIONS:
            raise ValueError(f"{path}: unknown materialization '{materialized}'")
        reads = relations_read(sql, source=str(path), macros=macros)
        models[name] = Model(
            name=name,
            layer=layer,
            path=path,
            sql=sql,
            materialized=materialized,
            reads=reads,
            depends_on=frozenset((reads & texts.keys()) - {name}),
        )
    for model in models.values():  # staging reads raw tables; intermediates, no mart
        for other in sorted(model.depends_on - {STORED_WINDOW}):
            if LAYERS.index(models[other].layer) > LAYERS.index(model.layer):
                kind = {"intermediate": "an intermediate", "marts": "a mart"}[models[other].layer]
                raise ValueError(
                    f"{model.path}: reads {other}, {kind}: a model reads models of its own "
                    f"layer and those before ({', '.join(LAYERS)}) only"
                )
    return models


def build_order(
    models: Mapping[str, Model], *, after: Mapping[str, Iterable[str]] | None = None
) -> list[str]:
    """A topological order of the models; among those ready, staging first, then by name.
    `after[name]`: models that `name` comes after besides those it reads."""
    waiting = {name: set(model.depends_on) for name, model in models.items()}
    for name, others in (after or {}).items():
        waiting[name] |= set(others)
    dependents: dict[str, list[str]] = {name: [] for name in models}
    for name, others in waiting.items():
        for dependency in others:
            dependents[dependency].append(name)
    ready = [(LAYERS.index(m.layer), name) for name, m in models.items() if not waiting[name]]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for dependent in dependents[name]:
            waiting[dependent].discard(name)
            if not waiting[dependent]:
                heapq.heappush(ready, (LAYERS.index(models[dependent].layer), dependent))
    if len(order) != len(models):
        stuck = sorted(set(models) - set(order))
        raise ValueError(f"models depend on each other in a cycle: {', '.join(stuck)}")
    return order


def shared_docs(sql_dir: Path = SQL_DIR) -> Mapping[str, Mapping[str, object]]:
    """`sql/marts/_docs.toml`: [table] description = "...", [table.columns] col = "...";
    `columns_from = "other"` takes the other table's column texts (its own win). Parsed once
    per text, frozen (read-only at every level), shared by the build, data tests and ingest."""
    path = sql_dir / "marts" / DOCS_FILE_NAME
    return _parsed_docs(path.read_text(encoding="utf-8"), str(path))


@functools.lru_cache(maxsize=4)
def _parsed_docs(text: str, source: str) -> Mapping[str, Mapping[str, object]]:
    docs: dict[str, dict[str, object]] = tomllib.loads(text)
    for table, entry in docs.items():
        other = entry.pop("columns_from", None)
        if other is None:
            continue
        inherited = docs.get(str(other), {}).get("columns")
        if not isinstance(inherited, dict):
            raise ValueError(f"{source}: [{table}] columns_from = {other!r}: no [{other}.columns]")
        own = entry.get("columns", {})
        entry["columns"] = {**inherited, **(own if isinstance(own, dict) else {})}
    return frozen(docs)


def apply_docs(
    con: duckdb.DuckDBPyConnection, table: str, docs: Mapping[str, object], source: Path
) -> None:
    """COMMENT ON the table and every one of its columns; a column without text is an error.
    Only the comments that differ from the warehouse's are written, in one transaction."""
    apply_all_docs(con, {table: docs}, source)


def apply_all_docs(
    con: duckdb.DuckDBPyConnection, docs: Mapping[str, Mapping[str, object]], source: Path
) -> None:
    """`apply_docs` for each table of `docs` (its name: its entry), all in one transaction,
    the warehouse's comments read with two catalog queries: a full build comments every
    column of every mart afresh, and a commit per column took a quarter of a small build."""
    in_warehouse = _comments_in_warehouse(con, list(docs))
    statements: list[str] = []
    for table, entry in docs.items():
        description = entry.get("description")
        columns = entry.get("columns", {})
        if not isinstance(description, str) or not isinstance(columns, Mapping):
            raise ValueError(f'{source}: [{table}] needs description = "..." and [{table}.columns]')
        kind, comment, actual = in_warehouse.get(table) or _described(con, table)
        missing = [column for column in actual if not isinstance(columns.get(column), str)]
        if missing:
            raise ValueError(f"{source}: [{table}.columns] lacks {', '.join(missing)}")
        if comment != description:
            statements.append(f"comment on {kind} {table} is {literal(description)}")
        statements += [
            f'comment on column {table}."{column}" is {literal(columns[column])}'
            for column, now in actual.items()
            if now != columns[column]
        ]
    if statements:  # one call: DuckDB parses and runs them in turn
        with _one_transaction(con):
            con.execute(";\n".join(statements))


# What a relation is, its comment and its columns' comments by name, in order.
_Comments = tuple[str, str | None, dict[str, str | None]]


def _comments_in_warehouse(
    con: duckdb.DuckDBPyConnection, tables: list[str]
) -> dict[str, _Comments]:
    """Of each of `tables` that is a relation of the main schema: its kind ('table' or
    'view'), its comment and its columns' comments (two catalog queries for them all)."""
    # (temporary objects live in the database `temp`, not the current one)
    here = "schema_name = 'main' and database_name = current_database()"
    names = {"names": tables}
    relations = con.execute(
        f"""
        select table_name, 'table', comment from duckdb_tables()
        where table_name in (select unnest($names)) and {here}
        union all
        select view_name, 'view', comment from duckdb_views()
        where view_name in (select unnest($names)) and {here}
        """,
        names,
    ).fetchall()
    found: dict[str, _Comments] = {
        str(name): (str(kind), comment, {}) for name, kind, comment in relations
    }
    rows = con.execute(
        f"""
        select table_name, column_name, comment from duckdb_columns()
        where table_name in (select unnest($names)) and {here}
        order by table_name, column_index
        """,
        names,
    ).fetchall()
    for table, column, now in rows:
        found[str(table)][2][str(column)] = now
    return found


def _described(con: duckdb.DuckDBPyConnection, table: str) -> _Comments:
    """A name that is no relation of the main schema: ('table', None, DESCRIBE's columns),
    whose COMMENT ON fails as DuckDB says."""
    described = con.execute(f"describe {table}").fetchall()
    return "table", None, {str(row[0]): None for row in described}


@contextlib.contextmanager
def _one_transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The statements run inside as one transaction; inside a caller's, as part of it."""
    try:
        con.begin()
    except duckdb.TransactionException:  # already in one: the caller commits
        yield
        return
    try:
        yield
    except BaseException:
        con.rollback()
        raise
    con.commit()


def apply_table_docs(con: duckdb.DuckDBPyConnection, table: str, sql_dir: Path = SQL_DIR) -> None:
    """COMMENT ON one documented table (or view) again, from the marts' docs file."""
    apply_docs(con, table, shared_docs(sql_dir)[table], sql_dir / "marts" / DOCS_FILE_NAME)


def model_variables(config: Config) -> dict[str, float | str]:
    """The configuration the models read with getvariable()."""
    return {
        "idle_threshold_pct": float(config.idle.threshold_pct),
        "idle_min_minutes": float(config.idle.min_minutes),
        "max_gap_factor": float(config.series.max_gap_factor),
        "timezone": config.timezone,
        # [clusters.<site>] timezone, as a JSON object (site_timezone in sql/_macros.sql)
        "site_timezones": json.dumps(dict(config.sites), sort_keys=True),
    }


def set_variables(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    for name, value in model_variables(config).items():
        con.execute(f"set variable {name} = ?", [value])


def render(model: Model, remap: Mapping[str, str] | None = None) -> str:
    """The model's select, reading `remap[name]` wherever it reads relation `name` (a table
    of its syntax tree, not a CTE, column or string of that name: sql_tree.py)."""
    if not remap:
        return model.sql
    return rename_relations(model.sql, remap, source=str(model.path))


_KIND = {"temp_view": "temp view", "temp_table": "temp table", "table": "table", "view": "view"}


def create_model(
    con: duckdb.DuckDBPyConnection,
    model: Model,
    remap: Mapping[str, str] | None = None,
    *,
    order_by: str = "",
) -> int | None:
    """The model's table or view; a table's rows written in the order of `order_by`'s
    columns when given. The rows a table holds (DuckDB's answer to the statement: no count
    after it), None for a view. A mart of the other kind (a table that is a view now) is
    dropped first by the full build (`run.py`'s _free_marts)."""
    sql = render(model, remap)
    if order_by:
        sql = f"select * from (\n{sql}\n) order by {order_by}"
    row = con.execute(
        f"create or replace {_KIND[model.materialized]} {model.name} as\n{sql}"
    ).fetchone()
    return int(row[0]) if row and model.materialized in TABLES else None


def create_empty(con: duckdb.DuckDBPyConnection, model: Model) -> None:
    """The model's table with no rows, for a build that inserts them a slice at a time."""
    kind = "temp table" if model.materialized.startswith("temp") else "table"
    con.execute(f"create or replace {kind} {model.name} as select * from ({model.sql}) limit 0")


def drop_model(con: duckdb.DuckDBPyConnection, model: Model) -> None:
    kind = "view" if model.materialized == "temp_view" else "table"
    con.execute(f"drop {kind} if exists temp.{model.name}")


BUILD_SETTINGS = (
    # A CTAS need not keep row order; that saves memory on the large per-sample models.
    "set preserve_insertion_order = false",
    # DuckDB estimates a window's output at a few rows, so it would build its hash tables on
    # the samples and probe them with the small name tables (series, hosts, teams): joins
    # costlier than the window, and rows scrambled that samples_attributed would then sort.
    # The models put the small side of every join on the right, as written.
    "set disabled_optimizers = 'build_side_probe_side'",
)


def prepare(con: duckdb.DuckDBPyConnection, config: Config, *, sql_dir: Path = SQL_DIR) -> None:
    """The raw tables, the configuration variables, the macros and the build's settings (the
    id tables: `state.ensure_state_tables`, which the build runs next)."""
    ensure_raw_tables(con)
    set_variables(con, config)
    con.execute((sql_dir / MACROS_FILE_NAME).read_text(encoding="utf-8"))
    for setting in BUILD_SETTINGS:  # a fanned-out build's workers run them too
        con.execute(setting)
    # DuckDB would take up to 80 % of the machine's memory; capped, it spills to disk
    # instead, for a little more time and far less memory.
    # Below 1.5 GB when the rest of the process holds much: gpufleet/warehouse/build/memory.py.
    fit_memory_limit(con, measure=True)


def count_mart_rows(
    con: duckdb.DuckDBPyConnection,
    models: Mapping[str, Model],
    order: list[str],
    *,
    views: bool = True,
) -> dict[str, int]:
    """Each mart's rows. A view over one table (samples_attributed names the ids of
    samples_attributed_rows, row for row) counts as that table: counting the view would
    run its joins over every sample. A view over several (job_efficiency) is counted only
    with `views`: counting it runs it over every retained day, which an incremental build
    (a steady cycle) leaves out. One statement for them all."""
    counted: dict[str, str] = {}
    for name in order:
        model = models[name]
        if model.layer != "marts":
            continue
        if model.materialized == "view" and len(model.depends_on) == 1:
            counted[name] = next(iter(model.depends_on))
        elif model.materialized != "view" or views:
            counted[name] = name
    if not counted:
        return {}
    names = list(counted)
    rows = con.execute(
        " union all ".join(
            f"select {i}, count(*) from {counted[name]}" for i, name in enumerate(names)
        )
    ).fetchall()
    counts = {names[i]: int(rows_counted) for i, rows_counted in rows}
    return {name: counts[name] for name in names}
