"""What every build pays however small its fleet: the statements it runs besides its models'.

DuckDB takes some 0.2 to 0.3 ms of CPU for any statement, however little it does (a full
build of a tiny fleet ran about 730): a statement a model or a mart that tells the build
nothing it does not know is a cost the suite's hundreds of small builds pay each time.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpufleet.warehouse.build import build_models, memory
from gpufleet.warehouse.build.models import SQL_DIR, discover_models
from gpufleet.warehouse.build.steps import StepClock
from tests.test_models_fixtures import T0, Fleet

pytestmark = pytest.mark.fleet

MIB = 1024 * 1024


class StatementLog:
    """A connection that keeps the text of each `execute` run through it (a string of
    several statements once); pass it where a connection is expected."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self.statements: list[str] = []

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        self.statements.append(" ".join(sql.split()))
        return self._con.execute(sql, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def _fleet() -> Fleet:
    fleet = Fleet()
    fleet.series(T0, 60, gpu_uuid="GPU-A", host="node1", gpu_util_pct=50.0)
    fleet.series(T0, 60, gpu_uuid="GPU-B", host="node2", gpu_index=1, gpu_util_pct=1.0)
    return fleet


def test_the_memory_cap_is_not_read_back_from_duckdb(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cap set at a build's start is remembered for its connection: each later step at
    the full cap runs no statement (it ran one a step to read the cap back)."""
    monkeypatch.setattr(memory, "resident_bytes", lambda: 100 * MIB)  # a small process
    log = StatementLog(duckdb.connect())
    connection: Any = log
    assert memory.fit_memory_limit(connection, measure=True) == memory.BUILD_MEMORY_LIMIT
    log.statements.clear()
    for _ in range(3):
        assert memory.fit_memory_limit(connection) == memory.BUILD_MEMORY_LIMIT
    assert log.statements == []
    # another connection has a cap of its own: measured at its first step
    other = StatementLog(duckdb.connect())
    other_connection: Any = other
    assert memory.fit_memory_limit(other_connection) == memory.BUILD_MEMORY_LIMIT
    assert other.statements


def test_a_full_build_of_a_new_warehouse_runs_no_statement_a_model_besides_its_own() -> None:
    """A full build of a new warehouse: the marts it replaces are looked up in one catalog
    query (there are none, so nothing is dropped), a table's rows are DuckDB's answer to
    the statement that made it (not counted again), and the id tables are made once before
    the ids are forgotten and once after. Each step's rows are still the table's."""
    fleet = _fleet()
    log = StatementLog(fleet.con)
    connection: Any = log
    clock = StepClock.start()
    assert build_models(connection, fleet.config, clock=clock).mode == "full"
    models = discover_models()
    marts = [name for name, model in models.items() if model.layer == "marts"]
    statements = log.statements
    # the raw tables' catalog, the marts' kinds (was a query a mart), the marts' comments
    assert len([sql for sql in statements if "duckdb_views()" in sql]) == 3
    assert not [sql for sql in statements if sql.startswith("drop") and sql.split()[-1] in marts]
    counted = {f"select count(*) from {name}" for name in models}
    assert not [sql for sql in statements if sql in counted]
    assert not [sql for sql in statements if "getvariable('gpufleet_build_memory_limit')" in sql]
    assert len([sql for sql in statements if "table if not exists build_state.series" in sql]) == 2
    steps = {step.name: step.rows for step in clock.steps if step.is_model}
    for name in marts:
        if models[name].materialized == "table":
            (rows,) = fleet.con.execute(f"select count(*) from {name}").fetchone() or (None,)
            assert steps[name] == rows, name
        else:
            assert steps[name] is None, name
    assert steps["int_series_ids"] == 2
    assert steps["stg_samples"] is None  # a view


def test_an_incremental_build_counts_no_temp_table_it_made() -> None:
    """An incremental build's temp tables (the intermediates on the new samples' slice) have
    the rows of the statement that made them; only the marts it changed in place are
    counted after their step."""
    fleet = _fleet()
    assert fleet.build().mode == "full"
    fleet.series(T0 + dt.timedelta(hours=1), 30, gpu_uuid="GPU-A", host="node1")
    log = StatementLog(fleet.con)
    connection: Any = log
    clock = StepClock.start()
    assert build_models(connection, fleet.config, clock=clock).mode == "incremental"
    models = discover_models()
    temp_tables = {name for name, model in models.items() if model.materialized == "temp_table"}
    counted = [sql.split()[-1] for sql in log.statements if sql.startswith("select count(*) from")]
    assert not set(counted) & temp_tables
    assert {name for name in counted if name in models} <= {
        name for name, model in models.items() if model.materialized == "table"
    }
    steps = {step.name: step.rows for step in clock.steps if step.is_model}
    assert steps["int_series_ids"] == 1  # the GPU of the new samples
    assert all(steps[name] is not None for name in temp_tables if name in steps)


def _materialized(path: Path, kind: str) -> None:
    """The model at `path` made a `kind` ('table' or 'view') from now on."""
    sql = path.read_text(encoding="utf-8")
    path.write_text(f"-- materialized: {kind}\n{sql}", encoding="utf-8")


def test_a_full_build_replaces_a_mart_that_changed_kind(tmp_path: Path) -> None:
    """A mart that was a table and is a view now (and one the other way round) is dropped
    as what the warehouse holds, and made anew as the SQL says, documented."""
    sql_dir = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql_dir)
    fleet = _fleet()
    assert build_models(fleet.con, fleet.config, sql_dir=sql_dir).mode == "full"
    kinds = "select table_type from information_schema.tables where table_name = ?"
    assert fleet.con.execute(kinds, ["team_weekly"]).fetchall() == [("BASE TABLE",)]
    assert fleet.con.execute(kinds, ["gpus_to_drain"]).fetchall() == [("VIEW",)]
    _materialized(sql_dir / "marts" / "team_weekly.sql", "view")
    _materialized(sql_dir / "marts" / "gpus_to_drain.sql", "table")
    result = build_models(fleet.con, fleet.config, sql_dir=sql_dir)
    assert result.mode == "full"
    assert fleet.con.execute(kinds, ["team_weekly"]).fetchall() == [("VIEW",)]
    assert fleet.con.execute(kinds, ["gpus_to_drain"]).fetchall() == [("BASE TABLE",)]
    undocumented = fleet.con.execute(
        """
        select table_name, column_name from duckdb_columns()
        where table_name in ('team_weekly', 'gpus_to_drain') and comment is null
        """
    ).fetchall()
    assert undocumented == []
    assert result.mart_rows["gpus_to_drain"] == 0
