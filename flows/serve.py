"""`gpufleet serve`: the Prefect deployments and their schedules, served from this process.

- `ingest-and-build/every-15-minutes`: load new raw files every 15 minutes, and update the
  models (incrementally) when that ingest loaded something, both in one warehouse
  transaction, so the warehouse file is copied and published once per run;
- `weekly-report/monday-0700`: the last complete week's report, emailed, every Monday at
  07:00 in the configured time zone;
- `idle-notices/daily-0800`: yesterday's idle notices, sent, every day at 08:00 in the
  configured time zone;
- `import-prometheus/every-15-minutes` (when `[prometheus] url` is set): what is new in
  Prometheus, three minutes before each ingest-and-build run;
- `import-slurm/every-15-minutes` (when `[slurm] enabled = true`): Slurm's jobs as
  allocation rows, three minutes before each ingest-and-build run.

Runs are executed by this process (Prefect's `serve`), against the Prefect API that
$PREFECT_API_URL names (a `prefect server start`), or a temporary local one without it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from prefect import serve as prefect_serve
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.schedules import Cron, Interval

from gpufleet.config import Config
from gpufleet.flows.import_prometheus import prometheus_deployment
from gpufleet.flows.import_slurm import slurm_deployment
from gpufleet.flows.ingest_and_build import ingest_and_build
from gpufleet.flows.notify import idle_notices_flow
from gpufleet.flows.report import report_flow

INGEST_EVERY = dt.timedelta(minutes=15)
REPORT_CRON = "0 7 * * 1"  # Monday 07:00
NOTICES_CRON = "0 8 * * *"  # every day 08:00
INGEST_DEPLOYMENT = "every-15-minutes"
REPORT_DEPLOYMENT = "monday-0700"
NOTICES_DEPLOYMENT = "daily-0800"


def _location(config: Config) -> dict[str, Any]:
    """The parameters that point a run at this data directory and config file."""
    return {
        "data_dir": str(config.data_dir.resolve()),
        "config_path": str(config.source.resolve()) if config.source else None,
    }


def build_deployments(config: Config) -> list[RunnerDeployment]:
    """The deployments `gpufleet serve` runs, with their schedules and parameters."""
    ingest = ingest_and_build.to_deployment(
        name=INGEST_DEPLOYMENT,
        schedule=Interval(INGEST_EVERY, timezone=config.timezone),
        parameters=_location(config),
        concurrency_limit=1,
        description="Load new raw files every 15 minutes; rebuild the models when any loaded.",
        tags=["gpufleet"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    report = report_flow.to_deployment(
        name=REPORT_DEPLOYMENT,
        schedule=Cron(REPORT_CRON, timezone=config.timezone),
        parameters={**_location(config), "week": None, "send": True, "per_team": True},
        concurrency_limit=1,
        description=(
            f"Email the last complete week's report every Monday at 07:00 ({config.timezone})."
        ),
        tags=["gpufleet"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    notices = idle_notices_flow.to_deployment(
        name=NOTICES_DEPLOYMENT,
        schedule=Cron(NOTICES_CRON, timezone=config.timezone),
        parameters={**_location(config), "day": None, "send": True},
        concurrency_limit=1,
        description=f"Email yesterday's idle-GPU notices every day at 08:00 ({config.timezone}).",
        tags=["gpufleet"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    built = [ingest, report, notices]
    if config.prometheus.url:
        built.append(prometheus_deployment(config, parameters=_location(config), before=ingest))
    if config.slurm.enabled:
        built.append(slurm_deployment(config, parameters=_location(config), before=ingest))
    assert all(isinstance(deployment, RunnerDeployment) for deployment in built)
    return cast(list[RunnerDeployment], built)


def serve(config: Config) -> int:
    """Register the deployments and run their scheduled runs until interrupted."""
    prefect_serve(*build_deployments(config))
    return 0
