"""Which of the lake's files may hold samples of a range of GPUs, by their footers.

A full build computes the per-series models a range of GPUs (gpu_uuid) at a time
(`build/full.py`; a Dask partition: `build/fanout.py`). A compacted file holds one host's
UTC day sorted by gpu_uuid, so the gpu_uuid statistics of its row groups say which GPUs it
may hold. A slice that named every file of the lake would open every footer and weigh
every row group, however few it read: a cost that grows with slices x files, the square of
the retained samples. So a slice names only the files whose row groups' ranges meet its
own.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb

from gpufleet.warehouse.base.raw_tables import literal_path
from gpufleet.warehouse.base.sql_text import literal
from gpufleet.warehouse.lake.samples import LakeFiles


@dataclass(frozen=True)
class UuidRanges:
    """The lake files and their row groups' gpu_uuid ranges; a file without a range here
    (a row group without statistics) may hold any GPU."""

    files: LakeFiles
    known: frozenset[str]  # the files whose every row group has its range below
    # the row groups' (low, high, path), by low; `reach[i]`: the highest high of the first
    # i + 1, so that the row groups before the first whose reach meets a range end below it
    lows: tuple[str, ...]
    highs: tuple[str, ...]
    paths: tuple[str, ...]
    reach: tuple[str, ...]

    def holding(self, first: str, last: str) -> dict[str, int]:
        """The files that may hold a sample of a GPU in [first, last], as `files` has them
        (a lookup, not a pass over every row group: a full build asks once a slice)."""
        begin = bisect.bisect_left(self.reach, first)
        end = bisect.bisect_right(self.lows, last, lo=begin)
        meeting = {
            path
            for high, path in zip(self.highs[begin:end], self.paths[begin:end], strict=True)
            if high >= first
        }
        return {
            path: held
            for path, held in self.files.items()
            if path in meeting or path not in self.known
        }


def uuid_ranges(con: duckdb.DuckDBPyConnection, files: LakeFiles) -> UuidRanges:
    """The row groups' gpu_uuid ranges of `files`, from their footers (one read of each)."""
    if not files:
        return ranges_of(files, [])
    listed = ", ".join(literal(literal_path(path)) for path in files)
    rows = con.execute(
        f"""
        select file_name, stats_min_value, stats_max_value
        from parquet_metadata([{listed}])
        where path_in_schema = 'gpu_uuid'
        """
    ).fetchall()
    return ranges_of(files, rows)


def ranges_of(files: LakeFiles, rows: Iterable[tuple[str, str | None, str | None]]) -> UuidRanges:
    """`UuidRanges` of `files` from their row groups' (file, min gpu_uuid, max gpu_uuid)."""
    listed = list(rows)
    unknown = {path for path, low, high in listed if low is None or high is None}
    spans = sorted(
        (low, high, path)
        for path, low, high in listed
        if path not in unknown and low is not None and high is not None
    )
    highs = tuple(high for _, high, _ in spans)
    return UuidRanges(
        files,
        frozenset(path for _, _, path in spans),
        tuple(low for low, _, _ in spans),
        highs,
        tuple(path for _, _, path in spans),
        tuple(itertools.accumulate(highs, max)),
    )
