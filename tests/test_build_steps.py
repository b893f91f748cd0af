"""Where a build's time goes: every build records each step's wall time, CPU time and rows
in `build_state.build_steps` (gpufleet/warehouse/build/steps.py), and `gpufleet build
--verbose` prints them."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from gpufleet.cli import main
from gpufleet.warehouse.build import build
from gpufleet.warehouse.build import steps as steps_module
from gpufleet.warehouse.build.incremental.run import incremental_order
from gpufleet.warehouse.build.models import build_order, discover_models
from gpufleet.warehouse.publish import connect_read_only, write_transaction
from tests.test_models_fixtures import Fleet, built_once

pytestmark = pytest.mark.fleet

START = dt.datetime(2026, 11, 16, 8, 0, tzinfo=dt.UTC)
OWNER = [{"pid": 1, "user": "alice", "used_memory_bytes": 1 << 30}]


def _hours(fleet: Fleet, first_hour: int, hours: int) -> None:
    """Two GPUs' samples, a minute apart, for `hours` hours from START + `first_hour`."""
    for gpu in ("GPU-A", "GPU-B"):
        fleet.series(
            START + dt.timedelta(hours=first_hour),
            60 * hours,
            step_s=60.0,
            gpu_uuid=gpu,
            gpu_index=gpu == "GPU-B",
            gpu_util_pct=3.0,
            processes=OWNER,
        )


def _steps(con: duckdb.DuckDBPyConnection) -> list[tuple[int, str, bool, float, float, int]]:
    """The newest build's steps: (step_no, step, is_model, seconds, cpu_s, rows)."""
    return con.execute(
        """
        select step_no, step, is_model, seconds, cpu_s, "rows"
        from build_state.build_steps
        where build_id = (select max(build_id) from build_state.builds)
        order by step_no
        """
    ).fetchall()


def _build_row(con: duckdb.DuckDBPyConnection) -> tuple[str, float, float]:
    row = con.execute(
        "select mode, seconds, cpu_s from build_state.builds order by build_id desc limit 1"
    ).fetchone()
    assert row is not None
    return row


def test_full_and_incremental_builds_record_every_model_in_order() -> None:
    fleet = Fleet()
    fleet.user("alice", "ml")
    _hours(fleet, 0, 2)
    models = discover_models()
    order = build_order(models)

    result = fleet.build()
    assert result.mode == "full"
    steps = _steps(fleet.con)
    assert [name for _, name, is_model, *_ in steps if is_model] == order
    assert {"prepare", "decide", "data_tests", "expire_samples", "checkpoint"} <= {
        name for _, name, is_model, *_ in steps if not is_model
    }
    assert [number for number, *_ in steps] == list(range(1, len(steps) + 1))
    mode, seconds, _ = _build_row(fleet.con)
    assert mode == "full"
    assert all(step[3] >= 0 and step[4] >= 0 for step in steps)
    assert sum(step[3] for step in steps) <= seconds
    assert [step.name for step in result.steps] == [name for _, name, *_ in steps]
    # a model's rows: its table's (a view has none)
    rows = {name: count for _, name, is_model, _, _, count in steps if is_model}
    assert rows["samples_attributed_rows"] == 2 * 120
    assert rows["stg_samples"] is None  # a view
    assert rows["gpu_daily"] == fleet.one("select count(*) as n from gpu_daily")["n"]

    _hours(fleet, 2, 1)
    assert fleet.build().mode == "incremental"
    steps = _steps(fleet.con)
    built = [
        name for name in incremental_order(models, order) if models[name].materialized != "view"
    ]
    assert [name for _, name, is_model, *_ in steps if is_model] == built
    assert "select_new_samples" in [name for _, name, *_ in steps]
    mode, seconds, _ = _build_row(fleet.con)
    assert mode == "incremental"
    assert all(step[3] >= 0 and step[4] >= 0 for step in steps)
    assert sum(step[3] for step in steps) <= seconds
    counted = fleet.one("select count(*) as n from samples_attributed_rows")["n"]
    assert dict((s[1], s[5]) for s in steps)["samples_attributed_rows"] == counted == 2 * 180

    assert fleet.build().mode == "up to date"  # recorded too: eviction and expiry ran
    assert _build_row(fleet.con)[0] == "up to date"


def _an_hour_built() -> Fleet:
    """alice's hour of two GPUs, built in full: a copy of one built once per test process
    (tests/test_models_fixtures.py's built_once)."""

    def make() -> Fleet:
        fleet = Fleet()
        fleet.user("alice", "ml")
        _hours(fleet, 0, 1)
        assert fleet.build().mode == "full"
        return fleet

    return built_once("test_build_steps._an_hour_built", make)


def test_a_builds_steps_are_recorded_in_one_statement() -> None:
    """Every step's row as the step was, nulls and all, in the order they ran; in one
    statement, not one a step (executemany took 0.5 ms a step, a tenth of a small build's
    CPU): 2,000 steps then took about a second, a few milliseconds now."""
    fleet = _an_hour_built()
    clock = steps_module.StepClock.start()
    for number in range(2000):
        clock.add(
            steps_module.Step(
                name=f"step {number}",
                is_model=number % 2 == 0,
                seconds=number / 8,
                cpu_s=number / 16,
                rows=None if number % 3 else number,
            )
        )
    started = time.process_time()
    steps_module.record_steps(fleet.con, clock, mode="full", reason="many steps")
    took = time.process_time() - started
    assert _steps(fleet.con) == [
        (n + 1, f"step {n}", n % 2 == 0, n / 8, n / 16, None if n % 3 else n) for n in range(2000)
    ]
    assert took < 0.25, f"{took:.2f} CPU s to record 2,000 steps"
    empty = steps_module.StepClock.start()  # a build of no steps is recorded too
    steps_module.record_steps(fleet.con, empty, mode="up to date", reason="")
    assert _build_row(fleet.con)[0] == "up to date" and _steps(fleet.con) == []


def test_the_newest_builds_of_each_mode_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps_module, "BUILDS_KEPT", 1)
    fleet = _an_hour_built()  # a full build
    for hour in (1, 2):
        # each build goes into a publish of its own
        fleet.con.execute("update build_state.generation set value = value + 1")
        _hours(fleet, hour, 1)
        assert fleet.build().mode == "incremental"
    modes = fleet.con.execute(
        "select mode, count(*) from build_state.builds group by all order by all"
    ).fetchall()
    assert modes == [("full", 1), ("incremental", 1)]
    orphans = fleet.con.execute(
        "select count(*) from build_state.build_steps"
        " where build_id not in (select build_id from build_state.builds)"
    ).fetchone()
    assert orphans == (0,)


def test_a_published_build_has_its_steps_and_verbose_prints_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the warehouse slots: the table is published with the build; the result (and
    `--verbose`) adds the publish, which ends after the table is written, and the open."""
    fleet = Fleet()
    config = replace(fleet.config, data_dir=tmp_path)
    # samples in the published warehouse (the fleet's rows written on its connection), then
    # built by the CLI with --verbose
    with write_transaction(config) as con:
        fleet.con.close()
        fleet.con = con
        fleet.user("alice", "ml")
        _hours(fleet, 0, 1)
    assert main(["--data-dir", str(tmp_path), "build", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "full build (first build)" in out
    lines = out.splitlines()
    steps_at = next(i for i, line in enumerate(lines) if line.startswith("steps ("))
    shown = [line.split()[0] for line in lines[steps_at + 1 :]]
    assert shown[0] == "open_warehouse" and shown[-1] == "publish"
    assert "samples_attributed_rows" in shown and "data_tests" in shown
    with connect_read_only(config) as con:
        recorded = [row[1] for row in _steps(con)]
        mode, _, _ = _build_row(con)
    assert recorded == shown[:-1]  # the publish is not in the table: it came after
    assert mode == "full"

    result = build(config)
    assert result.mode == "up to date"
    assert sum(step.seconds for step in result.steps) <= result.seconds
