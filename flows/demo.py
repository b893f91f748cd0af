"""The `demo` flow: simulate a fleet's week, then the ingest, build and report flows.

`gpufleet demo` (`make demo`) runs the same steps as plain functions
(`gpufleet.demo.run_demo_steps`) without starting a Prefect server; this flow shows them as
one flow run with its subflows in the Prefect UI: `python -m flows.demo`.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.build import build_flow
from flows.ingest import ingest_flow
from flows.report import ReportResult, report_flow
from gpufleet.config import Config, load_config
from gpufleet.demo import simulate_demo
from gpufleet.weeks import last_complete_week


@task(name="simulate-fleet", cache_policy=NO_CACHE)
def simulate_task(config: Config, week: str, gpus: int, days: int) -> str:
    """Write the simulated week's sample, reference and allocation files."""
    return simulate_demo(config, week=week, gpus=gpus, days=days)


@flow(name="demo", log_prints=True)
def demo_flow(
    data_dir: str = "data", config_path: str | None = None, gpus: int = 128, days: int = 7
) -> ReportResult:
    """Simulate the last complete week into `data_dir`, ingest, build and report it."""
    config = load_config(config_path=config_path, data_dir=data_dir)
    week = last_complete_week(config.timezone)
    print(simulate_task(config, week, gpus, days))
    print(ingest_flow(data_dir, config_path))
    print(build_flow(data_dir, config_path))
    return report_flow(data_dir, config_path, week=week)


if __name__ == "__main__":
    print(demo_flow())
