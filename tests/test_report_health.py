"""How well and how healthy in the weekly report, the council email and the team emails
(#59 item 4): the GPUs to drain at the top, each team's utilization beside its SM and
tensor activity with the share measured, the busy jobs with idle SMs, and the SM activity
of a team's jobs. Samples a minute apart in 2026-W47 (Mon 16 Nov), hand-computed figures."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from gpufleet.config import Config, load_config
from gpufleet.reports.data import load_week
from gpufleet.reports.render import PageLink, render_email_text, render_page
from gpufleet.reports.team import build_team_message, load_team_weeks
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from tests import notify_fixtures as fx

WEEK = "2026-W47"
NOW = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)


def _at(day: int, hour: int) -> dt.datetime:
    return dt.datetime(2026, 11, day, hour, tzinfo=dt.UTC)


def _with(rows: list[dict[str, Any]], **values: Any) -> list[dict[str, Any]]:
    return [{**row, **values} for row in rows]


def _samples(gpu: str, host: str, user: str, job: str, start: dt.datetime, end: dt.datetime,
             util: float = fx.BUSY) -> list[dict[str, Any]]:  # fmt: skip
    return fx.samples(gpu, host, 0, fx.H100, user, job, [(start, end, util)])


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """vision: job 1 on GPU-s, 2 h busy (90%) with SMs 20% and tensor cores 5% active.
    nlp: job 2 on GPU-b, 2 h busy at SM 60% / tensor 40%, 1 h idle (SM and tensor 0%) on the
    16th, 1 h busy at 60% / 40% on the 17th, one sample of which has a failed row remap and
    XID 79; job 3 on GPU-b2, 2 h busy, no activity. ops: job 4 on GPU-n, 1 h busy, none."""
    busy_s = {"sm_active_pct": 20.0, "tensor_active_pct": 5.0}
    busy_b = {"sm_active_pct": 60.0, "tensor_active_pct": 40.0}
    idle_b = {"sm_active_pct": 0.0, "tensor_active_pct": 0.0}
    sick = _with(_samples("GPU-b", "node-b", "bob", "2", _at(17, 10), _at(17, 11)), **busy_b)
    sick[30] = {**sick[30], "remapped_rows_failure": True, "xid_errors": [79]}
    rows = [
        *_with(_samples("GPU-s", "node-s", "alice", "1", _at(16, 10), _at(16, 12)), **busy_s),
        *_with(_samples("GPU-b", "node-b", "bob", "2", _at(16, 10), _at(16, 12)), **busy_b),
        *_with(_samples("GPU-b", "node-b", "bob", "2", _at(16, 12), _at(16, 13), 1.0), **idle_b),
        *sick,
        *_samples("GPU-b2", "node-b", "bob", "3", _at(16, 10), _at(16, 12)),
        *_samples("GPU-n", "node-n", "carol", "4", _at(16, 10), _at(16, 11)),
    ]  # fmt: skip
    data_dir = tmp_path_factory.mktemp("health") / "data"
    fx.write_samples(data_dir, "fleet", rows)
    (data_dir / "ref").mkdir()
    (data_dir / "ref/users.csv").write_text("user,team\nalice,vision\nbob,nlp\ncarol,ops\n")
    (data_dir / "ref/prices.csv").write_text(fx.PRICES_CSV)
    path = data_dir / "gpufleet.toml"
    path.write_text(f'data_dir = "{data_dir}"\n')
    config = load_config(config_path=path)
    ingest(config, compact=False, today=dt.date(2026, 11, 24))
    build(config)
    return config


def test_each_team_has_utilization_beside_sm_and_tensor_activity(fleet: Config) -> None:
    how_well = load_week(fleet, WEEK, now=NOW).how_well
    assert how_well is not None
    rows = {row["team"]: row for row in how_well.iter_rows(named=True)}
    assert rows["vision"] == pytest.approx(
        {"team": "vision", "gpu_hours": 2.0, "avg_util_pct": 90.0, "measured_pct": 100.0,
         "sm_active_pct": 20.0, "tensor_active_pct": 5.0}
    )  # fmt: skip
    # nlp: 6 GPU-hours, 4 of them measured (GPU-b); SM 60% x 3 h + 0% x 1 h over 4 h = 45%,
    # tensor 40% x 3 h / 4 h = 30%; utilization (5 h x 90% + 1 h x 1%) / 6 h
    assert rows["nlp"] == pytest.approx(
        {"team": "nlp", "gpu_hours": 6.0, "avg_util_pct": 451 / 6, "measured_pct": 400 / 6,
         "sm_active_pct": 45.0, "tensor_active_pct": 30.0}
    )  # fmt: skip
    # ops: no GPM, no DCGM: not measured, never 0
    assert rows["ops"]["measured_pct"] == 0.0
    assert rows["ops"]["sm_active_pct"] is None and rows["ops"]["tensor_active_pct"] is None
    assert list(rows) == ["nlp", "vision", "ops"]  # the most GPU-hours first


def test_the_busy_jobs_with_idle_sms_are_listed(fleet: Config) -> None:
    jobs = load_week(fleet, WEEK, now=NOW).busy_low_sm_jobs
    assert jobs is not None
    # job 1: 90% utilization, SMs 20% active; job 2 has 45% (and 67.75% utilization), job 3
    # and 4 no activity
    assert jobs.select("job_id", "team", "avg_util_pct", "avg_sm_active_pct").rows() == [
        ("1", "vision", pytest.approx(90.0), pytest.approx(20.0))
    ]


def test_the_gpus_to_drain_open_the_page_and_the_email(fleet: Config) -> None:
    data = load_week(fleet, WEEK, now=NOW)
    assert data.to_drain is not None
    assert data.to_drain.select("host", "gpu_uuid", "drain_reasons", "since_day").rows() == [
        ("node-b", "GPU-b", ["remap_failure", "xid_79"], dt.date(2026, 11, 17))
    ]
    text = render_email_text(data, PageLink(url=None, path="index.html"))
    lines = text.splitlines()
    block = lines.index(next(line for line in lines if line.startswith("GPUS TO DRAIN")))
    assert block < lines.index("THE FLEET IN NUMBERS")
    assert lines[block + 1].strip() == (
        f"node-b GPU-b ({fx.H100}): remap_failure, xid_79, since 2026-11-17"
    )
    page = render_page(data, [])
    assert page.index('id="gpus-to-drain"') < page.index('id="fleet"')
    assert "<td>remap_failure, xid_79</td>" in page and "<td>2026-11-17</td>" in page


def test_the_email_and_the_page_show_how_well_and_not_measured(fleet: Config) -> None:
    data = load_week(fleet, WEEK, now=NOW)
    text = render_email_text(data, PageLink(url=None, path="index.html"))
    block = text[text.index("HOW WELL") :].splitlines()
    assert block[2].split() == ["nlp", "6.0", "75.2%", "45.0%", "30.0%", "66.7%"]
    assert block[4].split() == ["ops", "1.0", "90.0%", "not", "measured"]
    assert "job 1 (NVIDIA H100 80GB HBM3), user alice, team vision: 2.0 GPU-hours" in text
    page = render_page(data, [])
    assert '<td class="num" colspan="3">not measured</td>' in page
    assert '<section id="how-well">' in page


def test_a_teams_email_gives_its_sm_activity_and_its_jobs(fleet: Config, tmp_path: Path) -> None:
    teams = {team.team: team for team in load_team_weeks(fleet, WEEK, now=NOW)}
    nlp = build_team_message(teams["nlp"], sender="gpufleet@example.org")
    body = nlp.get_body(("plain",))
    assert body is not None
    text = body.get_content()
    assert (
        "SM activity                 45.0%   tensor 30.0%, measured on 66.7% of GPU-hours" in text
    )
    # job 2's waste line: the job's SM activity over its whole run
    assert "user bob, job 2 (1 episode on 1 GPU), SM activity 45.0%" in text
    ops = build_team_message(teams["ops"], sender="gpufleet@example.org").get_body(("plain",))
    assert ops is not None and "SM activity          not measured" in ops.get_content()
