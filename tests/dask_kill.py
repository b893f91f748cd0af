"""A Dask worker killed as a task starts, as the files in a folder say (tests/test_dask.py).

`KillAtStart(folder)` is a WorkerPlugin registered on a test's cluster: when a worker is
about to execute the task of a full build's partition, a compaction task or a load task, it
looks in `folder` for a file named after it (`partition-N`, `compact-N`, `load-N`, N the
item's 0-based index). A file `<name>` kills the worker process on every try; a file
`<name>.once` kills it once (the file goes first: the retry lives). The scheduler keeps the
plugin and gives it to each worker that starts later, the restarted ones too.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from distributed import Worker
from distributed.diagnostics.plugin import WorkerPlugin

from gpufleet.warehouse.build.partition import Partition
from gpufleet.warehouse.ingest.fanned import LoadTask
from gpufleet.warehouse.lake.fanout import CompactTask

KINDS = {Partition: "partition", CompactTask: "compact", LoadTask: "load"}


def task_name(item: object) -> str | None:
    """The kill file's name for a task's one parameter (None: no task of ours)."""
    if not isinstance(item, Partition | CompactTask | LoadTask):
        return None
    return f"{KINDS[type(item)]}-{item.index}"


class KillAtStart(WorkerPlugin):
    """Kill the worker process as it starts a task whose kill file is in `folder`."""

    name = "gpufleet-test-kill-at-start"
    idempotent = True

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder)
        self.worker: Worker | None = None

    def setup(self, worker: Worker) -> None:
        self.worker = worker

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish != "executing" or self.worker is None:
            return
        task = self.worker.state.tasks.get(key)
        # prefect-dask's client submits `run_task_sync(task=..., parameters={name: item})`
        parameters = getattr(task.run_spec, "kwargs", {}).get("parameters") if task else None
        for item in (parameters or {}).values():
            name = task_name(item)
            if name is None:
                continue
            once = Path(self.folder) / f"{name}.once"
            if once.exists():
                once.unlink()
            elif not (Path(self.folder) / name).exists():
                continue
            os.kill(os.getpid(), signal.SIGKILL)  # as if the machine took the worker
