"""The records of a raw sample file: as found on disk, and as loaded; a listing of them.

Ingest finds and loads the files; the lake's compaction writes their host-days again. Both
name a file by these records, kept here, below both.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import NamedTuple

from gpufleet.console import printable


@dataclass(frozen=True)
class SampleFile:
    """A raw sample file as found on disk."""

    path: str  # relative to the data directory, with '/' separators
    size_bytes: int
    mtime_ns: int

    @property
    def directory(self) -> str:
        """The folder it lies in (a host-day's: raw/samples/date=D/host=H), as `path`."""
        return self.path.rsplit("/", 1)[0]


class LoadedFile(NamedTuple):
    file: SampleFile
    row_count: int  # rows read from the file, duplicates included
    min_ts: dt.datetime | None
    max_ts: dt.datetime | None


@dataclass(frozen=True)
class Unreadable:
    """A folder (or file) below raw/samples that the listing could not read."""

    path: str  # relative to the data directory, with '/' separators
    reason: str  # the system's words: "permission denied", "input/output error"
    is_folder: bool = True

    def __str__(self) -> str:
        """The line that names it (its name escaped: `gpufleet.console`)."""
        what = "the sample files below it are" if self.is_folder else "it is"
        return f"{printable(self.path)}: cannot be read ({self.reason}): {what} not loaded"


@dataclass(frozen=True)
class SampleListing:
    """The sample files found below raw/samples, and what could not be read there."""

    files: list[SampleFile]  # sorted by path
    unreadable: tuple[Unreadable, ...] = ()
