"""`gpufleet simulate --mig`, activity and health, through the warehouse: a small fleet's MIG
devices' GPU-hours add up to their GPU's, activity is measured on the H100s only, and the
failing GPUs are listed to drain."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from gpufleet.config import Config, load_config
from gpufleet.simulate.fleet import SimulationSpec, scenario_for, simulate_fleet
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish.read_only import connect_read_only

START = dt.datetime(2026, 11, 16, tzinfo=dt.UTC)
SPEC = SimulationSpec(
    gpus=16, start=START, end=START + dt.timedelta(days=1), interval_s=60.0, seed=11, mig=True
)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    data_dir = tmp_path_factory.mktemp("mig") / "data"
    simulate_fleet(SPEC, data_dir=data_dir)
    path = data_dir / "gpufleet.toml"
    path.write_text(f'data_dir = "{data_dir}"\n')
    config: Config = load_config(config_path=path)
    ingest(config, compact=False, today=dt.date(2026, 11, 24))
    build(config)
    return connect_read_only(config)


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> tuple:
    row = con.execute(sql).fetchone()
    assert row is not None
    return row


def test_mig_devices_gpu_hours_add_up_to_their_gpus(warehouse: duckdb.DuckDBPyConnection) -> None:
    scn = scenario_for(SPEC)
    assert scn.mig, "the small fleet has a MIG GPU"
    parents = {g.uuid for g in scn.gpus if g.ordinal in scn.mig}
    for parent in parents:
        ticks, devices = _one(
            warehouse,
            f"select count(*) filter (where gpu_uuid = '{parent}'), "
            f"count(distinct gpu_uuid) filter (where parent_gpu_uuid = '{parent}') "
            "from samples",
        )
        assert devices in (2, 7)
        hours = ticks * SPEC.interval_s / 3600
        mig_hours, own_hours = _one(
            warehouse,
            "select sum(hours_observed) filter (where gpu_uuid like 'MIG-%'), "
            f"sum(hours_observed) filter (where gpu_uuid = '{parent}') from gpu_daily "
            f"where gpu_uuid = '{parent}' or gpu_uuid in "
            f"(select distinct gpu_uuid from samples where parent_gpu_uuid = '{parent}')",
        )
        assert mig_hours == pytest.approx(hours, rel=1e-5)
        assert own_hours == pytest.approx(0.0, abs=1e-9)
    physical = _one(
        warehouse, "select count(*) * 60.0 / 3600 from samples where parent_gpu_uuid is null"
    )[0]
    assert _one(warehouse, "select sum(gpu_hours) from team_daily")[0] == pytest.approx(
        physical, rel=1e-5
    )


def test_each_busy_mig_device_is_its_own_jobs_by_an_allocation_naming_it(
    warehouse: duckdb.DuckDBPyConnection,
) -> None:
    """The simulated allocation rows name the MIG devices by UUID: each busy device's
    samples are its own job's, its user's team's, and its slice of its GPU's hours; the
    idle device no job's."""
    scn = scenario_for(SPEC)
    teams = dict(scn.users)
    expected = {
        device.uuid: (device.user, teams[device.user] if device.user else None)
        for devices in scn.mig.values()
        for device in devices
    }
    rows = warehouse.execute(
        """
        select gpu_uuid, any_value("user"), any_value(team), count(distinct job_id),
            bool_and(attributed_by = 'allocation'), bool_and(job_id like 'mig/%')
        from samples_attributed
        where gpu_uuid in (select distinct gpu_uuid from samples where parent_gpu_uuid is not null)
        group by gpu_uuid
        """
    ).fetchall()
    assert {uuid for uuid, *_ in rows} == set(expected)
    for uuid, user, team, jobs, by_allocation, named in rows:
        if expected[uuid][0] is None:
            assert (user, jobs, by_allocation) == (None, 0, False)
        else:
            assert (user, team, jobs, by_allocation, named) == (*expected[uuid], 1, True, True)
    jobs = warehouse.execute(
        "select count(*), count(distinct job_id), max(gpus) from job_efficiency"
        " where job_id like 'mig/%'"
    ).fetchone()
    busy = sum(1 for user, _ in expected.values() if user is not None)
    assert jobs == (busy, busy, 1)


def test_activity_is_measured_on_h100s_only(warehouse: duckdb.DuckDBPyConnection) -> None:
    rows = warehouse.execute(
        "select gpu_name, count(*) filter (where status = 'ok' and not mig_enabled), "
        "count(sm_active_pct) filter (where not mig_enabled) from samples group by gpu_name"
    ).fetchall()
    by_name = {name: (ok, measured) for name, ok, measured in rows}
    assert set(by_name) == {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"}
    h100_ok, h100_measured = by_name["NVIDIA H100 80GB HBM3"]
    assert h100_measured == h100_ok > 0
    assert by_name["NVIDIA A100-SXM4-80GB"][1] == 0
    sm, util = _one(
        warehouse,
        "select avg(sm_active_pct), avg(gpu_util_pct) from samples "
        "where sm_active_pct is not null and gpu_util_pct > 50",
    )
    assert 0 < sm < util
    assert (
        _one(
            warehouse,
            "select count(*) from samples where mig_profile is not null and sm_active_pct is null",
        )[0]
        == 0
    )


def test_the_failing_gpus_are_listed_to_drain(warehouse: duckdb.DuckDBPyConnection) -> None:
    events = scenario_for(SPEC).events
    drain = dict(warehouse.execute("select gpu_uuid, drain_reasons from gpus_to_drain").fetchall())
    assert drain == {
        events.ecc_gpu_uuid: ["ecc_uncorrected"],
        events.remap_gpu_uuid: ["remap_pending"],
        events.lost_gpu_uuid: ["xid_79"],  # fell off the bus on the span's one day
    }
    xid = warehouse.execute(
        "select gpu_uuid, xid_errors from gpu_health_daily where xid_count > 0"
    ).fetchall()
    assert xid == [(events.lost_gpu_uuid, [79])]


def test_the_demo_has_mig_gpus_and_gpus_to_drain_in_its_last_week(tmp_path: Path) -> None:
    from gpufleet.simulate.demo import demo_spec

    config = load_config(data_dir=tmp_path, environ={})
    spec = demo_spec(config, week="2026-W47", gpus=16, days=7, history_weeks=1)
    scn = scenario_for(spec)
    assert spec.mig and scn.mig
    last_week = spec.end_s - 7 * 86400
    assert scn.events.ecc_gpu_uuid and scn.events.remap_gpu_uuid
    assert min(scn.events.ecc_times_s) >= last_week and scn.events.remap_start_s >= last_week
