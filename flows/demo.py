"""The `demo` flow: simulate a fleet's weeks, import its Slurm jobs, then the ingest, build
and report flows.

`gpufleet demo` (`make demo`) runs the same steps as plain functions
(`gpufleet.demo.run_demo_steps`) without starting a Prefect server; this flow shows them as
one flow run with its subflows in the Prefect UI: `python -m flows.demo`.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from gpufleet.config import Config, load_config
from gpufleet.flows.build import build_flow
from gpufleet.flows.ingest import ingest_flow
from gpufleet.flows.report import report_flow
from gpufleet.reports.notices_preview import write_notices_preview
from gpufleet.reports.run import ReportResult
from gpufleet.simulate.demo import HISTORY_WEEKS, demo_spec, import_demo_jobs, simulate_demo
from gpufleet.weeks import last_complete_week, week_monday


@task(name="simulate-fleet", cache_policy=NO_CACHE)
def simulate_task(config: Config, week: str, gpus: int, days: int, history_weeks: int) -> str:
    """Write the simulated weeks' sample and reference files and their saved Slurm output."""
    return simulate_demo(config, week=week, gpus=gpus, days=days, history_weeks=history_weeks)


@task(name="import-slurm", cache_policy=NO_CACHE)
def import_slurm_task(config: Config, at: dt.datetime) -> str:
    """`import slurm` of the saved sacct and squeue output: allocation rows and job records."""
    return import_demo_jobs(config, at=at)


@task(name="preview-idle-notices", cache_policy=NO_CACHE)
def preview_notices_task(config: Config, week: str, day: dt.date) -> Path:
    """Write a dry run of the day's idle notices beside the week's report."""
    return write_notices_preview(config, week, day)


@flow(name="demo", log_prints=True)
def demo_flow(
    data_dir: str = "data",
    config_path: str | None = None,
    gpus: int = 128,
    days: int = 7,
    history_weeks: int = HISTORY_WEEKS,
) -> ReportResult:
    """Simulate the weeks up to the last complete one into `data_dir`, import its Slurm
    jobs, ingest, build, and write its report, the teams' emails and a dry run of its last
    day's idle notices."""
    config = load_config(config_path=config_path, data_dir=data_dir)
    week = last_complete_week(config.timezone)
    print(simulate_task(config, week, gpus, days, history_weeks))
    spec = demo_spec(config, week=week, gpus=gpus, days=days, history_weeks=history_weeks)
    print(import_slurm_task(config, spec.end))
    print(ingest_flow(data_dir, config_path))
    print(build_flow(data_dir, config_path))
    result = report_flow(data_dir, config_path, week=week, per_team=True)
    print(preview_notices_task(config, week, week_monday(week) + dt.timedelta(days=days - 1)))
    return result


if __name__ == "__main__":
    print(demo_flow())
