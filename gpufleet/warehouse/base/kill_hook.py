"""A test hook of the Dask fan-outs (full builds, compaction): a killed worker.

`GPUFLEET_FANOUT_KILL_DIR` names a folder; a file `<name>` in it kills the worker process
that starts the task of that name on every try, a file `<name>.once` kills it once (the
file goes first: the retry lives). Read by the worker: its cluster may outlive one run.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

KILL_ENV = "GPUFLEET_FANOUT_KILL_DIR"


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
