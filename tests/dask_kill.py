"""A Dask worker preload for tests/test_dask.py: a worker killed as the machine would take it.

The test's LocalCluster loads this file into each worker process
(`LocalCluster(preload=[KILL_PRELOAD], env={KILL_ENV: folder})`, Dask's documented
`--preload` hook). `dask_setup` wraps the three functions a fanned-out task runs on a
worker (a build's partition, a compaction task, a backfill's load task) so that each first
looks in the folder named by KILL_ENV: a file `<name>` there kills the worker process that
starts the task of that name on every try, a file `<name>.once` kills it once (the file
goes first: the retry lives). The names are `partition-<index>`, `compact-<index>` and
`load-<index>`, the index 0-based. The folder is read at each task: the cluster outlives
one test.

The package holds no hook for this: the wrappers replace the functions in the modules that
define them before anything else on the worker imports them, so the Prefect tasks
(gpufleet/flows/fanout.py, gpufleet/flows/compact.py) call the wrappers, whether the worker
imports those modules or unpickles the tasks' functions with references to them.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

KILL_ENV = "GPUFLEET_TEST_KILL_DIR"
KILL_PRELOAD = str(Path(__file__).resolve())

# (module, function, the kill name's prefix): where each task's function is defined
WRAPPED = (
    ("gpufleet.warehouse.build.partition", "run_partition", "partition"),
    ("gpufleet.warehouse.lake.compact_task", "run_compact_task", "compact"),
    ("gpufleet.warehouse.ingest.fanned", "run_load_task", "load"),
)


def maybe_kill(name: str) -> None:
    """Die as if the machine took the worker, when KILL_ENV's folder says so for `name`."""
    folder = os.environ.get(KILL_ENV, "")
    if not folder:
        return
    once = Path(folder) / f"{name}.once"
    if once.exists():
        once.unlink()
    elif not (Path(folder) / name).exists():
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _killable(run: Callable[[Any], Any], prefix: str) -> Callable[[Any], Any]:
    """`run`, first killing the worker when the folder names its argument's task."""

    @functools.wraps(run)
    def killable(task: Any) -> Any:
        maybe_kill(f"{prefix}-{task.index}")
        return run(task)

    return killable


def dask_setup(worker: object) -> None:
    """Dask's preload entry point, run as the worker starts: wrap each function."""
    import importlib

    for name, function, prefix in WRAPPED:
        module = importlib.import_module(name)
        setattr(module, function, _killable(getattr(module, function), prefix))
