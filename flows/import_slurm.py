"""The `import-slurm` flow, and its deployment every 15 minutes: the jobs sacct and squeue
know become allocation rows, three minutes before each run of the ingest-and-build cycle
loads them. `gpufleet serve` adds it when `[slurm] enabled = true`. The work is
`gpufleet.integrations.slurm`'s."""

from __future__ import annotations

import datetime as dt
from typing import Any

from prefect import flow, get_run_logger
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.states import Failed

from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.flows.schedules import import_schedule

FIRST_WINDOW = dt.timedelta(days=1)  # the first scheduled run, with no watermark yet
SLURM_DEPLOYMENT = "every-15-minutes"


@flow(name="import-slurm", log_prints=False)
def import_slurm_flow(data_dir: str = "data", config_path: str | None = None) -> str:
    """Import the jobs since the last import (the last day, the first time)."""
    # when the flow runs, not when serve imports this module for the deployment
    from gpufleet.integrations.slurm import import_slurm

    try:
        config = load_config(config_path=config_path, data_dir=data_dir)
        logger = get_run_logger()
        result = import_slurm(config, first_window=FIRST_WINDOW, warn=logger.warning)
    except GpufleetError as exc:
        # Prefect raises `exc` to the caller and logs the one line, not a traceback.
        return Failed(message=str(exc), data=exc)  # type: ignore[return-value]
    return str(result)


def slurm_deployment(
    config: Config, *, parameters: dict[str, Any], before: object
) -> RunnerDeployment:
    """The import on `import_schedule`: every 15 minutes, 3 before each run of `before`
    (the ingest-and-build deployment)."""
    deployment = import_slurm_flow.to_deployment(
        name=SLURM_DEPLOYMENT,
        schedule=import_schedule(before, timezone=config.timezone),
        parameters=parameters,
        concurrency_limit=1,
        description=(
            "Import Slurm's jobs (sacct, squeue) as allocation rows every 15 minutes, before "
            "the ingest-and-build cycle loads them."
        ),
        tags=["gpufleet"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    assert isinstance(deployment, RunnerDeployment)
    return deployment


if __name__ == "__main__":
    print(import_slurm_flow())
