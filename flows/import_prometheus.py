"""The `import-prometheus` flow, and its deployment every 15 minutes: what is new in the
site's Prometheus (dcgm-exporter) becomes sample files and allocation rows, three minutes
before each run of the ingest-and-build cycle loads them. The work is
`gpufleet.integrations.prometheus`'s."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.states import Failed

from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.flows.schedules import import_schedule

PROMETHEUS_DEPLOYMENT = "every-15-minutes"


@flow(name="import-prometheus", log_prints=False)
def import_prometheus_flow(
    data_dir: str = "data", config_path: str | None = None, url: str | None = None
) -> str:
    """Import what is new since the last import (`url`, else `[prometheus] url`)."""
    # when the flow runs, not when serve imports this module for the deployment
    from gpufleet.integrations.prometheus import import_prometheus

    try:
        config = load_config(config_path=config_path, data_dir=data_dir)
        result = import_prometheus(config, url=url, progress=get_run_logger().info)
    except GpufleetError as exc:
        # Prefect raises `exc` to the caller and logs the one line, not a traceback.
        return Failed(message=str(exc), data=exc)  # type: ignore[return-value]
    return str(result)


def prometheus_deployment(
    config: Config, *, parameters: dict[str, Any], before: object
) -> RunnerDeployment:
    """The import on `import_schedule`: every 15 minutes, 3 before each run of `before`
    (the ingest-and-build deployment)."""
    deployment = import_prometheus_flow.to_deployment(
        name=PROMETHEUS_DEPLOYMENT,
        schedule=import_schedule(before, timezone=config.timezone),
        parameters={**parameters, "url": None},
        concurrency_limit=1,
        description=(
            f"Import what is new in Prometheus ({config.prometheus.url}) every 15 minutes, "
            "before the ingest-and-build cycle loads it."
        ),
        tags=["gpufleet"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    assert isinstance(deployment, RunnerDeployment)
    return deployment


if __name__ == "__main__":
    print(import_prometheus_flow())
