"""What the importers share in writing files."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from gpufleet.errors import GpufleetError


def write_text_atomically(path: Path, text: str) -> None:
    """`text` into `path`: a temporary `.` name, fsync, rename; nothing partial is visible."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise GpufleetError(f"cannot write {path}: {exc.strerror or exc}") from exc
