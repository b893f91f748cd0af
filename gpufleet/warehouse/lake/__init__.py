"""The Parquet lake: completed host-days compacted into one file each (from their files, on
Dask workers with `[compute] dask`, or ahead, from the rows a backfill loads), and the
`samples` view over the warehouse's rows and the files the built days' rows were evicted
to."""

from gpufleet.warehouse.lake.compact import CompactionResult, compact_completed_days
from gpufleet.warehouse.lake.compact_ahead import CompactAhead
from gpufleet.warehouse.lake.fanout import CompactFanOut
from gpufleet.warehouse.lake.samples import evict_built_days, refresh_samples_view

__all__ = [
    "CompactAhead",
    "CompactFanOut",
    "CompactionResult",
    "compact_completed_days",
    "evict_built_days",
    "refresh_samples_view",
]
