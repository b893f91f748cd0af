"""`gpufleet demo`, and with it the whole pipeline: simulate -> ingest -> build -> report.

A small fleet (8 GPUs, the command's 7 days of the last complete week and 3 weeks before it)
goes through the real simulator, `import slurm` of its saved sacct/squeue output, ingest, SQL
models and report; the page is then opened in headless Chromium. The command runs once for
the module (`demo_run`); the tests read what it printed and wrote, and one runs it again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple

import pytest

from gpufleet.cli import main
from gpufleet.config import load_config
from gpufleet.demo import run_demo
from gpufleet.reports.data import load_week
from gpufleet.reports.mail import read_message
from gpufleet.simulate.demo import HISTORY_WEEKS
from gpufleet.warehouse.publish import connect_read_only
from gpufleet.weeks import last_complete_week, week_monday
from tests.test_browser import BlackHoleProxy, rendered_dom

pytestmark = pytest.mark.slow

GPUS = 8
DAYS = 7  # the command's, as HISTORY_WEEKS


class DemoRun(NamedTuple):
    data_dir: Path
    status: int
    out: str  # what it printed: where its outputs are
    err: str  # its progress lines


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """`gpufleet demo --gpus 8` into a folder of the module's, run once for its tests. The
    test that runs the demo again over it changes none of what the other one reads."""
    data_dir = tmp_path_factory.mktemp("demo") / "data"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["--data-dir", str(data_dir), "demo", "--gpus", str(GPUS)])
    return DemoRun(data_dir, status, out.getvalue(), err.getvalue())


def _slurm_files(data_dir: Path) -> dict[str, bytes]:
    """What `import slurm` wrote: allocation files and job records, by path."""
    raw = data_dir / "raw"
    files = [*raw.glob("allocations/*.csv"), *raw.glob("jobs/*.csv")]
    return {path.relative_to(raw).as_posix(): path.read_bytes() for path in files}


def test_demo_runs_the_whole_pipeline_and_again(demo_run: DemoRun, tmp_path: Path) -> None:
    data_dir = demo_run.data_dir
    config = load_config(data_dir=data_dir, environ={})
    week = last_complete_week(config.timezone)

    assert demo_run.status == 0
    out = demo_run.out.splitlines()
    messages = demo_run.err.splitlines()
    page = (data_dir / "reports" / week / "index.html").resolve()
    email = page.parent / "report.eml"
    notices = page.parent / "idle-notices-dry-run.txt"
    team_emails = sorted((page.parent / "teams").glob("*.eml"))
    assert out[:2] == [f"report page:  {page}", f"report email: {email}"]
    assert out[2].startswith(f"team email:   {page.parent / 'teams'}/")
    assert out[3] == f"idle notices: {notices} (dry run)"
    assert page.is_file() and email.is_file() and team_emails
    assert {read_message(path)["To"] for path in team_emails} <= {
        f"{team}-lead@example.org" for team in ("vision", "nlp", "speech", "research", "platform")
    }
    preview = notices.read_text()
    assert "dry run: nothing written, sent or recorded" in preview
    last_day = week_monday(week) + dt.timedelta(days=DAYS - 1)  # the last one simulated
    summary = re.search(rf"idle notices for {last_day} \(UTC\): (\d+) notices?,", preview)
    assert summary and int(summary.group(1)) > 0, preview[-2000:]
    steps = [m.split("] ", 1)[1] for m in messages if m.startswith("[")]
    assert steps[0].startswith(f"simulating {GPUS} GPUs from ")
    assert f"({HISTORY_WEEKS} weeks before {week} and {DAYS} days of it" in steps[0]
    assert any(step.startswith("ingest: ") for step in steps)
    assert any(" build (" in step for step in steps)
    assert steps[-1].startswith(f"done: gpufleet weekly report {week}: $")

    # the Slurm side comes from `import slurm` of the simulated sacct/squeue output: the
    # running jobs' allocation rows and a record of every job, nothing written by simulate
    imported = next(step for step in steps if step.startswith("import slurm: "))
    sacct_jobs = json.loads((data_dir / "slurm" / "sacct.json").read_text())["jobs"]
    assert f"import slurm: {len(sacct_jobs)} jobs from " in imported
    slurm_files = _slurm_files(data_dir)
    assert any(name.startswith("allocations/slurm-sim-") for name in slurm_files)
    assert any(name.startswith("jobs/slurm-sim-") for name in slurm_files)
    assert all(re.fullmatch(r"(allocations|jobs)/slurm-sim-[\d-]+\.csv", n) for n in slurm_files)
    with connect_read_only(config) as con:
        records = con.execute("select count(*), count(distinct job_id) from slurm_jobs").fetchall()
        # finished jobs by the gpustat evidence (no allocation row), and no Slurm job's
        # samples left to its processes
        by_evidence, by_process = con.execute(
            """
            select count(*) filter (where attributed_by = 'allocation'
                                    and job_id not in (select job_id from allocations)),
                count(*) filter (where attributed_by = 'process'
                                 and job_id in (select job_id from slurm_jobs))
            from samples_attributed
            """
        ).fetchall()[0]
        least_efficient = con.execute("select count(*) from job_efficiency").fetchall()
    assert records == [(len(sacct_jobs), len(sacct_jobs))]
    assert by_evidence > 0 and by_process == 0 and least_efficient[0][0] > 0
    assert "Least efficient jobs" in page.read_text()

    first = load_week(config, week)
    assert first.totals.gpus_seen == GPUS
    # 8 GPUs x 7 days, less the simulated collector gap (at most 1.5 hours of one host)
    assert GPUS * DAYS * 24 - 8 * 1.5 - 0.1 <= first.totals.gpu_hours <= GPUS * DAYS * 24 + 0.1
    assert first.totals.waste_usd > 0 and first.totals.thermal_events > 0
    assert first.previous.gpu_hours == pytest.approx(GPUS * 7 * 24, rel=0.02)  # the week before
    assert not (first.waste_jobs.is_empty() or first.teams.is_empty() or first.heatmap.is_empty())
    assert read_message(email)["Subject"].startswith(f"gpufleet weekly report {week}: $")

    # again, over the same data directory: the same numbers, nothing loaded twice
    messages.clear()
    assert run_demo(config, gpus=GPUS, progress=messages.append) == 0
    second = load_week(config, week)
    assert asdict(second.totals) == pytest.approx(asdict(first.totals))
    assert second.teams["team"].to_list() == first.teams["team"].to_list()
    assert second.teams["waste_usd"].to_list() == pytest.approx(first.teams["waste_usd"].to_list())
    assert any("not simulating them again" in m for m in messages), messages
    assert any(" 0 new samples" in m for m in messages), messages
    assert any(" 0 allocation rows added, 0 closed" in m for m in messages), messages
    assert _slurm_files(data_dir) == slurm_files  # imported again: nothing added or rewritten
    with connect_read_only(config) as con:
        assert con.execute("select count(*) from slurm_jobs").fetchall() == [(len(sacct_jobs),)]
    assert second.quarantined_total == 0  # no file was rewritten under ingest's feet

    # and the page of real data renders in the browser
    proxy = BlackHoleProxy()
    try:
        _, parsed = rendered_dom(page, proxy, tmp_path / "profile")
    finally:
        proxy.close()
    assert parsed.body.get("data-charts") == "rendered", parsed.body
    assert parsed.body.get("data-charts-rendered") == parsed.body.get("data-charts-expected")
    assert all(int(attrs.get("data-marks") or 0) > 0 for attrs in parsed.charts.values())


def test_demo_command_prints_where_the_report_is(demo_run: DemoRun) -> None:
    assert demo_run.status == 0
    week = last_complete_week("UTC")
    page = (demo_run.data_dir / "reports" / week / "index.html").resolve()
    assert f"report page:  {page}" in demo_run.out
    assert f"report email: {page.parent / 'report.eml'}" in demo_run.out
    assert "simulating 8 GPUs from " in demo_run.err  # progress goes to stderr
    assert f"(3 weeks before {week} and 7 days of it" in demo_run.err
    assert page.is_file()


def test_the_demo_flow_runs_the_same_steps_as_prefect_flows(
    tmp_path: Path, prefect_harness: None
) -> None:
    from gpufleet.flows.demo import demo_flow

    data_dir = tmp_path / "data"
    result = demo_flow(str(data_dir), None, gpus=8, days=1, history_weeks=0)
    week = last_complete_week("UTC")
    folder = data_dir / "reports" / week
    assert result.page_path == folder / "index.html" and result.page_path.is_file()
    assert result.team_emails and all(email.path.is_file() for email in result.team_emails)
    assert (
        "dry run: nothing written, sent or recorded"
        in (folder / "idle-notices-dry-run.txt").read_text()
    )
