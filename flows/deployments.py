"""The deployments `gpufleet serve` runs, with their schedules and parameters:

- `ingest-and-build/every-15-minutes`: load new raw files every 15 minutes, and update the
  models (incrementally) when that ingest loaded something, both in one warehouse
  transaction, so the warehouse file is copied and published once per run;
- `weekly-report/monday-0700`: the last complete week's report, emailed, every Monday at
  07:00 in the configured time zone, or, with sites in other zones, in the zone whose week
  ends last (gpufleet/flows/schedules.py);
- `idle-notices/daily-0800`: yesterday's idle notices, sent, every day at 08:00 in the
  configured time zone; with sites in other zones, one more per zone
  (`daily-0800-America-Los_Angeles`), each at 08:00 there for the sites there;
- `import-prometheus/every-15-minutes` (when `[prometheus] url` is set): what is new in
  Prometheus, three minutes before each ingest-and-build run;
- `import-slurm/every-15-minutes` (when `[slurm] enabled = true`): Slurm's jobs as
  allocation rows, three minutes before each ingest-and-build run.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any, cast

from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.schedules import Interval
from prefect.settings import PREFECT_API_URL

from gpufleet.config import Config
from gpufleet.flows.import_prometheus import prometheus_deployment
from gpufleet.flows.import_slurm import slurm_deployment
from gpufleet.flows.ingest_and_build import ingest_and_build
from gpufleet.flows.notify import idle_notices_flow
from gpufleet.flows.report import report_flow
from gpufleet.flows.schedules import notice_zones, notices_schedule, report_schedule

INGEST_EVERY = dt.timedelta(minutes=15)
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
    weekly = report_schedule(config)
    report = report_flow.to_deployment(
        name=REPORT_DEPLOYMENT,
        schedule=weekly,
        parameters={**_location(config), "week": None, "send": True, "per_team": True},
        concurrency_limit=1,
        description=(
            f"Email the last complete week's report every Monday at 07:00 ({weekly.timezone})."
        ),
        tags=["gpufleet"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    built = [ingest, report]
    for zone in notice_zones(config):
        where = f" for the sites in {zone}" if zone else ""
        built.append(
            idle_notices_flow.to_deployment(
                name=_notices_name(config, zone),
                schedule=notices_schedule(config, zone),
                parameters={**_location(config), "day": None, "send": True}
                | ({"zone": zone} if zone else {}),
                concurrency_limit=1,
                description=(
                    f"Email yesterday's idle-GPU notices{where} every day at 08:00 "
                    f"({zone or config.timezone})."
                ),
                tags=["gpufleet"],
                entrypoint_type=EntrypointType.MODULE_PATH,
            )
        )
    if config.prometheus.url:
        built.append(prometheus_deployment(config, parameters=_location(config), before=ingest))
    if config.slurm.enabled:
        built.append(slurm_deployment(config, parameters=_location(config), before=ingest))
    assert all(isinstance(deployment, RunnerDeployment) for deployment in built)
    return cast(list[RunnerDeployment], built)


def _notices_name(config: Config, zone: str | None) -> str:
    """`daily-0800` for the configured zone's notices, `daily-0800-<zone>` for another's."""
    if zone is None or zone == config.timezone:
        return NOTICES_DEPLOYMENT
    return f"{NOTICES_DEPLOYMENT}-{zone.replace('/', '-')}"


def say_serving(deployments: list[RunnerDeployment], url: str | None) -> None:
    """Tell the operator, on stderr, the deployments served, on which server, and when."""
    where = (
        f"a temporary Prefect server at {url}, which stops with it"
        if url
        else f"the Prefect server at {PREFECT_API_URL.value()}"
    )
    lines = [f"gpufleet serve: {len(deployments)} deployments on {where}:"]
    for deployment in deployments:
        for schedule in deployment.schedules or []:
            lines.append(f"  {deployment.flow_name}/{deployment.name}: {_when(schedule.schedule)}")
    lines.append("SIGINT (Ctrl-C) or SIGTERM stops it.")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _when(schedule: Any) -> str:
    interval = getattr(schedule, "interval", None)
    if interval is not None:
        return f"every {interval.total_seconds() / 60:g} minutes"
    return f"cron {schedule.cron!r} ({schedule.timezone})"
