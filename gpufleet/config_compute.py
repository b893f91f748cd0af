"""`[compute]`: where a full build's per-GPU-range work, and an ingest's compaction of
host-days from their files, run (docs/dask.md).

`dask = ""` runs it in the pipeline's own DuckDB (the default); `local:N` on a Dask
`LocalCluster` of N worker processes on this machine; `tcp://host:port` on the Dask cluster
whose scheduler listens there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufleet.config import Config

_LOCAL = re.compile(r"^local:([1-9][0-9]{0,3})$")
_SCHEDULER = re.compile(r"^tcp://[^/\s:]+:[0-9]{1,5}$")


@dataclass(frozen=True, kw_only=True)
class ComputeConfig:
    dask: str = ""  # empty: embedded; "local:N"; "tcp://host:port"

    @property
    def local_workers(self) -> int | None:
        """N of `local:N`; None for a scheduler's address or the embedded build."""
        match = _LOCAL.match(self.dask)
        return int(match.group(1)) if match else None

    @property
    def scheduler(self) -> str | None:
        """The scheduler's address of `tcp://host:port`, else None."""
        return self.dask if _SCHEDULER.match(self.dask) else None


def check_compute(config: Config, fail: Callable[[str | None, str, str], Exception]) -> None:
    """`[compute] dask` (`fail(section, key, problem)` makes the error to raise)."""
    dask = config.compute.dask
    if dask and not (_LOCAL.match(dask) or _SCHEDULER.match(dask)):
        raise fail(
            "compute",
            "dask",
            f"'compute.dask' must be empty, local:N (N worker processes here) or "
            f"tcp://host:port (a Dask scheduler), got {dask!r}",
        )
