"""`gpufleet demo` (`make demo`): simulate a fleet's week, ingest, build, report, say where.

The steps are the plain functions the flows wrap, so the demo needs no Prefect server and
spends its time on the data (`flows/demo.py` runs the same steps as a Prefect flow).
Running it again is safe and quicker: when the warehouse already holds samples of the
simulated span, the simulation is skipped (rewriting files that ingest has loaded would
make them "changed after load"), ingest finds nothing new, and build and report rewrite
their outputs.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

import duckdb

from gpufleet.config import Config
from gpufleet.simulate.fleet import SimulationSpec, simulate_fleet
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.slots import connect_read_only
from gpufleet.weeks import last_complete_week, week_bounds
from reports.weekly import ReportFiles, write_report

Progress = Callable[[str], None]

DEMO_SEED = 7


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


def simulate_demo(
    config: Config, *, week: str, gpus: int = 128, days: int = 7, progress: Progress = print
) -> str:
    """Simulate `days` days of `week` unless the warehouse already holds that span; says which."""
    spec = SimulationSpec.from_cli(
        config=config,
        gpus=gpus,
        gpus_per_host=8,
        week=week,
        start=None,
        days=days,
        interval_s=10.0,
        flush_s=600.0,
        seed=DEMO_SEED,
    )
    present = samples_in_span(config, spec.start, spec.end)
    if present:
        return (
            f"{config.data_dir} already holds {present:,} samples of that span: not simulating "
            "them again (remove the data directory for a fresh demo)"
        )
    return str(simulate_fleet(spec, data_dir=config.data_dir, progress=progress))


def run_demo_steps(
    config: Config, *, gpus: int = 128, days: int = 7, progress: Progress = print
) -> ReportFiles:
    """Simulate `days` days of the last complete week, then ingest, build and report it."""
    week = last_complete_week(config.timezone)
    start, end = week_bounds(week, config.timezone)
    last_day = (end - dt.timedelta(days=1)).date()
    started = time.monotonic()

    def step(message: str) -> None:
        progress(f"[{time.monotonic() - started:5.1f} s] {message}")

    step(
        f"simulating {gpus} GPUs for {days} day{'s' if days > 1 else ''} of {week} "
        f"({start:%a %d %b} - {last_day:%a %d %b %Y}, {config.timezone}) into {config.data_dir}"
    )
    step(simulate_demo(config, week=week, gpus=gpus, days=days, progress=progress))
    step("loading new files into the warehouse")
    step(str(ingest(config, progress=progress)))
    step("building the models")
    step(str(build(config)))
    step(f"writing the report for {week}")
    files = write_report(config, week)
    step(f"done: {files.subject}")
    return files


def run_demo(config: Config, *, gpus: int = 128, days: int = 7, progress: Progress = print) -> int:
    """The `demo` command: runs the steps and prints the page's and the email's paths."""
    files = run_demo_steps(config, gpus=gpus, days=days, progress=progress)
    print(f"report page:  {files.page_path.resolve()}")
    print(f"report email: {files.email_path.resolve()}")
    return 0
