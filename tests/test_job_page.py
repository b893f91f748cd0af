"""`gpufleet job JOBID` and `gpufleet job --user USER`: a job's page from a warehouse built
from hand-written samples, allocation rows and a Slurm job record, checked against figures
computed by hand; the unknown id; SM activity where the marts carry it; and the team
email's pointer to the page.

The fleet (node1, interval 60 s, 2026-11-16 UTC, H100s at $3 a GPU-hour):

- job 4807074 (alice, Slurm cluster tiger, account vis-acct) holds node1 GPUs 0 and 1 from
  10:00 to 13:00: samples at 10:01 .. 13:00, 180 a GPU, 3 GPU-hours each, 6 in all.
  GPU 0 runs at 80 % but is idle (0 %) at 11:01 .. 11:45: 45 samples, one 45-minute idle
  stretch from 11:00 to 11:45, waste (30 min or more): 0.75 GPU-hours, $2.25.
  GPU 1 runs at 40 % but is idle at 12:01 .. 12:10: a 10-minute stretch, not waste.
  Busy: GPU 0 135 min x 80 % = 1.8 h; GPU 1 170 min x 40 % = 68 min; 2.9333 h of 6 h
  with a utilization: 48.89 %. Idle 0.75 + 1/6 h. Memory: 30 GiB on GPU 0 (50 GiB at
  12:30), 20 GiB on GPU 1, of 80 GiB. Power 360 W: 360 x 60 J a sample, 2.16 kWh.
  By local hour (a sample's ts: 10:01-10:59, 11:00-11:59, 12:00-12:59, 13:00) GPU 0 runs
  at 80, 20 (15 of 60 samples at 80), 80, 80 %; GPU 1 at 40, 40, 33.3, 40 %.
- job 4807075 (alice) holds GPU 0 from 13:00 to 14:00 at 100 %; job 5000 (bob) GPU 1.
- job 4700001 (alice) held node2 GPU 0 on 2026-11-09 10:00-12:00: allocation rows only.
- job 4807076 of a user whose name holds an escape sequence: allocation rows only.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpufleet.cli import main
from gpufleet.config import Config, load_config
from gpufleet.integrations.slurm.files import AllocationRow, JobRecord, render, render_jobs
from gpufleet.job_page import load_job_page
from gpufleet.reports.mail import read_message
from gpufleet.reports.team import write_team_emails
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from tests import report_fixtures as fx
from tests.test_ingest import sample, write_samples

pytestmark = pytest.mark.fleet

GIB = 1 << 30
UTC = dt.UTC
DAY = dt.date(2026, 11, 16)
EVIL_USER = "eve\x1b]0;pwn\x07"


def _at(hour: int, minute: int = 0, day: dt.date = DAY) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour, minute), tzinfo=UTC)


def _minutes(start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """The sample times of a minute's interval each, from start (excluded) to end."""
    count = int((end - start).total_seconds() // 60)
    return [start + dt.timedelta(minutes=k + 1) for k in range(count)]


def _row(ts: dt.datetime, gpu_index: int, util: float, mem_gib: float) -> dict[str, Any]:
    return {
        **sample(0, day=ts),
        "host": "node1",
        "gpu_index": gpu_index,
        "gpu_uuid": f"GPU-{gpu_index}",
        "interval_s": 60.0,
        "gpu_util_pct": util,
        "mem_used_bytes": int(mem_gib * GIB),
        "power_w": 360.0,
        "energy_mj": None,
        "processes": None,
    }


def _gpu0(ts: dt.datetime) -> dict[str, Any]:
    if ts > _at(13):
        return _row(ts, 0, 100.0, 10)
    idle = _at(11) < ts <= _at(11, 45)
    return _row(ts, 0, 0.0 if idle else 80.0, 50 if ts == _at(12, 30) else 30)


def _gpu1(ts: dt.datetime) -> dict[str, Any]:
    if ts > _at(13):
        return _row(ts, 1, 60.0, 5)
    idle = _at(12) < ts <= _at(12, 10)
    return _row(ts, 1, 0.0 if idle else 40.0, 20)


def _write_fleet(data_dir: Path) -> Config:
    config = load_config(data_dir=data_dir, environ={})
    times = _minutes(_at(10), _at(14))
    write_samples(
        data_dir,
        "raw/samples/date=2026-11-16/host=node1/a.parquet",
        [_gpu0(ts) for ts in times] + [_gpu1(ts) for ts in times],
    )
    rows = [
        AllocationRow("4807074", "alice", None, "node1", 0, _at(10), _at(13)),
        AllocationRow("4807074", "alice", None, "node1", 1, _at(10), _at(13)),
        AllocationRow("4807075", "alice", None, "node1", 0, _at(13), _at(14)),
        AllocationRow("5000", "bob", None, "node1", 1, _at(13), _at(14)),
        AllocationRow("4700001", "alice", None, "node2", 0, _at(10, day=DAY - dt.timedelta(7)),
                      _at(12, day=DAY - dt.timedelta(7))),
        AllocationRow("4807076", EVIL_USER, "vision", "node2", 0, _at(10), _at(11)),
    ]  # fmt: skip
    config.allocations_dir.mkdir(parents=True)
    (config.allocations_dir / "a.csv").write_text(render(rows))
    record = JobRecord(
        "4807074", None, "tiger", "alice", "vis-acct", "gpu", "COMPLETED", None, 2,
        ("node1",), _at(10), _at(13),
    )  # fmt: skip
    config.jobs_dir.mkdir(parents=True)
    (config.jobs_dir / "tiger-2026-11-16.csv").write_text(render_jobs([record]))
    config.ref_dir.mkdir(parents=True)
    (config.ref_dir / "users.csv").write_text("user,team\nalice,vision\nbob,nlp\n")
    (config.ref_dir / "prices.csv").write_text("gpu_glob,usd_per_gpu_hour\nNVIDIA H100*,3.0\n")
    ingest(config, compact=False)
    build(config)
    return config


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_fleet(tmp_path_factory.mktemp("jobs") / "data").data_dir


@pytest.fixture
def data_dir(built: Path, tmp_path: Path) -> Path:
    """A copy of the built fleet's data directory of the test's own."""
    return Path(shutil.copytree(built, tmp_path / "data"))


def _job(data_dir: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["--data-dir", str(data_dir), "job", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _line(text: str, start: str) -> str:
    found = [line.strip() for line in text.splitlines() if line.strip().startswith(start)]
    assert len(found) == 1, (start, text)
    return found[0]


def test_the_json_page_has_the_figures_computed_by_hand(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _job(data_dir, capsys, "4807074", "--json")
    assert status == 0, err
    page = json.loads(out)
    assert {key: page[key] for key in ("job_id", "cluster", "user", "team", "account")} == {
        "job_id": "4807074",
        "cluster": "tiger",
        "user": "alice",
        "team": "vision",
        "account": "vis-acct",
    }
    assert (page["partition"], page["state"]) == ("gpu", "COMPLETED")
    assert (page["start_ts"], page["end_ts"]) == (_at(10).isoformat(), _at(13).isoformat())
    assert page["gpu_models"] == ["NVIDIA H100 80GB HBM3"]
    assert page["gpus"] == 2
    expected = {
        "alloc_gpu_hours": 6.0,
        "gpu_hours": 6.0,
        "busy_gpu_hours": 1.8 + 68 / 60,
        "measured_gpu_hours": 6.0,
        "avg_util_pct": 100 * (1.8 + 68 / 60) / 6,
        "idle_gpu_hours": 0.75 + 10 / 60,
        "waste_gpu_hours": 0.75,
        "waste_usd": 2.25,
        "energy_kwh": 360 * 60 * 360 / 3.6e6,
    }
    assert {key: page[key] for key in expected} == pytest.approx(expected)
    assert page["avg_sm_active_pct"] is None  # not measured
    assert (page["max_mem_used_bytes"], page["mem_total_bytes"]) == (50 * GIB, 80 * GIB)

    gpu0, gpu1 = page["gpu_list"]
    assert [(g["host"], g["gpu_index"], g["gpu_uuid"]) for g in (gpu0, gpu1)] == [
        ("node1", 0, "GPU-0"),
        ("node1", 1, "GPU-1"),
    ]
    assert (gpu0["gpu_hours"], gpu0["idle_gpu_hours"]) == pytest.approx((3.0, 0.75))
    assert gpu0["avg_util_pct"] == pytest.approx(100 * 1.8 / 3)
    assert (gpu0["max_mem_used_bytes"], gpu1["max_mem_used_bytes"]) == (50 * GIB, 20 * GIB)
    assert [(h["day"], h["hour"]) for h in gpu0["hours"]] == [
        ("2026-11-16", hour) for hour in (10, 11, 12, 13)
    ]
    assert [h["avg_util_pct"] for h in gpu0["hours"]] == pytest.approx([80, 20, 80, 80])
    assert [h["avg_util_pct"] for h in gpu1["hours"]] == pytest.approx([40, 40, 100 / 3, 40])
    assert [h["gpu_hours"] for h in gpu1["hours"]] == pytest.approx([59 / 60, 1, 1, 1 / 60])

    assert page["idle_stretches"] == [
        {
            "host": "node1",
            "gpu_index": 0,
            "gpu_uuid": "GPU-0",
            "start_ts": _at(11).isoformat(),
            "end_ts": _at(11, 45).isoformat(),
            "idle_seconds": 2700.0,
            "is_waste": True,
            "waste_usd": pytest.approx(2.25),
        },
        {
            "host": "node1",
            "gpu_index": 1,
            "gpu_uuid": "GPU-1",
            "start_ts": _at(12).isoformat(),
            "end_ts": _at(12, 10).isoformat(),
            "idle_seconds": 600.0,
            "is_waste": False,
            "waste_usd": 0.0,
        },
    ]


def test_the_text_page_shows_the_gpus_hours_sparklines_and_idle_stretches(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _job(data_dir, capsys, "4807074")
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "job 4807074 at site tiger"
    assert lines[1].strip() == (
        "user alice, team vision, account vis-acct, partition gpu, state COMPLETED"
    )
    assert lines[2].strip() == (
        "ran from Mon 2026-11-16 10:00 to Mon 2026-11-16 13:00 (UTC), 3 h 00 min"
    )
    assert _line(out, "GPUs ").endswith("2 (NVIDIA H100 80GB HBM3), 2 with samples")
    assert _line(out, "GPU-hours ").endswith("6.00 observed, 6.00 allocated")
    assert _line(out, "GPU utilization ").endswith(
        "48.9 % (busy 2.93 of 6.00 GPU-hours with a utilization)"
    )
    assert _line(out, "SM activity ").endswith("not measured")
    assert _line(out, "idle ").endswith(
        "0.92 GPU-hours (15 % of its GPU-hours), below 5 % utilization"
    )
    assert _line(out, "waste ").endswith("0.75 GPU-hours, $2.25 (idle stretches of 30 min or more)")
    assert _line(out, "memory peak ").endswith("50.0 of 80 GiB (62 %)")
    assert _line(out, "energy ").endswith("2.16 kWh")
    assert _line(out, "node1 GPU 0  GPU-0").split()[3:] == [
        "GPU-0", "NVIDIA", "H100", "80GB", "HBM3", "3.00", "60", "%", "not", "measured",
        "0.75", "50.0", "of", "80", "GiB", "(62", "%)",
    ]  # fmt: skip
    # one character an hour: 80, 20, 80, 80 % and 40, 40, 33, 40 %
    assert _line(out, "node1 GPU 0  util").endswith("util  ▇▂▇▇")
    assert _line(out, "node1 GPU 1  util").endswith("util  ▄▄▃▄")
    assert _line(out, "Utilization by hour").startswith(
        "Utilization by hour, from Mon 2026-11-16 10:00 (UTC); one character an hour"
    )
    assert _line(out, "SM activity:") == "SM activity: not measured"
    assert _line(out, "Idle stretches") == "Idle stretches (2; waste: 30 min or more)"
    waste = _line(out, "node1 GPU 0  Mon").split()
    assert waste == ["node1", "GPU", "0", "Mon", "2026-11-16", "11:00", "to", "11:45", "45",
                     "min", "waste", "$2.25"]  # fmt: skip
    assert _line(out, "node1 GPU 1  Mon").split()[3:] == [
        "Mon", "2026-11-16", "12:00", "to", "12:10", "10", "min",
    ]  # fmt: skip


def test_a_users_jobs_of_a_week_or_a_window(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = _job(data_dir, capsys, "--user", "alice", "--week", "2026-W47", "--json")
    assert status == 0, err
    rows = json.loads(out)
    assert [row["job_id"] for row in rows] == ["4807074", "4807075"]
    first = rows[0]
    assert (first["cluster"], first["gpus"], first["state"]) == ("tiger", 2, "COMPLETED")
    assert (first["gpu_hours"], first["waste_gpu_hours"], first["waste_usd"]) == pytest.approx(
        (6.0, 0.75, 2.25)
    )
    assert first["max_mem_used_bytes"] == 50 * GIB
    assert first["start_ts"] == _at(10).isoformat()
    assert rows[1]["avg_util_pct"] == pytest.approx(100.0)

    status, out, _ = _job(data_dir, capsys, "--user", "alice", "--week", "2026-W46")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "1 job of user alice in 2026-W46"
    assert lines[2].split()[:2] == ["4700001", "–"] and "0.00" in lines[2]
    assert lines[-1] == "A job's page: gpufleet job JOBID"

    status, out, _ = _job(
        data_dir, capsys, "--user", "alice", "--since", "2026-11-16T12:30", "--until",
        "2026-11-17",
    )  # fmt: skip
    assert status == 0
    assert out.splitlines()[0] == ("2 jobs of user alice since 2026-11-16T12:30 until 2026-11-17")
    status, out, _ = _job(data_dir, capsys, "--user", "alice", "--since", "2026-11-16T13:30")
    assert [line.split()[0] for line in out.splitlines()[2:-2]] == ["4807075"]

    status, out, _ = _job(data_dir, capsys, "--user", "nobody")
    assert (status, out) == (0, "no jobs of user nobody at any time in the warehouse\n")


def test_an_unknown_job_is_one_line_and_exit_status_1(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _job(data_dir, capsys, "123") == (
        1,
        "",
        "gpufleet: error: no job 123 in the warehouse\n",
    )
    status, _, err = _job(data_dir, capsys, "4807074", "--cluster", "nowhere")
    assert status == 1 and err.startswith("gpufleet: error: unknown site 'nowhere'")
    # the Slurm record's site picks the job; a job of another id at that site is none
    assert _job(data_dir, capsys, "4807074", "--cluster", "tiger")[0] == 0
    assert _job(data_dir, capsys, "5000", "--cluster", "tiger")[2] == (
        "gpufleet: error: no job 5000 at site tiger in the warehouse\n"
    )


def test_arguments_that_do_not_go_together_are_a_usage_error(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv, message in (
        ((), "give a job id, or --user USER to list a user's jobs"),
        (("4807074", "--week", "2026-W47"), "--week list a user's jobs: give them without"),
        (("--user", "a", "--week", "2026-W47", "--since", "2026-11-01"), "--week and --since"),
    ):
        status, out, err = _job(data_dir, capsys, *argv)
        assert (status, out) == (2, "") and err.startswith(f"gpufleet: error: job: {message}")


def test_names_are_printed_printable_and_kept_exact_in_json(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = _job(data_dir, capsys, "4807076")
    assert status == 0 and "\x1b" not in out and "\x07" not in out
    assert "user eve\\x1b]0;pwn\\x07, team vision" in out
    assert _line(out, "GPUs ").endswith("1, none with samples")
    assert "No samples of this job: its GPUs are not known." in out
    assert "Idle stretches: none" in out
    status, out, _ = _job(data_dir, capsys, "4807076", "--json")
    assert "\x1b" not in out and json.loads(out)["user"] == EVIL_USER
    status, out, _ = _job(data_dir, capsys, "--user", EVIL_USER)
    assert status == 0 and "\x1b" not in out and "\x07" not in out
    assert out.splitlines()[0] == "1 job of user eve\\x1b]0;pwn\\x07 at any time"


def test_sm_activity_is_shown_where_the_marts_carry_it(data_dir: Path) -> None:
    """A warehouse whose job_efficiency has avg_sm_active_pct, and gpu_hourly the seconds
    measured and the SM-active seconds, shows them: 25 % on every hour of job 4807074."""
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as con:
        con.execute(
            """
            update gpu_hourly set activity_s = observed_s, sm_active_s = observed_s / 4;
            create table job_efficiency_rows as select * from job_efficiency;
            drop view job_efficiency;
            create view job_efficiency as
                select * replace (25.0 as avg_sm_active_pct) from job_efficiency_rows;
            """
        )
    page = load_job_page(load_config(data_dir=data_dir, environ={}), "4807074")
    assert page.avg_sm_active_pct == pytest.approx(25.0)
    assert [gpu.avg_sm_active_pct for gpu in page.gpus] == pytest.approx([25.0, 25.0])
    text = str(page)
    assert _line(text, "SM activity ").endswith("25.0 %")
    assert _line(text, "node1 GPU 0  util").endswith("▇▂▇▇")
    assert [line.strip() for line in text.splitlines() if line.strip().startswith("SM  ")] == [
        "SM    ▃▃▃▃",
        "SM    ▃▃▃▃",
    ]
    assert page.to_json()["gpu_list"][0]["hours"][0]["avg_sm_active_pct"] == pytest.approx(25)


def test_the_team_email_points_at_each_jobs_page(tmp_path: Path) -> None:
    """Each line of the text part's waste by user and job names the command that shows
    the job; the HTML says how once, under its table."""
    fx.make_warehouse(tmp_path)
    with duckdb.connect(str(tmp_path / "warehouse.duckdb")) as con:
        con.execute("create table ref_teams (team varchar, lead_email varchar, cc varchar[])")
        con.execute("insert into ref_teams values ('vision', 'lead@example.org', [])")
        # a job id is untrusted: the command line shown quotes it as one shell word
        con.execute("update idle_episodes set job_id = '77; rm -rf ~' where job_id = '42'")
    config = load_config(config_path=fx.write_config(tmp_path))
    vision = next(e for e in write_team_emails(config, fx.WEEK) if e.team == "vision")
    message = read_message(vision.path)
    text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert (
        "user alice, job 77; rm -rf ~ (1 episode on 1 GPU), SM activity not measured, "
        "details: gpufleet job '77; rm -rf ~'\n"
    ) in text
    html = message.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert "gpufleet job JOBID" in html
