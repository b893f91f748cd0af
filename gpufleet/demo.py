"""`gpufleet demo` (`make demo`): simulate a fleet's week, import its Slurm jobs, ingest,
build, report, say where.

The steps are the plain functions the flows wrap, so the demo needs no Prefect server and
spends its time on the data (`flows/demo.py` runs the same steps as a Prefect flow).
The simulated cluster is a Slurm cluster: the simulation writes the saved output of
`sacct --json` and `squeue --json` taken at the end of its span, and `gpufleet import
slurm` turns it into allocation rows (the jobs still running, whose GPUs squeue names)
and job records (every job); the finished jobs' GPUs come from the collectors' gpustat
evidence in the samples (`alloc_job_id`), as on a real cluster.
Running it again is safe and quicker: when the warehouse already holds samples of the
simulated span, the simulation is skipped (rewriting files that ingest has loaded would
make them "changed after load"), the import adds nothing (it keys each job by its id and
start), ingest finds nothing new, and build and report rewrite their outputs.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.integrations.slurm import import_slurm
from gpufleet.notices.idle import DRY_RUN, notify_idle
from gpufleet.reports.team import TeamEmail, write_team_emails
from gpufleet.reports.weekly import ReportFiles, report_dir, write_atomically, write_report
from gpufleet.simulate.fleet import SimulationSpec, simulate_fleet
from gpufleet.simulate.slurm import SACCT_FILE, SLURM_FOLDER, SQUEUE_FILE
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import connect_read_only
from gpufleet.weeks import last_complete_week, week_bounds, week_monday

Progress = Callable[[str], None]

DEMO_SEED = 7
HISTORY_WEEKS = 3  # whole weeks before the reported one: changes and trends have data
# Four weeks of 128 GPUs load and build in under 3 minutes on 2 cores with 30 s samples in
# half-hour collector files (10 million samples in 21,500 files).
DEMO_INTERVAL_S = 30.0
DEMO_FLUSH_S = 1800.0
NOTICES_PREVIEW_NAME = "idle-notices-dry-run.txt"


@dataclass(frozen=True, kw_only=True)
class DemoFiles:
    """What the demo wrote."""

    report: ReportFiles
    team_emails: tuple[TeamEmail, ...]
    notices_path: Path


def samples_in_span(config: Config, start: dt.datetime, end: dt.datetime) -> int:
    """How many samples the warehouse already holds in [start, end) (0 without a warehouse)."""
    if not config.warehouse_path.is_file():
        return 0
    with connect_read_only(config) as con:
        try:
            row = con.execute(
                "select count(*) from samples where ts >= ? and ts < ?", [start, end]
            ).fetchone()
        except duckdb.CatalogException:  # a warehouse without the raw tables yet
            return 0
    return int(row[0]) if row else 0


def demo_spec(
    config: Config, *, week: str, gpus: int, days: int, history_weeks: int
) -> SimulationSpec:
    """The simulated span: `history_weeks` whole weeks before `week` and `days` days of it."""
    return SimulationSpec.from_cli(
        config=config,
        gpus=gpus,
        gpus_per_host=8,
        week=week,
        start=week_monday(week) - dt.timedelta(weeks=history_weeks),
        days=7 * history_weeks + days,
        interval_s=DEMO_INTERVAL_S,
        flush_s=DEMO_FLUSH_S,
        seed=DEMO_SEED,
    )


def simulate_demo(
    config: Config,
    *,
    week: str,
    gpus: int = 128,
    days: int = 7,
    history_weeks: int = HISTORY_WEEKS,
    progress: Progress = print,
) -> str:
    """Simulate `history_weeks` whole weeks before `week` and `days` days of it, with the
    saved sacct/squeue output of its Slurm jobs, unless the warehouse already holds that
    span; says which."""
    spec = demo_spec(config, week=week, gpus=gpus, days=days, history_weeks=history_weeks)
    present = samples_in_span(config, spec.start, spec.end)
    if present:
        return (
            f"{config.data_dir} already holds {present:,} samples of that span: not simulating "
            "them again (remove the data directory for a fresh demo)"
        )
    summary = simulate_fleet(spec, data_dir=config.data_dir, progress=progress, slurm="json")
    return str(summary)


def import_demo_jobs(config: Config, *, at: dt.datetime, progress: Progress = print) -> str:
    """`gpufleet import slurm --sacct-json ... --squeue-json ...` of the simulated Slurm
    output (saved at `at`, the end of the span), as its one-line summary."""
    folder = config.data_dir / SLURM_FOLDER
    sacct, squeue = folder / SACCT_FILE, folder / SQUEUE_FILE
    if not sacct.is_file():  # a data directory simulated with allocation files
        return f"import slurm: no {sacct}: nothing to import"
    result = import_slurm(config, sacct_json=sacct, squeue_json=squeue, now=at, warn=progress)
    return str(result)


def write_demo_notices(config: Config, week: str, day: dt.date) -> Path:
    """The idle notices `day` would send, as a dry run's text, written beside the week's
    report (nothing is sent or recorded)."""
    run = notify_idle(config, day=day, mode=DRY_RUN)
    path = report_dir(config, week) / NOTICES_PREVIEW_NAME
    write_atomically(path, (str(run) + "\n").encode("utf-8"))
    return path


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
    notices = write_demo_notices(config, week, last_simulated)
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
