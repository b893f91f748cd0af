"""The demo's fleet (`gpufleet demo`, `flows/demo.py`): the simulated weeks, their saved
Slurm output, and its import.

The simulated cluster is a Slurm cluster: the simulation writes the saved output of
`sacct --json` and `squeue --json` taken at the end of its span, and `gpufleet import
slurm` turns it into allocation rows (the jobs still running, whose GPUs squeue names)
and job records (every job); the finished jobs' GPUs come from the collectors' gpustat
evidence in the samples (`alloc_job_id`), as on a real cluster. When the warehouse already
holds samples of the simulated span, the simulation is skipped (rewriting files that ingest
has loaded would make them "changed after load"), and the import adds nothing (it keys each
job by its id and start).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import duckdb

from gpufleet.config import Config
from gpufleet.integrations.slurm import import_slurm
from gpufleet.simulate.fleet import SimulationSpec, simulate_fleet
from gpufleet.simulate.slurm import SACCT_FILE, SLURM_FOLDER, SQUEUE_FILE
from gpufleet.warehouse.publish import connect_read_only
from gpufleet.weeks import week_monday

Progress = Callable[[str], None]

DEMO_SEED = 7
HISTORY_WEEKS = 3  # whole weeks before the reported one: changes and trends have data
# 30 s samples in half-hour collector files: four weeks of 128 GPUs are 10 million samples
# in 21,500 files, which load and build in minutes on a small machine.
DEMO_INTERVAL_S = 30.0
DEMO_FLUSH_S = 1800.0


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
        mig=True,  # a few MIG GPUs beside the whole ones
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
