"""Allocated GPU-hours of Slurm jobs on nodes without a collector (docs/reference.md
#allocated-gpu-hours): from the scheduler alone (its gres/gpu count over elapsed time) in
`job_efficiency`, `alloc_only_daily`, `team_daily` and `team_weekly`, never counted twice
where samples measure the same GPUs; on hand-written rows with hand-computed figures."""

from __future__ import annotations

import datetime as dt

import pytest

from gpufleet.reports.allocated import AllocOnly, alloc_only_week
from tests.test_job_efficiency import job, sample, slurm_job
from tests.test_models_fixtures import Fleet, at

HOUR = 3600


def _fleet() -> Fleet:
    """Jobs of team vision (account cv) and of bob (users.csv: speech):

    - P2 (2 GPUs, gpu01, ended): 10:00 to 13:00 UTC (3 h).
    - R3 (3 GPUs over gpu02 and gpu03, running): from 12:00 UTC, last seen by the import at
      15:00 UTC (3 h): a GPU and a half on each node.
    - N (bob, 1 GPU, gpu04, no team in its record): 23:00 to 01:00 UTC (2 h over midnight).
    - M (1 GPU, node1, ended 10:00 to 10:10): node1 has a collector's samples, attributed by
      the scheduler's record: measured, not counted again.
    - Q (2 GPUs, gpu05, running, never seen by an import writing seen_ts): nothing yet.
    """
    fleet = Fleet()
    fleet.user("bob", "speech")
    slurm_job(fleet, "P2", start_ts=at(0), end_ts=at(3 * HOUR), team="vision", gpus=2,
              hosts=("gpu01",))  # fmt: skip
    slurm_job(fleet, "R3", start_ts=at(2 * HOUR), state="RUNNING", team="vision", gpus=3,
              hosts=("gpu02", "gpu03"), seen_ts=at(5 * HOUR))  # fmt: skip
    slurm_job(fleet, "N", start_ts=at(13 * HOUR), end_ts=at(15 * HOUR), user="bob", gpus=1,
              hosts=("gpu04",))  # fmt: skip
    slurm_job(fleet, "M", start_ts=at(0), end_ts=at(600), team="vision", gpus=1)
    slurm_job(fleet, "Q", start_ts=at(0), state="RUNNING", team="vision", gpus=2,
              hosts=("gpu05",))  # fmt: skip
    for k in range(1, 61):
        sample(fleet, at(10 * k), alloc=("M", "alice"))
    fleet.build()
    return fleet


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return _fleet()


def test_jobs_without_samples_are_allocated_their_gres_times_elapsed(fleet: Fleet) -> None:
    p2, r3, n, q = (job(fleet, name) for name in ("P2", "R3", "N", "Q"))
    assert (p2["gpus"], p2["gpu_name"], p2["gpu_hours"], p2["team"]) == (2, None, 0.0, "vision")
    assert p2["alloc_gpu_hours"] == pytest.approx(2 * 3)
    assert (r3["gpus"], r3["end_ts"], r3["state"]) == (3, None, "RUNNING")
    assert r3["alloc_gpu_hours"] == pytest.approx(3 * 3)  # up to the import that saw it
    assert (n["team"], n["user"], n["alloc_gpu_hours"]) == ("speech", "bob", pytest.approx(2))
    assert q["alloc_gpu_hours"] == 0.0  # running, and no import time to count up to
    m = job(fleet, "M")  # measured: its samples, as before
    assert m["alloc_gpu_hours"] == pytest.approx(600 / 3600)
    assert m["gpu_hours"] == pytest.approx(600 / 3600)


def test_alloc_only_daily_spreads_gpus_over_nodes_and_local_days(fleet: Fleet) -> None:
    rows = fleet.rows(
        "select day, host, team, jobs, alloc_gpu_hours from alloc_only_daily order by host, day"
    )
    day, next_day = at(0).date(), at(0).date() + dt.timedelta(days=1)
    assert [(r["day"], r["host"], r["team"], r["jobs"]) for r in rows] == [
        (day, "gpu01", "vision", 1),
        (day, "gpu02", "vision", 1),
        (day, "gpu03", "vision", 1),
        (day, "gpu04", "speech", 1),
        (next_day, "gpu04", "speech", 1),
    ]
    hours = [r["alloc_gpu_hours"] for r in rows]
    assert hours == pytest.approx([6.0, 4.5, 4.5, 1.0, 1.0])
    # node1's job M has samples: measured, never here as well
    assert fleet.rows("select * from alloc_only_daily where host = 'node1'") == []


def test_team_daily_adds_allocated_only_hours_once(fleet: Fleet) -> None:
    rows = fleet.rows(
        "select day, team, sum(gpu_hours) as gpu_hours, sum(gpus) as gpus,"
        " sum(alloc_gpu_hours) as alloc_gpu_hours,"
        " sum(alloc_only_gpu_hours) as alloc_only_gpu_hours"
        " from team_daily group by all order by day, team"  # the records' site and none
    )
    day, next_day = at(0).date(), at(0).date() + dt.timedelta(days=1)
    assert [(r["day"], r["team"], r["gpus"]) for r in rows] == [
        (day, "speech", 0),
        (day, "vision", 1),
        (next_day, "speech", 0),
    ]
    speech, vision, speech_next = rows
    assert (speech["gpu_hours"], speech["alloc_gpu_hours"]) == (0.0, pytest.approx(1.0))
    assert speech["alloc_only_gpu_hours"] == pytest.approx(1.0)
    # vision: M's 10 measured minutes, plus P2's 6 h and R3's 9 h allocated only
    assert vision["gpu_hours"] == pytest.approx(600 / 3600)
    assert vision["alloc_gpu_hours"] == pytest.approx(600 / 3600 + 6 + 9)
    assert vision["alloc_only_gpu_hours"] == pytest.approx(6 + 9)
    assert speech_next["alloc_gpu_hours"] == pytest.approx(1.0)
    week = fleet.rows(
        "select team, sum(alloc_only_gpu_hours) as alloc_only_gpu_hours from team_weekly"
        " group by team order by team"
    )
    assert [(r["team"], r["alloc_only_gpu_hours"]) for r in week] == [
        ("speech", pytest.approx(2.0)),
        ("vision", pytest.approx(15.0)),
    ]


def test_a_fleet_with_collectors_only_allocates_what_its_samples_say() -> None:
    """Every node measured: no allocated-only hours; team_daily's allocated hours are the
    hours of samples attributed by the scheduler's record."""
    fleet = Fleet()
    slurm_job(fleet, "M", start_ts=at(0), end_ts=at(600), team="vision", gpus=1)
    fleet.allocation(job_id="A", user="alice", team="ml", start_ts=at(0), end_ts=at(300))
    for k in range(1, 61):
        sample(fleet, at(10 * k), gpu_uuid="GPU-B", gpu_index=1, alloc=("M", "alice"))
        sample(fleet, at(10 * k))
    fleet.build()
    assert fleet.rows("select * from alloc_only_daily") == []
    rows = fleet.rows("select team, alloc_gpu_hours, alloc_only_gpu_hours from team_daily")
    by_team = {r["team"]: (r["alloc_gpu_hours"], r["alloc_only_gpu_hours"]) for r in rows}
    assert by_team == {
        "vision": (pytest.approx(600 / 3600), 0.0),
        "ml": (pytest.approx(300 / 3600), 0.0),
        "(unallocated)": (0.0, 0.0),
    }


def test_the_report_reads_the_weeks_allocated_only_nodes(fleet: Fleet) -> None:
    week = at(0).strftime("%G-W%V")
    assert alloc_only_week(fleet.con, week, None) == AllocOnly(
        nodes=4, hosts="gpu[01-04]", gpu_hours=pytest.approx(6 + 9 + 2)
    )
    assert alloc_only_week(fleet.con, week, "elsewhere") == AllocOnly(0, "", 0.0)
