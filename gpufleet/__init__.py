"""gpufleet: who is using our GPUs, how well, and what the idle time costs.

For analysts: `gpufleet.open("data")` gives the published warehouse's marts as polars
DataFrames (`gpufleet.analyst.ReadOnlyWarehouse`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufleet.analyst import ReadOnlyWarehouse

__version__ = "0.1.0"


def open(
    data_dir: str | Path | None = None, *, config: str | Path | None = None
) -> ReadOnlyWarehouse:
    """The published warehouse of `data_dir`, read-only; marts come back as polars DataFrames.

    Imported lazily: `gpufleet collect` on a GPU host has no pipeline packages.
    """
    from gpufleet.analyst import ReadOnlyWarehouse

    return ReadOnlyWarehouse.open(data_dir, config=config)
