"""gpufleet: who is using our GPUs, how well, and what the idle time costs.

For analysts: `gpufleet.open("data")` gives the published warehouse's marts as polars
DataFrames (`gpufleet.analyst.ReadOnlyWarehouse`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufleet.analyst import ReadOnlyWarehouse

__version__ = "0.1.0"

# polars' allocator (its own jemalloc, which reads this variable once, when polars loads)
# by default hands the pages a batch freed back to the system within moments, and the next
# batch of an ingest faults them in again, spending the read's CPU time in the kernel. Kept
# for 30 s, they are reused. A value already set wins.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:30000,muzzy_decay_ms:30000")


def open(
    data_dir: str | Path | None = None, *, config: str | Path | None = None
) -> ReadOnlyWarehouse:
    """The published warehouse of `data_dir`, read-only; marts come back as polars DataFrames.

    Imported lazily: `gpufleet collect` on a GPU host has no pipeline packages.
    """
    from gpufleet.analyst import ReadOnlyWarehouse

    return ReadOnlyWarehouse.open(data_dir, config=config)
