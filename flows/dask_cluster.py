"""The Dask cluster the fan-outs of a flow run share (`[compute] dask`, docs/dask.md).

`DaskCluster(config)` holds prefect-dask's `DaskTaskRunner` for one flow run: with `local:N` a
`LocalCluster` of N workers forked from a process that imported their modules once
(local_cluster.py), started as the run's first fan-out starts (an ingest's loads, then its
compaction, and in a cycle the full build, run on it, not on one cluster each) and closed
with the run; with `tcp://host:port` the scheduler there.
"""

from __future__ import annotations

import contextlib
from types import TracebackType
from typing import Any

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.flows.local_cluster import forked_workers, local_cluster_kwargs

EXTRA = "pip install 'gpufleet[dask]'"


def _api_url(*, configured: bool = False) -> str | None:
    """The Prefect server this process reports to: a temporary one too, unless `configured`."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    if url or configured:
        return str(url) if url else None
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    return server.api_url if server.running else None


def _task_runner(config: Config) -> Any:
    """prefect-dask's DaskTaskRunner for `[compute] dask` (the cluster starts on first use)."""
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError as exc:
        raise GpufleetError(f"[compute] dask = {config.compute.dask!r} needs {EXTRA}") from exc
    workers = config.compute.local_workers
    if workers is None:
        if not _api_url(configured=True):
            raise GpufleetError(
                f"[compute] dask = {config.compute.dask!r} needs a Prefect server that its "
                "workers reach too: set PREFECT_API_URL here and on every Dask worker"
            )
        return DaskTaskRunner(address=config.compute.scheduler)
    # Without PREFECT_API_URL each worker process would start a Prefect server of its own.
    url = _api_url()
    env = {"PREFECT_API_URL": url} if url else {}
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs=local_cluster_kwargs(workers, env),
    )


class DaskCluster:
    """The task runner of one flow run's fan-outs (`with DaskCluster(config) as cluster`):
    started on first use (`runner`), for `local:N` a `LocalCluster` whose workers the
    forkserver forks (local_cluster.py), and closed with the block. Nothing starts when no
    fan-out runs."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._running = contextlib.ExitStack()
        self._runner: Any = None

    def runner(self) -> Any:
        """The entered `DaskTaskRunner`: the cluster started, or connected to, once."""
        if self._runner is None:
            if self.config.compute.local_workers is not None:
                self._running.enter_context(forked_workers())
            self._runner = self._running.enter_context(_task_runner(self.config))
        return self._runner

    def __enter__(self) -> DaskCluster:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._runner = None
        self._running.__exit__(kind, exc, traceback)


def cluster_workers(config: Config) -> int:
    """The workers of the cluster at `tcp://host:port` now, or N of `local:N`."""
    if config.compute.local_workers is not None:
        return config.compute.local_workers
    try:
        from distributed import Client
    except ImportError as exc:
        raise GpufleetError(f"[compute] dask = {config.compute.dask!r} needs {EXTRA}") from exc
    try:
        with Client(config.compute.scheduler, timeout=10) as client:
            return max(1, len(client.scheduler_info()["workers"]))
    except OSError as exc:  # TimeoutError too
        raise GpufleetError(
            f"[compute] dask: no Dask scheduler answers at {config.compute.scheduler} ({exc!r})"
        ) from exc
