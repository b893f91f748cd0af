"""The on-disk spool: each tick is appended as one JSON line before the next tick starts.

A segment file holds the ticks of one flush period (one UTC date). A `kill -9` loses at most
the tick being written; a torn last line is skipped when the segment is read back.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any

SEGMENT_SUFFIX = ".jsonl"


class Spool:
    """Append-only JSON-lines segments in one directory; one line per tick."""

    def __init__(self, *, directory: Path, fsync: bool = True) -> None:
        self.directory = directory
        self._fsync = fsync
        self._fd: int | None = None
        self._path: Path | None = None
        self.segment_date: str | None = None  # UTC date (YYYY-MM-DD) of the open segment

    @property
    def open_segment(self) -> Path | None:
        return self._path

    def append(self, records: list[dict[str, Any]], *, stamp: str, date_iso: str) -> None:
        """Append one tick. `stamp` names a new segment (e.g. the tick's UTC time).

        Raises OSError when the disk refuses; the segment is then left as it was.
        """
        if self._fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{stamp}-{secrets.token_hex(4)}{SEGMENT_SUFFIX}"
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._path = path
            self.segment_date = date_iso
        data = (json.dumps(records, separators=(",", ":")) + "\n").encode()
        size = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self._fsync:
                os.fdatasync(self._fd)
        except OSError:
            # never leave half a line for the next tick to be glued onto
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)
            raise

    def rotate(self) -> None:
        """Close the open segment; the next append starts a new one."""
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None
        self._path = None
        self.segment_date = None

    def closed_segments(self) -> list[Path]:
        """Segments not open for appending, oldest first (leftovers of a killed run included)."""
        if not self.directory.is_dir():
            return []
        return sorted(
            p
            for p in self.directory.iterdir()
            if p.suffix == SEGMENT_SUFFIX and p != self._path and not p.name.startswith(".")
        )


def read_segment(path: Path) -> list[dict[str, Any]]:
    """The records of a segment; a torn or garbled line (a kill mid-write) is skipped."""
    records: list[dict[str, Any]] = []
    with path.open("rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break  # the tick in progress when the process died
            try:
                tick = json.loads(line)
            except ValueError:
                continue
            if isinstance(tick, list):
                records.extend(r for r in tick if isinstance(r, dict))
    return records
