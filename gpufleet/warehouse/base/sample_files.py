"""The records of a raw sample file: as found on disk, and as loaded.

Ingest finds and loads the files; the lake's compaction writes their host-days again. Both
name a file by these records, kept here, below both.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class SampleFile:
    """A raw sample file as found on disk."""

    path: str  # relative to the data directory, with '/' separators
    size_bytes: int
    mtime_ns: int


class LoadedFile(NamedTuple):
    file: SampleFile
    row_count: int  # rows read from the file, duplicates included
    min_ts: dt.datetime | None
    max_ts: dt.datetime | None
