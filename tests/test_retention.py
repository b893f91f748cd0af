"""Retention (issue 42, item 4): `[retention] samples_days` deletes old samples and never
changes a mart, whatever builds follow; `reports_weeks` deletes old weekly reports
(docs/operations.md#retention).

The fleet is tests/test_close.py's: Asia/Kolkata, 2026-10-30 17:30 to 2026-11-01 17:30.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest

from gpufleet.close import close_month
from gpufleet.config import Config, RetentionConfig, load_config
from gpufleet.errors import GpufleetError
from gpufleet.status import read_status
from gpufleet.warehouse.base import deletes
from gpufleet.warehouse.build import build, build_models
from gpufleet.warehouse.build.kept import ensure_kept_tables
from gpufleet.warehouse.build.retention import after_publish, expire_reports, expire_samples
from gpufleet.warehouse.cycle import ingest_then_build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import connect_read_only, write_transaction
from tests.test_close import DAY_MARTS, RUN_MARTS, ZONE, arrive, check_weeks_add_up, fleet
from tests.test_incremental import _mart
from tests.test_sites import DAY, NEXT, _rows, _setup, _write

pytestmark = pytest.mark.fleet

# One day kept on 2026-11-02: samples of local days before 2026-11-01 go, that is those
# before the UTC date partition 2026-10-31 (2026-11-01 00:00 in Kolkata is 18:30 UTC the
# day before).
TODAY = dt.date(2026, 11, 2)
CUT = "timestamptz '2026-10-31 00:00:00+00'"
MARTS = (*DAY_MARTS, *RUN_MARTS, "team_weekly", "job_efficiency")


def _marts(con: duckdb.DuckDBPyConnection) -> dict[str, object]:
    return {mart: _mart(con, mart) for mart in MARTS}


def _retaining(config: Config, days: int = 1, weeks: int = 0) -> Config:
    return replace(config, retention=RetentionConfig(samples_days=days, reports_weeks=weeks))


@pytest.mark.parametrize("batch_rows", [None, 100])
def test_expired_samples_go_and_the_marts_stay_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch, batch_rows: int | None
) -> None:
    """With `batch_rows`, samples_attributed_rows loses its expired rows a few series at a
    time (base/deletes.py), as at fleet scale."""
    if batch_rows:
        monkeypatch.setattr(deletes, "BATCH_ROWS", batch_rows)
    built = fleet()
    before = _marts(built.con)
    attributed = built.con.execute(
        f"select count(*) filter (where ts >= {CUT}) from samples_attributed_rows"
    ).fetchone()
    expired = expire_samples(built.con, _retaining(built.config), today=TODAY)
    assert expired.retained_from == dt.date(2026, 11, 1)
    assert expired.samples > 0
    assert str(expired).startswith(f"retention: {expired.samples:,} samples and 0 raw")
    left = built.con.execute(f"select count(*) filter (where ts < {CUT}) from samples").fetchone()
    assert left == (0,)
    assert built.con.execute("select count(*) from samples_attributed_rows").fetchone() == (
        attributed
    )
    assert _marts(built.con) == before
    # a late file for an expired day: loaded, built, expired again; the marts as they were
    arrive(built.con, f"ts < {CUT} and gpu_uuid = 'GPU-2'")
    build_models(built.con, built.config)
    assert _mart(built.con, "(from team_daily where day < date '2026-11-01')") == _mart(
        built.con, "(from build_state.kept_team_daily where day < date '2026-11-01')"
    )
    expire_samples(built.con, _retaining(built.config), today=TODAY)
    assert _marts(built.con) == before


def test_a_full_build_after_expiry_keeps_the_old_days_and_equals_the_incremental_result() -> None:
    built = fleet()
    incremental = _marts(built.con)
    expire_samples(built.con, _retaining(built.config), today=TODAY)
    assert build_models(built.con, built.config, full=True).mode == "full"
    rebuilt = _marts(built.con)
    for mart in (*DAY_MARTS, "team_weekly"):
        assert rebuilt[mart] == incremental[mart], mart
    # a run under way where the retained samples begin is seen to start there: the others
    # are the runs they were
    for mart in RUN_MARTS:
        old = {row[:2]: row for row in incremental[mart]}  # type: ignore[attr-defined]
        new = {row[:2]: row for row in rebuilt[mart]}  # type: ignore[attr-defined]
        assert len(set(old) ^ set(new)) <= 2 * 6, mart  # at most one per GPU and side
    check_weeks_add_up(built.con)


def test_expiry_and_a_closed_month_share_the_kept_rows() -> None:
    built = fleet()
    close_month(built.con, built.config, "2026-10", today=TODAY)
    before = _marts(built.con)
    expire_samples(built.con, _retaining(built.config), today=TODAY)
    kept = built.con.execute(
        "select count(*) from build_state.kept_team_daily where day < date '2026-11-01'"
    ).fetchone()
    closed = built.con.execute(
        "select count(*) from team_daily where strftime(day, '%Y-%m') = '2026-10'"
    ).fetchone()
    assert kept == closed  # kept once, not twice
    build_models(built.con, built.config, full=True)
    for mart in (*DAY_MARTS, "team_weekly"):
        assert _mart(built.con, mart) == before[mart], mart


def test_a_site_east_of_the_timezone_keeps_the_samples_of_its_retained_days(
    tmp_path: Path,
) -> None:
    """The configured timezone New York's, siteA in Tokyo: Tokyo's local day NEXT starts at
    15:00 UTC of DAY, so the UTC partition of DAY holds samples of a retained day; the
    partition of the day before is the first to go."""
    config = _setup(
        tmp_path,
        timezone="America/New_York",
        sites=(("siteA", "Asia/Tokyo"), ("siteB", "America/New_York")),
    )
    for day in (DAY - dt.timedelta(days=1), DAY, NEXT):
        # from 16:00 UTC: 01:00 the next local day in Tokyo; 04:00 the same day in New York
        tokyo = _rows(day, "node01", "GPU-A0", "siteA", count=360)
        tokyo = [{**row, "ts": row["ts"] + dt.timedelta(hours=7)} for row in tokyo]
        _write(config, tokyo, "siteA", "a")
        _write(config, _rows(day, "node01", "GPU-B0", "siteB", count=360), "siteB", "a")
    after = NEXT + dt.timedelta(days=1)
    ingest(config, today=after)
    build(config)
    with connect_read_only(config) as con:
        before = _marts(con)
        days = con.execute("select distinct cluster, day from team_daily").fetchall()
    assert ("siteA", NEXT) in days
    with write_transaction(config) as con:
        # the local day NEXT is kept from: the days before it are the marts' alone
        expired = expire_samples(con, _retaining(config), today=after)
    assert expired.retained_from == NEXT
    assert expired.samples == 2 * 360  # the partition before DAY's alone
    after_publish(_retaining(config), today=after)
    assert build(config, full=True).mode == "full"
    with connect_read_only(config) as con:
        rebuilt = _marts(con)
    for mart in MARTS:
        assert rebuilt[mart] == before[mart], mart


def _file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def test_expired_raw_partitions_and_old_reports_are_deleted_once_published(
    tmp_path: Path,
) -> None:
    config = _retaining(replace(Config(), data_dir=tmp_path, timezone=ZONE), days=1, weeks=2)
    old = _file(config.samples_dir / "date=2026-10-30" / "host=a" / "compacted-1.parquet", 10)
    kept = _file(config.samples_dir / "date=2026-10-31" / "host=a" / "compacted-1.parquet", 10)
    with write_transaction(config) as con:
        ensure_kept_tables(con)
        con.execute("insert into build_state.retention values ('2026-11-01', '2026-10-31')")
    for week, size in (("2026-W42", 100), ("2026-W43", 50), ("2026-W44", 1), ("2026-W45", 1)):
        _file(config.reports_dir / week / "report.html", size)
    # Monday 2026-11-09 is in week 46: two weeks kept before it, 44 and 45
    lines = after_publish(config, today=dt.date(2026, 11, 9))
    assert lines == ("retention: 2 weekly reports (150 bytes) before 2026-W44 deleted",)
    assert not old.exists() and not old.parent.parent.exists() and kept.exists()
    assert sorted(p.name for p in config.reports_dir.iterdir()) == ["2026-W44", "2026-W45"]
    assert expire_reports(config, today=dt.date(2026, 11, 9)) == ()


def test_retention_is_configured_in_its_section(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.toml"
    path.write_text("[retention]\nsamples_days = 28\nreports_weeks = 12\n", encoding="utf-8")
    config = load_config(config_path=path, environ={})
    assert config.retention == RetentionConfig(samples_days=28, reports_weeks=12)
    path.write_text("[retention]\nsamples_days = -1\n", encoding="utf-8")
    with pytest.raises(GpufleetError, match=r"line 2: 'retention.samples_days' must be >= 0"):
        load_config(config_path=path, environ={})


def test_a_cycle_deletes_what_it_expired_and_the_next_loads_nothing_of_those_days(
    tmp_path: Path,
) -> None:
    """The scheduled cycle (ingest and build in one transaction) deletes the partitions its
    build expired once published; a file landing later in one is not loaded (loaded, the
    next build would delete it again: a day of 10,000 GPUs is 86 M samples)."""
    config = _setup(tmp_path, timezone="UTC")
    today = dt.datetime.now(dt.UTC).date()
    days = [today - dt.timedelta(days=back) for back in (5, 4, 3)]
    for day in days:
        _write(config, _rows(day, "node01", "GPU-A0", "siteA", count=30), "siteA", "a")
    ingest(config)
    build(config)
    retaining = _retaining(config, days=4)  # from today - 4: the first day's partition goes
    _write(retaining, _rows(days[2], "b-gpu2", "GPU-B2", None, count=5), None, "b")
    loaded, built = ingest_then_build(retaining)
    assert loaded.samples_loaded == 5 and built is not None
    assert sorted(p.name for p in retaining.samples_dir.iterdir()) == [
        f"date={day}" for day in days[1:]
    ]
    _write(retaining, _rows(days[0], "node01", "GPU-A0", "siteA", count=7), "siteA", "late")
    later = [
        {**row, "ts": row["ts"] + dt.timedelta(hours=1)}
        for row in _rows(days[2], "b-gpu2", "GPU-B2", None, count=3)
    ]
    _write(retaining, later, None, "c")
    assert read_status(retaining).backlog_files == 1  # the late file is no backlog
    loaded, _ = ingest_then_build(retaining)
    assert loaded.samples_loaded == 3  # neither the late file nor the expired day again
    assert f"1 files in date= folders before {days[1]} not loaded" in str(loaded)
    with connect_read_only(retaining) as con:
        assert con.execute(
            "select count(*) from loaded_files where path like ?", [f"%date={days[0]}/%"]
        ).fetchall() == [(0,)]
        assert con.execute("select min(ts)::date from samples").fetchall() == [(days[1],)]
    assert not (retaining.samples_dir / f"date={days[0]}").exists()  # deleted once published


def test_a_build_inside_a_callers_transaction_leaves_the_clean_up_to_its_publish(
    tmp_path: Path,
) -> None:
    """`build` joined to an open transaction (the cycle's) deletes no raw partition: the
    caller runs `after_publish` once, after its own publish."""
    config = _setup(tmp_path, timezone="UTC")
    retaining = _retaining(config, days=4)
    today = dt.datetime.now(dt.UTC).date()
    days = [today - dt.timedelta(days=back) for back in (5, 4)]
    for day in days:
        _write(retaining, _rows(day, "node01", "GPU-A0", "siteA", count=30), "siteA", "a")
    ingest(retaining)
    build(retaining)  # published: days[0] expired, its partition deleted
    assert not (retaining.samples_dir / f"date={days[0]}").exists()
    _write(retaining, _rows(days[0], "node01", "GPU-A0", "siteA", count=7), "siteA", "late")
    late = retaining.samples_dir / f"date={days[0]}"
    with write_transaction(retaining):
        build(retaining, full=True)
        assert late.exists()
    assert late.exists()
    after_publish(retaining)
    assert not late.exists()


def test_cycles_after_a_kept_run_is_restored_leave_it_one_row(tmp_path: Path) -> None:
    """A simulated fleet's spare GPUs idle from the first day on: the full build expires
    that day and keeps their runs, each build after gives them their kept rows back (their
    end the full build's last sample). A cycle looks the runs it touches up by a bound on
    their end (#60 item 2): the second cycle's bound, past the kept rows' ends, must still
    find them, or the waste of today counts twice (data test waste_s <= idle_s). A sample a
    minute, not every 10 s: a sixth of the samples, and the second cycle still fails so
    when the bound is not held to the kept rows' ends (build/incremental/pieces.py's
    _kept_ends)."""
    from gpufleet.simulate.fleet import SimulationSpec, simulate_fleet, simulate_window

    today = dt.datetime.now(dt.UTC).date()
    (tmp_path / "gpufleet.toml").write_text("[retention]\nsamples_days = 2\n")
    config = load_config(data_dir=str(tmp_path), environ={})

    def spec(flush_s: float) -> SimulationSpec:
        return SimulationSpec.from_cli(
            config=config,
            gpus=16,
            gpus_per_host=8,
            week=None,
            start=today - dt.timedelta(days=3),
            days=3,
            interval_s=60.0,
            flush_s=flush_s,
            seed=7,
        )

    simulate_fleet(spec(86400.0), data_dir=tmp_path, progress=lambda _: None)
    ingest(config)
    assert build(config).expired  # the first day: the spare GPUs' runs are kept
    midnight = dt.datetime.combine(today, dt.time(), dt.UTC)
    for hour in (0, 1):
        start = midnight + dt.timedelta(hours=hour)
        simulate_window(
            spec(600.0), data_dir=tmp_path, start=start, end=start + dt.timedelta(hours=1)
        )
        _, built = ingest_then_build(config, today=today)
        assert built is not None and built.mode == "incremental"
    with connect_read_only(config) as con:
        ((rows, runs),) = con.execute(
            "select count(*), count(distinct (gpu_uuid, episode_id)) from idle_episodes"
        ).fetchall()
    assert rows == runs
