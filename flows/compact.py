"""An ingest's compaction from files, and a backfill's reading of whole host-days, as Prefect
tasks on a Dask cluster (`[compute] dask`).

`dask_compact_fan_out(config)` is the `CompactFanOut` the ingest flows pass into the engine
(gpufleet/warehouse/lake/fanout.py): its `run` submits one `compact-host-days` task per run
of host-days to prefect-dask's `DaskTaskRunner`, as a fanned-out build does
(flows/fanout.py), waits for all, and fails in one line on the first that fails, the
warehouse and the lake unchanged (docs/dask.md). `dask_load_fan_out(config)` is the
`LoadFanOut` whose `run` does the same with one `load-host-days` task per run of batches.
Given the same `DaskCluster`, both run on one cluster: an ingest starts one, not one each.
"""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task
from prefect.cache_policies import NO_CACHE

from gpufleet.config import Config
from gpufleet.flows.dask_cluster import DaskCluster, cluster_workers
from gpufleet.flows.fanout import run_on_dask, worker_limits
from gpufleet.warehouse.ingest.fanned import LoadFanOut, LoadTask, LoadTaskResult, run_load_task
from gpufleet.warehouse.lake.compact_task import run_compact_task
from gpufleet.warehouse.lake.fanout import CompactFanOut, CompactTask, CompactTaskResult

UNCHANGED = "the warehouse and the lake are unchanged"  # after a failed ingest


@task(name="compact-host-days", cache_policy=NO_CACHE)
def compact_host_days_task(host_days: CompactTask) -> CompactTaskResult:
    """A run of host-days, each compacted from its files into its staging directory."""
    return run_compact_task(host_days)


def dask_compact_fan_out(config: Config, cluster: DaskCluster | None = None) -> CompactFanOut:
    """The compaction fan-out of a configuration whose `[compute] dask` is set, on `cluster`
    (or one of its own), each result received as it comes (the compacted files a task read
    from the store written at once)."""

    def run(tasks: Sequence[CompactTask]) -> list[CompactTaskResult]:
        return run_on_dask(
            config,
            compact_host_days_task,
            tasks,
            "ingest failed",
            UNCHANGED,
            each=fan_out.receive,
            cluster=cluster,
        )

    fan_out = CompactFanOut(
        config=config,
        run=run,
        workers=lambda: cluster_workers(config),
        **worker_limits(config),
    )
    return fan_out


@task(name="load-host-days", cache_policy=NO_CACHE)
def load_host_days_task(batches: LoadTask) -> LoadTaskResult:
    """A run of a backfill's batches of whole host-days, each read, checked and written as
    compacted files into the host-days' staging directories."""
    return run_load_task(batches)


def dask_load_fan_out(config: Config, cluster: DaskCluster | None = None) -> LoadFanOut:
    """The load fan-out of a configuration whose `[compute] dask` is set, on `cluster` (or
    one of its own), each result received as it comes (as the compaction's)."""

    def run(tasks: Sequence[LoadTask]) -> list[LoadTaskResult]:
        return run_on_dask(
            config,
            load_host_days_task,
            tasks,
            "ingest failed",
            UNCHANGED,
            each=fan_out.receive,
            cluster=cluster,
        )

    fan_out = LoadFanOut(config=config, run=run, workers=lambda: cluster_workers(config))
    return fan_out
