"""What the integrations share in writing files: a file replaced whole, written under a
temporary `.` name of its own in the same folder, flushed to disk, then renamed over the
old one, so that a reader sees the old file or the new one, never part of either, and two
processes replacing it at once each rename their own whole file (the last rename wins)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gpufleet.errors import GpufleetError


def write_text_atomically(path: Path, text: str) -> None:
    """`text` into `path` (its folder made if need be); a file that cannot be written is
    one GpufleetError line naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_lines(path, [text])
    except OSError as exc:
        raise GpufleetError(f"cannot write {path}: {exc.strerror or exc}") from exc


def replace_lines(path: Path, lines: Iterable[str]) -> None:
    """`path` holds `lines` (each ending in a newline) and nothing else."""
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as out:
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
