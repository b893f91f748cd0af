"""docs/reference.md#day-and-week and #measures: local days and ISO weeks, daily and weekly
measures, docs."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path

import duckdb
import pytest

from gpufleet.warehouse.build import BuildResult
from gpufleet.warehouse.build.models import (
    Model,
    apply_all_docs,
    apply_docs,
    build_order,
    count_mart_rows,
    discover_models,
)
from tests.scans import ScanCounter
from tests.test_models_fixtures import Fleet, built_once

pytestmark = pytest.mark.fleet

UTC = dt.UTC


def sample_every_minute(fleet: Fleet, first: dt.datetime, last: dt.datetime) -> None:
    """One 60 s sample of GPU-A per minute from `first` to `last` (UTC, inclusive)."""
    fleet.con.execute(
        """
        insert into samples_stored (ts, interval_s, host, gpu_index, gpu_uuid, gpu_name, status,
                                    gpu_util_pct, load_id)
        select ts, 60, 'node1', 0, 'GPU-A', 'NVIDIA H100 80GB HBM3', 'ok', 50, 1
        from generate_series(?::timestamptz, ?::timestamptz, interval 1 minute) as t(ts)
        """,
        [first, last],
    )


def _dst_fleet() -> Fleet:
    """Europe/Berlin's days, the whole of March 27 .. 30 and October 24 .. 26 (UTC) sampled
    minute by minute, built (once per process: each day's test reads the same fleet)."""
    fleet = Fleet(timezone="Europe/Berlin")
    sample_every_minute(
        fleet, dt.datetime(2026, 3, 27, tzinfo=UTC), dt.datetime(2026, 3, 31, tzinfo=UTC)
    )
    sample_every_minute(
        fleet, dt.datetime(2026, 10, 23, tzinfo=UTC), dt.datetime(2026, 10, 27, tzinfo=UTC)
    )
    fleet.build()
    return fleet


@pytest.mark.parametrize(
    ("day", "hours"),
    [(dt.date(2026, 3, 29), 23.0), (dt.date(2026, 10, 25), 25.0), (dt.date(2026, 3, 28), 24.0)],
)
def test_dst_days_have_23_and_25_hours_in_europe_berlin(day: dt.date, hours: float) -> None:
    fleet = built_once("test_models_days._dst_fleet", _dst_fleet)
    # 2026-03-29 local = [03-28 23:00Z, 03-29 22:00Z): 23 h of 60 s samples = 1380 samples;
    # 2026-10-25 local = [10-24 22:00Z, 10-25 23:00Z): 25 h = 1500 samples.
    row = fleet.one("select hours_observed, samples from gpu_daily where day = ?", [day])
    assert row["hours_observed"] == pytest.approx(hours)
    assert row["samples"] == hours * 60
    team = fleet.one("select gpu_hours from team_daily where day = ?", [day])
    assert team["gpu_hours"] == pytest.approx(hours)


def test_local_day_of_a_sample_at_local_midnight_is_the_new_day() -> None:
    fleet = Fleet(timezone="Europe/Berlin")
    # 2026-11-16 23:00Z is 2026-11-17 00:00 in Berlin (UTC+1); 22:59:50Z is still the 16th.
    fleet.sample(dt.datetime(2026, 11, 16, 22, 59, 50, tzinfo=UTC))
    fleet.sample(dt.datetime(2026, 11, 16, 23, 0, 0, tzinfo=UTC))
    fleet.build()
    days = fleet.rows("select day from samples_attributed order by ts")
    assert [r["day"] for r in days] == [dt.date(2026, 11, 16), dt.date(2026, 11, 17)]


def test_iso_week_uses_the_iso_year() -> None:
    fleet = Fleet()
    fleet.sample(dt.datetime(2027, 1, 1, 12, tzinfo=UTC))  # a Friday in ISO week 2026-W53
    fleet.sample(dt.datetime(2027, 1, 4, 12, tzinfo=UTC))  # Monday of 2027-W01
    fleet.build()
    weeks = fleet.rows("select day, iso_week, week_start from samples_attributed order by ts")
    assert weeks == [
        {"day": dt.date(2027, 1, 1), "iso_week": "2026-W53", "week_start": dt.date(2026, 12, 28)},
        {"day": dt.date(2027, 1, 4), "iso_week": "2027-W01", "week_start": dt.date(2027, 1, 4)},
    ]


def test_idle_episode_across_midnight_is_one_row_with_waste_split_by_day() -> None:
    fleet = Fleet(min_minutes=30)
    fleet.host_rule(1, "*", "infra")
    fleet.price_rule(1, "*", 3.6)
    # 180 idle samples of 10 s from 23:50:10 to 00:20:00: one 30-minute waste episode.
    fleet.series(dt.datetime(2026, 11, 16, 23, 50, 10, tzinfo=UTC), 180, gpu_util_pct=0.0)
    fleet.build()
    episode = fleet.one("select start_ts, end_ts, idle_seconds, is_waste from idle_episodes")
    assert episode == {
        "start_ts": dt.datetime(2026, 11, 16, 23, 50, tzinfo=UTC),
        "end_ts": dt.datetime(2026, 11, 17, 0, 20, tzinfo=UTC),
        "idle_seconds": 1800.0,
        "is_waste": True,
    }
    days = fleet.rows("select day, waste_gpu_hours, waste_usd from team_daily order by day")
    # Nov 16: ts 23:50:10 .. 23:59:50 = 59 samples = 590 s; Nov 17: 00:00:00 .. 00:20:00 =
    # 121 samples = 1210 s (a sample at midnight belongs to the new day).
    assert [r["day"] for r in days] == [dt.date(2026, 11, 16), dt.date(2026, 11, 17)]
    assert [r["waste_gpu_hours"] for r in days] == pytest.approx([590 / 3600, 1210 / 3600])
    assert [r["waste_usd"] for r in days] == pytest.approx([0.59, 1.21])  # hours * 3.6


def test_team_weekly_is_the_sum_of_team_daily() -> None:
    fleet = Fleet(min_minutes=1)
    fleet.host_rule(1, "node1", "infra")
    fleet.price_rule(1, "*", 2.0)
    fleet.user("alice", "ml")
    # Sunday 2026-11-22 and Monday 2026-11-23 (another ISO week), two GPUs, mixed usage.
    for day in (21, 22, 23):
        start = dt.datetime(2026, 11, day, 12, tzinfo=UTC)
        fleet.series(start, 12, gpu_uuid="GPU-A", gpu_util_pct=0.0, energy_mj=None, power_w=100)
        fleet.series(
            start,
            6,
            gpu_uuid="GPU-B",
            host="node2",
            gpu_util_pct=40.0,
            processes=[{"pid": 1, "user": "alice", "used_mem_bytes": 1, "job_id": None}],
        )
    fleet.build()
    measures = (
        "gpu_hours",
        "busy_gpu_hours",
        "idle_gpu_hours",
        "waste_gpu_hours",
        "waste_usd",
        "energy_kwh",
        "measured_gpu_hours",
    )
    weekly = fleet.rows("select * from team_weekly order by iso_week, team")
    assert [(w["iso_week"], w["week_start"], w["team"]) for w in weekly] == [
        ("2026-W47", dt.date(2026, 11, 16), "infra"),
        ("2026-W47", dt.date(2026, 11, 16), "ml"),
        ("2026-W48", dt.date(2026, 11, 23), "infra"),
        ("2026-W48", dt.date(2026, 11, 23), "ml"),
    ]
    for week in weekly:
        daily = fleet.rows(
            "select * from team_daily where team = ? and day between ? and ?",
            [week["team"], week["week_start"], week["week_start"] + dt.timedelta(days=6)],
        )
        for measure in measures:
            total = sum(d[measure] or 0.0 for d in daily)
            assert (week[measure] or 0.0) == pytest.approx(total), (week["iso_week"], measure)
    infra_w47 = weekly[0]
    # GPU-A on Nov 21 and 22: 2 days * 12 samples * 10 s = 240 s; 100 W * 240 s = 24 kJ
    assert infra_w47["gpu_hours"] == pytest.approx(240 / 3600)
    assert infra_w47["waste_gpu_hours"] == pytest.approx(240 / 3600)  # 120 s >= 60 s each day
    assert infra_w47["energy_kwh"] == pytest.approx(24_000 / 3.6e6)
    assert infra_w47["gpus"] == 1
    ml_w47 = weekly[1]
    assert ml_w47["avg_util_pct"] == pytest.approx(40.0)
    assert ml_w47["busy_gpu_hours"] == pytest.approx(0.4 * 120 / 3600)  # 2 days * 60 s * 40 %


def test_host_daily() -> None:
    fleet = Fleet()
    start = dt.datetime(2026, 11, 16, 8, tzinfo=UTC)
    fleet.series(start, 3, gpu_uuid="GPU-A", gpu_index=0)
    fleet.series(start, 2, gpu_uuid="GPU-B", gpu_index=1)
    fleet.build()
    assert fleet.one("select * from host_daily") == {
        "day": dt.date(2026, 11, 16),
        "cluster": None,
        "host": "node1",
        "gpus": 2,
        "samples": 5,
        "hours_observed": pytest.approx(50 / 3600),
        "first_ts": start,
        "last_ts": start + dt.timedelta(seconds=20),
    }


@functools.cache
def _empty() -> tuple[Fleet, BuildResult]:
    """A fleet without samples, built: once per process, for the tests that only read it."""
    fleet = Fleet()
    return fleet, fleet.build()


def test_every_contract_table_and_every_column_has_a_comment() -> None:
    fleet, result = _empty()
    documented_raw = {"samples", "quarantined_files"}  # written by ingest, queried by users
    marts = {
        "samples_attributed",  # a view of samples_attributed_rows
        "samples_attributed_rows",  # stored with ids instead of names
        "team_daily",
        "team_weekly",
        "idle_episodes",
        "thermal_events",
        "gpu_daily",
        "host_daily",
        "gpu_team_daily",  # the daily marts' building block
        "run_pieces",  # the episodes' and events' building block
        "gpu_hourly",  # the report's heatmaps
        "job_efficiency",  # a view of gpu_hourly, run_pieces and idle_episodes per job
        "alloc_only_daily",  # allocated hours on hosts without samples
        "gpu_health_daily",  # a view of gpu_hourly's health per GPU and day
        "gpus_to_drain",  # a view of gpu_health_daily's latest days
    }
    assert set(result.mart_rows) == marts
    # the view is counted as the table it names (warehouse/models.count_mart_rows): the same rows
    for name, rows in result.mart_rows.items():
        assert fleet.rows(f"select count(*) as n from {name}")[0]["n"] == rows, name
    tables = fleet.rows(
        "select table_name, comment from duckdb_tables() where schema_name = 'main' "
        "union all select view_name, comment from duckdb_views() where schema_name = 'main'"
    )
    commented = {t["table_name"] for t in tables if t["comment"]}
    assert marts | documented_raw <= commented
    columns = fleet.rows(
        "select table_name, column_name, comment from duckdb_columns() "
        "where schema_name = 'main' and table_name in (select unnest(?::varchar[]))",
        [sorted(marts | documented_raw)],
    )
    assert columns
    assert [c for c in columns if not c["comment"]] == []


def test_docs_applied_again_write_only_the_comments_that_changed(tmp_path: Path) -> None:
    """A COMMENT ON that the warehouse already holds is not written again (on disk, each
    one was a commit of its own: a quarter of a small build); one that changed is."""
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("create table t as select 1 as a, 2 as b")
    con.execute("create view v as select a from t")
    docs = {"description": "T.", "columns": {"a": "A.", "b": "B."}}
    apply_docs(con, "t", docs, tmp_path / "_docs.toml")
    apply_docs(con, "v", {"description": "V.", "columns": {"a": "A."}}, tmp_path / "_docs.toml")
    con.execute("checkpoint")
    wal = tmp_path / "w.duckdb.wal"
    apply_docs(con, "t", docs, tmp_path / "_docs.toml")
    apply_docs(con, "v", {"description": "V.", "columns": {"a": "A."}}, tmp_path / "_docs.toml")
    assert not wal.exists() or wal.stat().st_size == 0  # nothing written
    apply_docs(con, "t", {**docs, "columns": {"a": "A.", "b": "Now B."}}, tmp_path / "_docs.toml")
    comments = con.execute(
        "select table_name, column_name, comment from duckdb_columns() "
        "where database_name = current_database() order by all"
    ).fetchall()
    assert comments == [("t", "a", "A."), ("t", "b", "Now B."), ("v", "a", "A.")]
    tables = con.execute(
        "select table_name, comment from duckdb_tables() where not internal "
        "union all select view_name, comment from duckdb_views() where not internal"
    ).fetchall()
    assert sorted(tables) == [("t", "T."), ("v", "V.")]
    with pytest.raises(ValueError, match=r"\[t.columns\] lacks b"):
        apply_docs(con, "t", {"description": "T.", "columns": {"a": "A."}}, Path("_docs.toml"))


def test_the_docs_of_many_tables_read_the_warehouse_comments_with_two_queries(
    tmp_path: Path,
) -> None:
    """A full build comments every mart: two catalog queries for them all (their kinds,
    then their columns), then only the COMMENT ONs, not two queries more per table."""
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    docs: dict[str, dict[str, object]] = {}
    for n in range(5):
        con.execute(f"create table t{n} as select 1 as a, 2 as b")
        docs[f"t{n}"] = {"description": f"T{n}.", "columns": {"a": "A.", "b": f"B{n}."}}
    con.execute("create view v as select a from t0")
    docs["v"] = {"description": "V.", "columns": {"a": "A."}}
    counter = ScanCounter(con, tmp_path / "profile.json")
    apply_all_docs(counter, docs, tmp_path / "_docs.toml")  # type: ignore[arg-type]
    assert len(counter.statements) == 3  # the comments in one call
    assert counter.statements[2].count("comment on ") == 5 * 3 + 2
    counter.statements.clear()
    apply_all_docs(counter, docs, tmp_path / "_docs.toml")  # type: ignore[arg-type]
    assert len(counter.statements) == 2  # nothing to write
    comments = con.execute(
        "select table_name, column_name, comment from duckdb_columns() "
        "where database_name = current_database() and table_name in ('t4', 'v') order by all"
    ).fetchall()
    assert comments == [("t4", "a", "A."), ("t4", "b", "B4."), ("v", "a", "A.")]
    assert con.execute("select comment from duckdb_views() where view_name = 'v'").fetchall() == [
        ("V.",)
    ]


def test_the_marts_rows_are_counted_in_one_statement(tmp_path: Path) -> None:
    """A view over one table counts as that table; one over several only with `views`."""
    con = duckdb.connect()
    con.execute("create table a as select * from range(3); create table b as from range(5)")
    con.execute("create view one as from a; create view both_ as from a, b")

    def model(name: str, materialized: str, *depends_on: str) -> Model:
        return Model(
            name=name,
            layer="marts",
            path=tmp_path / f"{name}.sql",
            sql="",
            materialized=materialized,
            reads=frozenset(depends_on),
            depends_on=frozenset(depends_on),
        )

    models = {
        "a": model("a", "table"),
        "b": model("b", "table"),
        "one": model("one", "view", "a"),
        "both_": model("both_", "view", "a", "b"),
    }
    counter = ScanCounter(con, tmp_path / "profile.json")
    counts = count_mart_rows(counter, models, list(models))  # type: ignore[arg-type]
    assert counts == {"a": 3, "b": 5, "one": 3, "both_": 15}
    assert len(counter.statements) == 1
    assert count_mart_rows(con, models, list(models), views=False) == {"a": 3, "b": 5, "one": 3}


def test_empty_warehouse_builds_empty_marts_and_keeps_no_intermediate_tables() -> None:
    fleet, result = _empty()
    assert all(rows == 0 for rows in result.mart_rows.values())
    assert "full build" in str(result) and "team_daily" in str(result)
    leftovers = fleet.rows(
        "select table_name from duckdb_tables() where table_name like 'int_%' or "
        "table_name like 'stg_%' union all select view_name from duckdb_views() "
        "where view_name like 'int_%' or view_name like 'stg_%'"
    )
    assert leftovers == []


def test_contract_columns_of_every_mart() -> None:
    fleet, _ = _empty()
    contract = {
        "samples_attributed": "gpu_uuid, ts, host, gpu_index, gpu_name, interval_s, "
        "gpu_util_pct, team, user, job_id, attributed_by, is_idle, energy_j, day, iso_week",
        "team_daily": "day, team, gpu_hours, busy_gpu_hours, avg_util_pct, idle_gpu_hours, "
        "waste_gpu_hours, waste_usd, energy_kwh, gpus",
        "team_weekly": "iso_week, week_start, team, gpu_hours, busy_gpu_hours, avg_util_pct, "
        "idle_gpu_hours, waste_gpu_hours, waste_usd, energy_kwh, gpus",
        "idle_episodes": "gpu_uuid, host, gpu_index, gpu_name, team, user, job_id, "
        "attributed_by, start_ts, end_ts, idle_seconds, samples, is_waste, held_memory, "
        "waste_usd",
        "thermal_events": "gpu_uuid, host, gpu_index, team, start_ts, end_ts, duration_s, "
        "samples, max_temp_gpu_c, min_sm_clock_mhz, reasons_mask, is_hw",
        "gpu_daily": "day, gpu_uuid, host, gpu_name, hours_observed, avg_util_pct, idle_hours, "
        "thermal_seconds, energy_kwh",
        "host_daily": "day, host, gpus, samples, hours_observed, first_ts, last_ts",
        "job_efficiency": "job_id, cluster, user, team, account, partition, state, start_ts, "
        "end_ts, gpus, alloc_gpu_hours, gpu_hours, busy_gpu_hours, avg_util_pct, "
        "idle_gpu_hours, waste_gpu_hours, waste_usd, max_mem_used_bytes, mem_total_bytes, "
        "energy_kwh",
    }
    for table, wanted in contract.items():
        described = {r["column_name"]: r["column_type"] for r in fleet.rows(f"describe {table}")}
        assert set(wanted.split(", ")) <= described.keys(), table
        for column, kind in described.items():
            if column.endswith("_ts") or column == "ts":
                assert kind == "TIMESTAMP WITH TIME ZONE", (table, column)
            if column in ("day", "week_start"):
                assert kind == "DATE", (table, column)


def test_models_run_after_the_models_they_read() -> None:
    models = discover_models()
    order = build_order(models)
    assert set(order) == set(models)
    for position, name in enumerate(order):
        assert models[name].depends_on <= set(order[:position]), name
    layers = [models[name].layer for name in order]
    assert layers.index("intermediate") > max(
        i for i, layer in enumerate(layers) if layer == "staging"
    )
    # the series window runs once, materialized by samples_attributed_rows; runs build on
    # that, and samples_attributed is a view of it
    assert "int_samples_sequenced" in models["samples_attributed_rows"].depends_on
    assert "samples_attributed_rows" in models["int_run_pieces"].depends_on
    assert models["run_pieces"].depends_on == {"int_run_pieces"}
    assert models["samples_attributed"].depends_on == {"samples_attributed_rows"}
    assert "int_run_pieces" in models["int_idle_episode_days"].depends_on
    assert "int_run_pieces" in models["int_thermal_events"].depends_on


def test_days_do_not_depend_on_the_session_time_zone() -> None:
    fleet = Fleet(timezone="Asia/Kolkata")
    fleet.con.execute("set TimeZone = 'America/New_York'")
    # 18:29:50Z is 23:59:50 in Kolkata (UTC+5:30); 18:30:00Z is midnight of the next day.
    fleet.sample(dt.datetime(2026, 11, 16, 18, 29, 50, tzinfo=UTC))
    fleet.sample(dt.datetime(2026, 11, 16, 18, 30, 0, tzinfo=UTC))
    fleet.build()
    days = fleet.rows("select day from samples_attributed order by ts")
    assert [r["day"] for r in days] == [dt.date(2026, 11, 16), dt.date(2026, 11, 17)]


def test_a_stray_far_future_timestamp_stays_cheap_and_attributed() -> None:
    fleet = Fleet()
    start = dt.datetime(2026, 11, 16, 8, tzinfo=UTC)
    fleet.allocation(job_id="j", user="alice", team="ml", start_ts=start, end_ts=None)
    fleet.sample(start + dt.timedelta(seconds=10))
    fleet.sample(dt.datetime(2090, 1, 1, tzinfo=UTC))  # a collector clock gone wrong
    result = fleet.build()
    # Buckets and allocation hours are listed only where samples are, not for 64 years.
    assert result.seconds < 30
    rows = fleet.rows("select day, attributed_by, team from samples_attributed order by ts")
    assert rows == [
        {"day": dt.date(2026, 11, 16), "attributed_by": "allocation", "team": "ml"},
        {"day": dt.date(2090, 1, 1), "attributed_by": "allocation", "team": "ml"},
    ]


def test_hours_are_local_hours_in_samples_and_gpu_hourly() -> None:
    fleet = Fleet(timezone="Asia/Kolkata")
    # 18:29:50Z is 23:59:50 in Kolkata (UTC+5:30); 18:30:00Z is 00:00 of the next day;
    # 09:00:00Z is 14:30, in the local hour 14.
    for ts in ("2026-11-16 18:29:50", "2026-11-16 18:30:00", "2026-11-16 09:00:00"):
        fleet.sample(dt.datetime.fromisoformat(ts).replace(tzinfo=UTC))
    fleet.build()
    hours = fleet.rows("select day, hour from samples_attributed order by ts")
    assert [(r["day"], r["hour"]) for r in hours] == [
        (dt.date(2026, 11, 16), 14),
        (dt.date(2026, 11, 16), 23),
        (dt.date(2026, 11, 17), 0),
    ]
    hourly = fleet.rows("select day, hour, samples, observed_s from gpu_hourly order by all")
    assert [(r["day"], r["hour"], r["samples"], r["observed_s"]) for r in hourly] == [
        (dt.date(2026, 11, 16), 14, 1, 10.0),
        (dt.date(2026, 11, 16), 23, 1, 10.0),
        (dt.date(2026, 11, 17), 0, 1, 10.0),
    ]
