"""A full build's partitions as Prefect tasks on a Dask cluster (`[compute] dask`, docs/dask.md).

`dask_fan_out(config)` is the `FanOut` the build flow passes into the engine
(gpufleet/warehouse/build/fanout.py): its `run` submits one `build-partition` task per GPU
range to prefect-dask's `DaskTaskRunner` (dask_cluster.py: a `LocalCluster` started for the
build with `local:N`, or for all the fan-outs of a flow run; the scheduler at `tcp://host:port`
otherwise), waits for all, and fails in one line on the first that fails, the published
warehouse unchanged. An ingest's compaction fans out the same way (flows/compact.py).
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.flows.dask_cluster import DaskCluster, cluster_workers
from gpufleet.warehouse.build.fanout import FanOut
from gpufleet.warehouse.build.memory import BUILD_MEMORY_LIMIT
from gpufleet.warehouse.build.partition import Partition, PartitionResult, run_partition

Each = Callable[[Any], Any] | None  # what `run_on_dask` puts each result through as it comes


@task(name="build-partition", cache_policy=NO_CACHE)
def build_partition_task(partition: Partition) -> PartitionResult:
    """One GPU range of the per-series models, written as Parquet partials."""
    return run_partition(partition)


def one_line(failed: str, label: str, exc: BaseException, unchanged: str) -> str:
    """The error of a task (`label`) that failed or whose worker died on every try."""
    if type(exc).__name__ == "KilledWorker":
        why = "died (killed, or out of memory) on every try"
        return f"{failed}: the Dask worker of {label} {why}; {unchanged}"
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{failed}: {label} on a Dask worker: {type(exc).__name__}: {text}; {unchanged}"


def run_on_dask(
    config: Config,
    task: Any,
    items: Sequence[Any],
    failed: str,
    unchanged: str,
    each: Each = None,
    cluster: DaskCluster | None = None,
) -> list[Any]:
    """`task` of each item (its one parameter, which has a `label`) on Dask (on `cluster`,
    or a cluster of this call's own), the results in the items' order, each put through
    `each` as it comes (its future let go: it holds it); on the first that fails (the rest
    are cancelled) a GpufleetError of one line: what `failed`, the item, why, and what stays
    `unchanged`."""
    from distributed import as_completed

    (name,) = inspect.signature(task.fn).parameters
    results: dict[int, Any] = {}
    with contextlib.ExitStack() as own:
        runner = (cluster or own.enter_context(DaskCluster(config))).runner()
        futures = {
            id(future.wrapped_future): (position, item, future)
            for position, item in enumerate(items)
            for future in [runner.submit(task, {name: item})]
        }
        waiting = [future.wrapped_future for *_, future in futures.values()]
        for done in as_completed(waiting, loop=runner.client.loop):
            position, item, future = futures.pop(id(done))
            try:
                results[position] = each(future.result()) if each else future.result()
            except Exception as exc:
                runner.client.cancel(waiting)  # the rest would only be thrown away
                raise GpufleetError(one_line(failed, item.label, exc, unchanged)) from exc
    return [results[position] for position in range(len(items))]


def worker_limits(config: Config) -> dict[str, Any]:
    """Each worker's DuckDB `threads` and `memory_limit`: `local:N` shares this machine's
    cores and, per worker, the embedded build's cap; a cluster's workers have their own."""
    if (local := config.compute.local_workers) is None:
        return {}
    return {
        "threads": max(1, (os.cpu_count() or 1) // local),
        "memory_limit": f"{BUILD_MEMORY_LIMIT}B",
    }


def dask_fan_out(config: Config, cluster: DaskCluster | None = None) -> FanOut:
    """The fan-out of a configuration whose `[compute] dask` is set (on `cluster`, shared
    with the run's other fan-outs, or a cluster of its own)."""
    failed, unchanged = "full build failed", "the published warehouse is unchanged"
    return FanOut(
        config=config,
        run=lambda items: run_on_dask(
            config, build_partition_task, items, failed, unchanged, cluster=cluster
        ),
        workers=lambda: cluster_workers(config),
        **worker_limits(config),
    )
