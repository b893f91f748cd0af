"""Figures of this process from /proc/self/status (Linux), for the benchmarks' children."""

from __future__ import annotations

from pathlib import Path


def status_kb(field: str) -> int:
    """The field (`VmHWM`, `RssAnon`...) of /proc/self/status, in kB; 0 where there is none."""
    status = Path("/proc/self/status")
    for line in status.read_text().splitlines() if status.exists() else ():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0
