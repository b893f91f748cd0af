"""The `ingest-and-build` flow the 15-minute deployment runs: load new raw files, and
update the models when anything was loaded, in one warehouse transaction; then fail when the
raw location is missing or no new file arrived in time (the models are updated first).

The engine (duckdb, sqlglot, pyarrow) is imported when the flow runs, not with this module:
`gpufleet serve` imports it for the deployment alone."""

from __future__ import annotations

from prefect import flow, get_run_logger
from prefect.states import Failed

from gpufleet.config import load_config
from gpufleet.errors import GpufleetError


@flow(name="ingest-and-build", log_prints=False)
def ingest_and_build(data_dir: str = "data", config_path: str | None = None) -> str:
    """Load new raw files; update the models when the ingest loaded anything (samples, refs)."""
    from gpufleet.flows.compact import dask_compact_fan_out, dask_load_fan_out
    from gpufleet.flows.dask_cluster import DaskCluster
    from gpufleet.flows.fanout import dask_fan_out
    from gpufleet.warehouse.cycle import ingest_then_build

    try:
        config = load_config(config_path=config_path, data_dir=data_dir)
        logger = get_run_logger()
        dask = config.compute.dask
        with DaskCluster(config) as cluster:  # one for the run's fan-outs, if any runs
            ingested, built = ingest_then_build(
                config,
                progress=logger.info,
                warn=logger.warning,
                fan_out=dask_fan_out(config, cluster) if dask else None,
                compact_fan_out=dask_compact_fan_out(config, cluster) if dask else None,
                load_fan_out=dask_load_fan_out(config, cluster) if dask else None,
            )
    except GpufleetError as exc:
        # Prefect raises `exc` to the caller and logs the one line, not a traceback.
        return Failed(message=str(exc), data=exc)  # type: ignore[return-value]
    summary = f"{ingested}\n{built if built else 'build: skipped, nothing new was loaded'}"
    if ingested.input_problem:
        logger.info(summary)  # what was loaded and built before the run fails
        problem = GpufleetError(ingested.input_problem)
        return Failed(message=str(problem), data=problem)  # type: ignore[return-value]
    return summary


if __name__ == "__main__":
    print(ingest_and_build())
