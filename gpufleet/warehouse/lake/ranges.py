"""Which of the lake's files may hold samples of a range of GPUs, by their footers.

A full build computes the per-series models a range of GPUs (gpu_uuid) at a time
(`build/full.py`; a Dask partition: `build/fanout.py`). A compacted file holds one host's
UTC day sorted by gpu_uuid, so the gpu_uuid statistics of its row groups say which GPUs it
may hold. A slice that named every file of the lake opened every footer and weighed every
row group, however few it read: that cost grows with slices x files, the square of the
retained samples (about 0.3 ms per file a slice, measured at 250 GPUs x 28 days). A slice
now names only the files whose row groups' ranges meet its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import duckdb

from gpufleet.warehouse.base.raw_tables import literal_path
from gpufleet.warehouse.base.sql_text import literal
from gpufleet.warehouse.lake.samples import LakeFiles


@dataclass(frozen=True)
class UuidRanges:
    """The lake files and, of each, its row groups' (min, max) gpu_uuid; a file missing
    from `ranges` (a row group without statistics) may hold any GPU."""

    files: LakeFiles
    ranges: Mapping[str, tuple[tuple[str, str], ...]]

    def holding(self, first: str, last: str) -> dict[str, int]:
        """The files that may hold a sample of a GPU in [first, last], as `files` has them."""
        return {
            path: held
            for path, held in self.files.items()
            if (spans := self.ranges.get(path)) is None
            or any(low <= last and first <= high for low, high in spans)
        }


def uuid_ranges(con: duckdb.DuckDBPyConnection, files: LakeFiles) -> UuidRanges:
    """The row groups' gpu_uuid ranges of `files`, from their footers (one read of each)."""
    if not files:
        return UuidRanges(files, {})
    listed = ", ".join(literal(literal_path(path)) for path in files)
    rows = con.execute(
        f"""
        select file_name, stats_min_value, stats_max_value
        from parquet_metadata([{listed}])
        where path_in_schema = 'gpu_uuid'
        """
    ).fetchall()
    spans: dict[str, list[tuple[str, str]]] = {}
    unknown: set[str] = set()
    for path, low, high in rows:
        if low is None or high is None:
            unknown.add(path)
        else:
            spans.setdefault(path, []).append((low, high))
    ranges = {path: tuple(found) for path, found in spans.items() if path not in unknown}
    return UuidRanges(files, ranges)
