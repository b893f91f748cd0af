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
from pathlib import Path
from typing import Any

import pytest

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.showback import showback
from gpufleet.warehouse.build import build
from gpufleet.warehouse.close import close
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import connect_read_only
from tests.test_ingest import query
from tests.test_sites import ZONES, _rows, _setup, _write, assert_incremental_equals_full

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
