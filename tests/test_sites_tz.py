"""A site's own time zone for every date (issue 42): a users.csv / hosts.csv `valid_from`
applies from local midnight at each site, `gpufleet close` closes each site's local days
(and the episodes that began in them) once the month is over there, `export showback` sums
each site's local month, and the idle notices take the day at the host's site
(docs/sites.md#a-time-zone-per-site).

siteA is in Tokyo (UTC+9), siteB in New York (UTC-5 in late November), the rest in Berlin:
2026-11-17 begins at 15:00 UTC on the 16th at siteA and at 05:00 UTC on the 17th at siteB.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from pathlib import Path
from typing import Any

import pytest

from gpufleet.close import close
from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.showback import showback
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import connect_read_only
from tests.templates import made_once
from tests.test_ingest import query
from tests.test_sites import ZONES, _rows, _setup, _write, assert_incremental_equals_full

pytestmark = pytest.mark.fleet

MOVE_DAY = dt.date(2026, 11, 17)
# 2026-11-17 00:00 local at each site, in UTC
MIDNIGHT = {
    "siteA": dt.datetime(2026, 11, 16, 15, 0, tzinfo=dt.UTC),
    "siteB": dt.datetime(2026, 11, 17, 5, 0, tzinfo=dt.UTC),
}
ALICE = [{"pid": 7, "user": "alice", "used_mem_bytes": 1 << 30, "job_id": None}]


def _at(
    moment: dt.datetime, host: str, gpu: str, cluster: str, *, count: int, **kw: Any
) -> list[dict[str, Any]]:
    """`count` samples of 10 s from `moment` on."""
    rows = _rows(moment.date(), host, gpu, cluster, count=count, **kw)
    shift = moment - rows[0]["ts"]
    return [{**row, "ts": row["ts"] + shift} for row in rows]


def _teams_around_midnight(config: Config) -> dict[tuple[str, str], tuple[str, str]]:
    """Per site and GPU: the team of the last sample before that site's local midnight of
    MOVE_DAY and of the first one from it on."""
    rows = query(config, "select cluster, gpu_uuid, ts, team from samples_attributed order by ts")
    found: dict[tuple[str, str], list[str]] = {}
    for site, gpu, ts, team in rows:
        teams = found.setdefault((site, gpu), ["", ""])
        if ts < MIDNIGHT[site]:
            teams[0] = team
        elif not teams[1]:
            teams[1] = team
    return {key: (teams[0], teams[1]) for key, teams in found.items()}


def test_a_dated_users_and_hosts_row_applies_from_local_midnight_at_each_site(
    tmp_path: Path,
) -> None:
    config = _setup(tmp_path, **ZONES)
    (config.ref_dir / "users.csv").write_text("user,team,valid_from\nalice,ml,\n")
    (config.ref_dir / "hosts.csv").write_text(
        "host_glob,team,cluster,valid_from\n"
        "node01,alpha,siteA,\n"
        "node01,beta,siteB,\n"
        f"node01,moved-host,,{MOVE_DAY}\n"
    )
    # a minute either side of each site's local midnight: GPU 0 runs alice's process
    # (attributed by user), GPU 1 none (attributed by host, hosts.csv)
    for site, midnight in MIDNIGHT.items():
        start = midnight - dt.timedelta(minutes=1)
        busy = _at(start, "node01", f"GPU-{site}-0", site, count=12)
        _write(config, [{**row, "processes": ALICE} for row in busy], site, "a")
        idle = _at(start, "node01", f"GPU-{site}-1", site, count=12)
        _write(config, [{**row, "gpu_index": 1} for row in idle], site, "b")
    ingest(config, today=MOVE_DAY + dt.timedelta(days=2))
    assert build(config).mode == "full"
    assert _teams_around_midnight(config) == {
        ("siteA", "GPU-siteA-0"): ("ml", "ml"),
        ("siteA", "GPU-siteA-1"): ("alpha", "moved-host"),
        ("siteB", "GPU-siteB-0"): ("ml", "ml"),
        ("siteB", "GPU-siteB-1"): ("beta", "moved-host"),
    }

    # alice moves on MOVE_DAY: an incremental build from the earliest midnight (siteA's)
    (config.ref_dir / "users.csv").write_text(
        f"user,team,valid_from\nalice,ml,\nalice,moved,{MOVE_DAY}\n"
    )
    ingest(config, today=MOVE_DAY + dt.timedelta(days=2))
    assert build(config).mode == "incremental"
    assert _teams_around_midnight(config) == {
        ("siteA", "GPU-siteA-0"): ("ml", "moved"),
        ("siteA", "GPU-siteA-1"): ("alpha", "moved-host"),
        ("siteB", "GPU-siteB-0"): ("ml", "moved"),
        ("siteB", "GPU-siteB-1"): ("beta", "moved-host"),
    }
    assert_incremental_equals_full(config)


# --- the end of November at each site -----------------------------------------------------

# 23:30 local on 2026-11-30 at siteB (04:30 UTC on 12-01) and 00:30 local on 2026-12-01 at
# siteA (15:30 UTC on 11-30, still November in Berlin): each a 40-minute idle episode
LATE = {
    "siteA": dt.datetime(2026, 11, 30, 15, 30, tzinfo=dt.UTC),
    "siteB": dt.datetime(2026, 12, 1, 4, 30, tzinfo=dt.UTC),
}
# November is over at siteA (11:00 on 12-01 in Tokyo), not at siteB (21:00 on 11-30)
NOW = dt.datetime(2026, 12, 1, 2, 0, tzinfo=dt.UTC)
LATER = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
NOT_OVER = "2026-11 is not over yet: it ends 2026-12-01 00:00 America/New_York"


def _month_end(tmp_path: Path) -> Config:
    """_make_month_end's fleet, made once per test process and copied (tests/templates.py)."""
    made_once("test_sites_tz._month_end", _make_month_end, tmp_path)
    return Config(data_dir=tmp_path / "data", **ZONES)


def _make_month_end(tmp_path: Path) -> Config:
    config = _setup(tmp_path, **ZONES)
    for site, start in LATE.items():
        # an hour busy, then 40 minutes idle: 100 minutes of samples
        rows = _at(start - dt.timedelta(hours=1), "node01", f"GPU-{site}", site, count=600)
        # idle from `start` on: the first idle sample's interval begins then
        idle = [{**row, "gpu_util_pct": 0.0} if row["ts"] > start else row for row in rows]
        _write(config, idle, site, "a")
    ingest(config, today=dt.date(2026, 12, 3))
    assert build(config).mode == "full"
    return config


def test_close_takes_each_sites_month_and_the_episodes_that_began_in_it(
    tmp_path: Path,
) -> None:
    config = _month_end(tmp_path)
    episodes = query(
        config, "select cluster, start_ts from idle_episodes where is_waste order by 1"
    )
    assert [(site, ts.astimezone(dt.UTC)) for site, ts in episodes] == list(LATE.items())

    with pytest.raises(GpufleetError, match=NOT_OVER):
        close(config, "2026-11", today=NOW)
    with pytest.raises(GpufleetError, match=NOT_OVER):
        close(config, "2026-11", cluster="siteB", today=NOW)
    assert query(config, "select count(*) from closed_periods") == [(0,)]
    assert "closed 2026-11 for site siteA" in str(
        close(config, "2026-11", cluster="siteA", today=NOW)
    )
    assert "closed 2026-11 for site siteB" in str(
        close(config, "2026-11", cluster="siteB", today=LATER)
    )
    kept = query(config, "select cluster, count(*) from build_state.kept_idle_episodes group by 1")
    # siteB's episode began on 11-30 there; siteA's on 12-01 there (11-30 in Berlin)
    assert kept == [("siteB", 1)]
    days = query(
        config,
        "select cluster, min(day), max(day) from build_state.kept_team_daily group by 1 order by 1",
    )
    assert days == [
        ("siteA", dt.date(2026, 11, 30), dt.date(2026, 11, 30)),
        ("siteB", dt.date(2026, 11, 30), dt.date(2026, 11, 30)),
    ]
    # a full build gives the kept rows back
    assert build(config, full=True).mode == "full"
    assert query(config, "select count(*) from build_state.kept_idle_episodes") == [(1,)]


def test_showback_sums_each_sites_local_month(tmp_path: Path) -> None:
    config = _month_end(tmp_path)
    # siteA: 23:30-01:10 in Tokyo (30 minutes in November); siteB: 22:30-00:10 in New
    # York (90 minutes in November, though all after 00:00 on 12-01 in Berlin)
    hours = {"2026-11": {"siteA": 0.5, "siteB": 1.5}, "2026-12": {"siteA": 7 / 6, "siteB": 1 / 6}}
    for month, expected in hours.items():
        rows = {row["x_cluster"]: row for row in showback(config, month).iter_rows(named=True)}
        assert {site: row["ConsumedQuantity"] for site, row in rows.items()} == {
            site: pytest.approx(value) for site, value in expected.items()
        }
        if month == "2026-11":
            periods = {
                site: (row["ChargePeriodStart"], row["ChargePeriodEnd"])
                for site, row in rows.items()
            }
    assert periods == {
        "siteA": (
            dt.datetime(2026, 10, 31, 15, 0, tzinfo=dt.UTC),
            dt.datetime(2026, 11, 30, 15, 0, tzinfo=dt.UTC),
        ),
        "siteB": (
            dt.datetime(2026, 11, 1, 4, 0, tzinfo=dt.UTC),  # summer time until 02:00
            dt.datetime(2026, 12, 1, 5, 0, tzinfo=dt.UTC),
        ),
    }


def test_the_idle_notice_day_is_the_local_day_at_the_hosts_site(tmp_path: Path) -> None:
    from gpufleet.notices.episodes import day_episodes

    config = _setup(tmp_path, **ZONES)
    (config.ref_dir / "users.csv").write_text("user,team,email\nalice,beta,alice@example.com\n")
    # 40 idle minutes: 00:30-01:10 on 12-01 in Tokyo (11-30 in Berlin), 22:40-23:20 on
    # 11-30 in New York (12-01 in Berlin)
    starts = {"siteA": LATE["siteA"], "siteB": LATE["siteB"] - dt.timedelta(minutes=50)}
    for site, start in starts.items():
        rows = _at(start, "node01", f"GPU-{site}", site, count=240, util=0.0)
        _write(config, [{**row, "processes": ALICE} for row in rows], site, "a")
        # a later sample, so that the episode is not the GPU's open one
        busy = _at(start + dt.timedelta(hours=2), "node01", f"GPU-{site}", site, count=3)
        _write(config, busy, site, "b")
    ingest(config, today=dt.date(2026, 12, 3))
    build(config)
    with connect_read_only(config) as con:
        found = {
            day: sorted(
                e.cluster or "" for e in day_episodes(con, day, config.timezone, config.sites)
            )
            for day in (dt.date(2026, 11, 30), dt.date(2026, 12, 1))
        }
    assert found == {dt.date(2026, 11, 30): ["siteB"], dt.date(2026, 12, 1): ["siteA"]}


# --- each site on its own clock where a person reads a time ------------------------------
# ber in Berlin (UTC+1 in November), sfo in Los Angeles (UTC-8); the fleet's zone is Berlin.
# alice's GPUs sat idle on 2026-11-28 at both: 10:00-12:30 in Berlin, 09:00-11:30 in Los
# Angeles (18:00-20:30 in Berlin). sfo's first sample is on 11-27.

BERLIN, LOS_ANGELES = "Europe/Berlin", "America/Los_Angeles"
TWO_ZONES = {"timezone": BERLIN, "sites": (("ber", BERLIN), ("sfo", LOS_ANGELES))}
SATURDAY = dt.date(2026, 11, 28)
IDLE_FROM = {  # 2026-11-28 local at each site, in UTC
    "ber": dt.datetime(2026, 11, 28, 9, 0, tzinfo=dt.UTC),
    "sfo": dt.datetime(2026, 11, 28, 17, 0, tzinfo=dt.UTC),
}
FIRST_SAMPLE = {
    "ber": dt.datetime(2026, 11, 2, 9, 0, tzinfo=dt.UTC),
    "sfo": dt.datetime(2026, 11, 27, 17, 0, tzinfo=dt.UTC),
}


def _two_zones(tmp_path: Path) -> Config:
    """_make_two_zones's fleet, made once per test process and copied (tests/templates.py)."""
    made_once("test_sites_tz._two_zones", _make_two_zones, tmp_path)
    return Config(data_dir=tmp_path / "data", **TWO_ZONES)


def _make_two_zones(tmp_path: Path) -> Config:
    """alice's idle GPUs at ber and sfo on SATURDAY (an hour busy, 150 minutes idle, then
    busy again), and a first, busy sample at each site on FIRST_SAMPLE."""
    config = _setup(tmp_path, **TWO_ZONES)
    (config.ref_dir / "users.csv").write_text("user,team,email\nalice,ml,alice@example.com\n")
    for site, start in IDLE_FROM.items():
        rows = _at(start - dt.timedelta(hours=1), "node01", f"GPU-{site}", site, count=1500)
        idle_until = start + dt.timedelta(minutes=150)
        rows = [
            {**row, "gpu_util_pct": 0.0} if start < row["ts"] <= idle_until else row for row in rows
        ]
        _write(config, [{**row, "processes": ALICE} for row in rows], site, "a")
        first = _at(FIRST_SAMPLE[site], "node01", f"GPU-{site}", site, count=3)
        _write(config, [{**row, "processes": ALICE} for row in first], site, "b")
    ingest(config, today=dt.date(2026, 12, 1))
    build(config)
    return config


def _local_clock(config: Config, site: str) -> tuple[str, str]:
    """The start and end of the site's waste episode, as a notice shows them: in its zone."""
    from gpufleet.notices.messages import clock

    episodes = query(config, "select cluster, start_ts, end_ts from idle_episodes where is_waste")
    ((start, end),) = [(start, end) for cluster, start, end in episodes if cluster == site]
    zone = zoneinfo.ZoneInfo(config.site_timezone(site))
    return clock(start.astimezone(zone)), clock(end.astimezone(zone))


def test_an_idle_notice_shows_each_sites_times_in_its_zone_and_names_it(
    tmp_path: Path,
) -> None:
    from gpufleet.notices.idle import DRY_RUN, notify_idle
    from gpufleet.notices.messages import build_notice

    config = _two_zones(tmp_path)
    ber, sfo = _local_clock(config, "ber"), _local_clock(config, "sfo")
    assert ber[0] == "2026-11-28 10:00" and sfo[0] == "2026-11-28 09:00"

    run = notify_idle(config, day=SATURDAY, mode=DRY_RUN)
    (text,) = run.previews
    assert "Subject: gpufleet: your idle GPUs on 2026-11-28: 5.00 GPU-hours" in text
    assert "on 2026-11-28 (each site's local day, its times in the zone each line names):" in text
    assert f"from {ber[0]} to {ber[1]} Europe/Berlin: 2.50 GPU-hours" in text
    assert f"from {sfo[0]} to {sfo[1]} America/Los_Angeles: 2.50 GPU-hours" in text
    assert "idle notices for 2026-11-28 (Europe/Berlin, America/Los_Angeles): 1 notice" in str(run)
    (notice,) = run.plan.notices
    html = build_notice(notice, config).get_body(preferencelist=("html",))
    assert html is not None
    page = html.get_content()
    assert "<th>Time zone</th>" in page
    assert f"<td>{sfo[0]}</td>" in page and "<td>America/Los_Angeles</td>" in page

    # the sites in one zone only (as serve runs them, each at 08:00 there): the zone once
    run = notify_idle(config, day=SATURDAY, mode=DRY_RUN, zone=LOS_ANGELES)
    (text,) = run.previews
    assert "on 2026-11-28 (America/Los_Angeles):" in text
    assert f"from {sfo[0]} to {sfo[1]}: 2.50 GPU-hours" in text
    assert "Europe/Berlin" not in text and "at site ber" not in text
    assert "idle notices for 2026-11-28 (America/Los_Angeles): 1 notice" in str(run)
    run = notify_idle(config, day=SATURDAY, zone=LOS_ANGELES)
    assert run.directory == config.notices_dir / "2026-11-28" / "America_Los_Angeles"


def test_the_notices_default_day_is_over_at_every_site() -> None:
    from gpufleet.site_zones import last_complete_day, latest_zone

    # 08:00 on 11-29 in Berlin is 23:00 on 11-28 in Los Angeles: 11-28 is not over there
    now = dt.datetime(2026, 11, 29, 7, 0, tzinfo=dt.UTC)
    assert last_complete_day([BERLIN], now) == SATURDAY
    assert last_complete_day([BERLIN, LOS_ANGELES], now) == SATURDAY - dt.timedelta(days=1)
    assert last_complete_day([BERLIN, LOS_ANGELES], now + dt.timedelta(hours=1)) == SATURDAY
    assert latest_zone([BERLIN, LOS_ANGELES, "Asia/Tokyo"], now) == LOS_ANGELES


def test_serve_schedules_the_report_where_the_week_ends_last_and_notices_in_each_zone(
    tmp_path: Path,
) -> None:
    from gpufleet.flows.serve import build_deployments

    config = _setup(tmp_path, **TWO_ZONES)
    _, report, *notices = build_deployments(config)
    (weekly,) = report.schedules or []
    # Monday 07:00 in Los Angeles (16:00 in Berlin): Sunday is over at both sites
    assert (weekly.schedule.cron, weekly.schedule.timezone) == ("0 7 * * 1", LOS_ANGELES)
    assert [
        (n.name, n.parameters.get("zone"), s.schedule.cron, s.schedule.timezone)
        for n in notices
        for s in n.schedules or []
    ] == [
        ("daily-0800", BERLIN, "0 8 * * *", BERLIN),
        ("daily-0800-America-Los_Angeles", LOS_ANGELES, "0 8 * * *", LOS_ANGELES),
    ]
    # one zone: one notices run for every site, the report at 07:00 in it
    config = _setup(tmp_path / "one", timezone=BERLIN, sites=(("ber", BERLIN),))
    _, report, *notices = build_deployments(config)
    assert [s.schedule.timezone for d in (report, *notices) for s in d.schedules or []] == [
        BERLIN,
        BERLIN,
    ]
    assert [(n.name, "zone" in n.parameters) for n in notices] == [("daily-0800", False)]


def test_showback_coverage_is_each_sites_first_and_last_sample(tmp_path: Path) -> None:
    config = _two_zones(tmp_path)
    rows = {row["x_cluster"]: row for row in showback(config, "2026-11").iter_rows(named=True)}
    last = dict(query(config, "select cluster, max(ts) from samples group by 1"))
    assert {
        site: (row["x_coverage_start"], row["x_coverage_end"], row["x_is_partial_month"])
        for site, row in rows.items()
    } == {
        "ber": (FIRST_SAMPLE["ber"], last["ber"], True),
        "sfo": (FIRST_SAMPLE["sfo"], last["sfo"], True),
    }
    assert FIRST_SAMPLE["sfo"] == dt.datetime(2026, 11, 27, 17, 0, tzinfo=dt.UTC)


def test_a_site_report_is_headed_and_timed_in_the_sites_zone_and_its_subject_names_it(
    tmp_path: Path,
) -> None:
    from gpufleet.reports.mail import read_message
    from gpufleet.reports.weekly import write_report

    config = _two_zones(tmp_path)
    # Monday 30 Nov, 09:00 in Berlin: 00:00 in Los Angeles
    now = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.UTC)
    files = write_report(config, "2026-W48", now=now, cluster="sfo")
    assert files.subject.startswith("gpufleet weekly report 2026-W48, site sfo: $")
    page = files.page_path.read_text()
    assert "<h1>GPU fleet report 2026-W48: site sfo</h1>" in page
    assert "Mon 23 Nov 2026 – Sun 29 Nov 2026, America/Los_Angeles." in page
    assert "Generated 2026-11-30 00:00 PST." in page
    message = read_message(files.email_path)
    assert str(message["Subject"]).strip() == files.subject
    text = message.get_body(preferencelist=("plain",))
    assert text is not None
    assert "(Mon 23 Nov - Sun 29 Nov 2026, America/Los_Angeles)" in text.get_content()
    # the fleet's report: the configured zone's, its subject no site's
    files = write_report(config, "2026-W48", now=now)
    assert files.subject.startswith("gpufleet weekly report 2026-W48: $")
    assert "Sun 29 Nov 2026, Europe/Berlin." in files.page_path.read_text()


def test_the_fleets_last_complete_week_is_over_at_every_site() -> None:
    from gpufleet.site_zones import last_complete_fleet_week

    # Monday 30 Nov, 07:00 in Berlin: still Sunday 29 Nov in Los Angeles
    now = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.UTC)
    assert last_complete_fleet_week(Config(timezone=BERLIN), now) == "2026-W48"
    assert last_complete_fleet_week(Config(**TWO_ZONES), now) == "2026-W47"
    assert last_complete_fleet_week(Config(**TWO_ZONES), now + dt.timedelta(hours=2)) == "2026-W48"
