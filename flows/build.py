"""The `build` flow: bring the marts up to date (`gpufleet.warehouse.build` does the work)."""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from gpufleet.config import Config, load_config
from gpufleet.flows.fanout import dask_fan_out
from gpufleet.warehouse.build import BuildResult, build


@task(name="build-models", cache_policy=NO_CACHE)
def build_models_task(config: Config, full: bool = False) -> BuildResult:
    """Run sql/ (staging, intermediate, marts) into the warehouse; with `[compute] dask`, a
    full build's per-series models as `build-partition` tasks on Dask (flows/fanout.py)."""
    return build(config, full=full, fan_out=dask_fan_out(config) if config.compute.dask else None)


@flow(name="build", log_prints=False)
def build_flow(
    data_dir: str = "data", config_path: str | None = None, full: bool = False
) -> BuildResult:
    """Bring the marts up to date with the warehouse's raw tables (incrementally if possible)."""
    config = load_config(config_path=config_path, data_dir=data_dir)
    return build_models_task(config, full)


if __name__ == "__main__":
    print(build_flow())
