"""The `ingest` flow: list the new raw files, load them in one published transaction,
then move the bad ones to quarantine/; the run fails, after all that, when the raw location
is missing or no new file arrived in time. The work is `gpufleet.warehouse.ingest`'s."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.states import Failed, State
from prefect.tasks import Task

from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.flows.compact import dask_compact_fan_out, dask_load_fan_out
from gpufleet.flows.dask_cluster import DaskCluster
from gpufleet.integrations.mirror import mirror_raw_location
from gpufleet.warehouse.ingest import (
    IngestResult,
    QuarantinedFile,
    SampleListing,
    list_sample_files,
    load_warehouse,
    move_to_quarantine,
)
from gpufleet.warehouse.lake.content import replaced_in
from gpufleet.warehouse.refs import References, published_allocation_files, read_references


def _is_io_error(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry only when the task failed on an OSError (disk, NFS), nothing else."""
    try:
        state.result()
    except OSError:
        return True
    except Exception:
        return False
    return False


@task(
    name="find-sample-files",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=5,
    retry_condition_fn=_is_io_error,
)
def find_sample_files_task(config: Config) -> SampleListing:
    """List the visible Parquet files under raw/samples, and what could not be read."""
    return list_sample_files(config)


@task(name="load-warehouse", cache_policy=NO_CACHE)
def load_warehouse_task(
    config: Config, references: References, listing: SampleListing
) -> IngestResult:
    """Load new samples and the reference tables in one published transaction; with
    `[compute] dask`, a backfill's whole host-days read and compacted as `load-host-days`
    tasks and the other host-days compacted from their files as `compact-host-days` tasks
    on Dask (flows/compact.py), both on one cluster."""
    dask = bool(config.compute.dask)
    with DaskCluster(config) as cluster:  # started by the first fan-out that runs, if any
        return load_warehouse(
            config,
            references,
            listing.files,
            unreadable=listing.unreadable,
            progress=get_run_logger().info,
            compact_fan_out=dask_compact_fan_out(config, cluster) if dask else None,
            load_fan_out=dask_load_fan_out(config, cluster) if dask else None,
        )


@task(
    name="quarantine-files",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=5,
    retry_condition_fn=_is_io_error,
)
def quarantine_files_task(config: Config, quarantined: tuple[QuarantinedFile, ...]) -> None:
    """Move quarantined files to quarantine/ and warn about each."""
    move_to_quarantine(config, quarantined, warn=get_run_logger().warning)


@flow(name="ingest", log_prints=False)
def ingest_flow(data_dir: str = "data", config_path: str | None = None) -> IngestResult:
    """Load new raw sample files, the reference files and the allocations."""
    try:
        config = load_config(config_path=config_path, data_dir=data_dir)
        # raw_location = "s3://...": its new files into raw/, or left for the Dask workers
        mirror_raw_location(config, defer=bool(config.compute.dask), replaced=replaced_in)
        # Plain call, not a task: a bad file must fail in one line, without a traceback.
        references = read_references(config, known=published_allocation_files(config))
    except GpufleetError as exc:
        # Prefect raises `exc` to the caller and logs the one line, not a traceback.
        return Failed(message=str(exc), data=exc)  # type: ignore[return-value]
    listing = find_sample_files_task(config)
    result = load_warehouse_task(config, references, listing)
    quarantine_files_task(config, result.quarantined)
    if result.input_problem:
        # The good files are loaded and published: the run fails visibly, in one line.
        get_run_logger().info(str(result))
        problem = GpufleetError(result.input_problem)
        return Failed(message=str(problem), data=problem)  # type: ignore[return-value]
    return result


if __name__ == "__main__":
    print(ingest_flow())
