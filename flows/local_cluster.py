"""`[compute] dask = "local:N"`: a Dask `LocalCluster` whose worker processes start from one
that has imported their modules already (docs/dask.md).

Spawned, distributed's default, each worker process imports distributed, Prefect, DuckDB and
gpufleet anew: about 2 s of CPU a worker, for each cluster. In `forked_workers()` the nannies
start their workers with Python's forkserver instead (`distributed.worker.multiprocessing-
method`): the forkserver imports `PRELOAD` once, when this process starts its first worker,
and forks every later worker of this process, a restarted one included, from that state.

Prefect reads its settings, the server's address among them, when it is imported: the
forkserver imported it with this process's environment, before the nanny set the worker's
PREFECT_API_URL, so each worker reads them again as it starts (`dask_setup`, which
distributed runs in the worker as its preload: `local_cluster_kwargs`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

# What the forkserver imports: what a worker runs (the tasks' modules import the engine,
# DuckDB and pyarrow), the Prefect engine that runs it, and this process's main module,
# which a worker imports too (as `__mp_main__`, as a spawned one does).
PRELOAD = (
    "__main__",
    "distributed",
    "prefect",
    "prefect.task_engine",
    "prefect_dask",
    "gpufleet.flows.fanout",
    "gpufleet.flows.compact",
    __name__,
)
START_METHOD = "distributed.worker.multiprocessing-method"


@contextlib.contextmanager
def forked_workers() -> Iterator[None]:
    """Dask worker processes started in this block (by a nanny of this process) are forked
    from the forkserver, which imports `PRELOAD` when it starts."""
    import dask
    from distributed.utils import get_mp_context

    with dask.config.set({START_METHOD: "forkserver"}):
        # distributed sets the forkserver's preload on its first call, once per process:
        # what to import, set after it, is this list (the forkserver, once started, keeps
        # what it imported).
        get_mp_context().set_forkserver_preload(list(PRELOAD))
        yield


def local_cluster_kwargs(workers: int, env: dict[str, str]) -> dict[str, Any]:
    """`LocalCluster`'s arguments for `local:N`: N worker processes of one thread each, their
    Prefect settings read again as they start (`dask_setup`). A forked worker's environment
    is the forkserver's, this process's when the forkserver started: each is given this
    process's as it is now, as a spawned one inherits it (credentials set since included;
    a variable unset since stays set), and `env` over it."""
    return {
        "n_workers": workers,
        "threads_per_worker": 1,
        "processes": True,
        "dashboard_address": None,
        "env": {**os.environ, **env},
        "preload": [__name__],
    }


def dask_setup(worker: Any) -> None:
    """Run in each worker process as it starts (distributed's preload): Prefect's settings
    from the environment its nanny set, not the forkserver's."""
    from prefect.context import refresh_global_settings_context

    refresh_global_settings_context()
