"""`gpufleet demo` (`make demo`): simulate a fleet's week, import its Slurm jobs, ingest,
build, report, say where.

The steps are the plain functions the flows wrap, so the demo needs no Prefect server and
spends its time on the data (`flows/demo.py` runs the same steps as a Prefect flow). The
simulated fleet and its Slurm jobs are `gpufleet.simulate.demo`'s.
Running it again is safe and quicker: the simulation is skipped and the import adds nothing
when the warehouse already holds the span, ingest finds nothing new, and build and report
rewrite their outputs.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from pathlib import Path

from gpufleet.config import Config
from gpufleet.reports.notices_preview import write_notices_preview
from gpufleet.reports.team import TeamEmail, write_team_emails
from gpufleet.reports.weekly import ReportFiles, write_report
from gpufleet.simulate.demo import (
    HISTORY_WEEKS,
    Progress,
    demo_spec,
    import_demo_jobs,
    simulate_demo,
)
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.weeks import last_complete_week, week_bounds


@dataclass(frozen=True, kw_only=True)
class DemoFiles:
    """What the demo wrote."""

    report: ReportFiles
    team_emails: tuple[TeamEmail, ...]
    notices_path: Path


def run_demo_steps(
    config: Config,
    *,
    gpus: int = 128,
    days: int = 7,
    history_weeks: int = HISTORY_WEEKS,
    progress: Progress = print,
) -> DemoFiles:
    """Simulate the weeks up to the last complete one, import its Slurm jobs, ingest, build,
    and write its report, the teams' emails and a dry run of the last day's idle notices."""
    week = last_complete_week(config.timezone)
    start, end = week_bounds(week, config.timezone)
    first = start - dt.timedelta(weeks=history_weeks)
    last_day = (end - dt.timedelta(days=1)).date()
    started = time.monotonic()

    def step(message: str) -> None:
        progress(f"[{time.monotonic() - started:5.1f} s] {message}")

    step(
        f"simulating {gpus} GPUs from {first:%a %d %b} to {last_day:%a %d %b %Y} "
        f"({history_weeks} week{'s' * (history_weeks != 1)} before {week} and {days} "
        f"day{'s' * (days != 1)} of it, "
        f"{config.timezone}) into {config.data_dir}"
    )
    step(
        simulate_demo(
            config, week=week, gpus=gpus, days=days, history_weeks=history_weeks, progress=progress
        )
    )
    spec = demo_spec(config, week=week, gpus=gpus, days=days, history_weeks=history_weeks)
    step(
        "importing the Slurm jobs from the saved sacct and squeue output: running jobs' "
        "GPUs from squeue, finished ones' from the collectors' gpustat evidence"
    )
    step(import_demo_jobs(config, at=spec.end, progress=progress))
    step("loading new files into the warehouse")
    step(str(ingest(config, progress=progress)))
    step("building the models")
    step(str(build(config)))
    step(f"writing the report for {week}")
    report = write_report(config, week)
    step("writing each team's email to its lead")
    teams = write_team_emails(config, week)
    last_simulated = min(last_day, start.date() + dt.timedelta(days=days - 1))
    step(f"previewing the idle notices of {last_simulated} (dry run)")
    notices = write_notices_preview(config, week, last_simulated)
    step(f"done: {report.subject}")
    return DemoFiles(report=report, team_emails=tuple(teams), notices_path=notices)


def run_demo(
    config: Config,
    *,
    gpus: int = 128,
    days: int = 7,
    history_weeks: int = HISTORY_WEEKS,
    progress: Progress = print,
) -> int:
    """The `demo` command: runs the steps and prints where their outputs are."""
    files = run_demo_steps(
        config, gpus=gpus, days=days, history_weeks=history_weeks, progress=progress
    )
    print(f"report page:  {files.report.page_path.resolve()}")
    print(f"report email: {files.report.email_path.resolve()}")
    if files.team_emails:
        team = files.team_emails[0]  # the costliest team's
        print(f"team email:   {team.path.resolve()} (team {team.team}; all in its folder)")
    print(f"idle notices: {files.notices_path.resolve()} (dry run)")
    return 0
