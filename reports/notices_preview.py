"""The idle notices a day would send, as a dry run's text beside the week's report (what
`gpufleet demo` and the demo flow show of the notices)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from gpufleet.config import Config
from gpufleet.notices.idle import DRY_RUN, notify_idle
from gpufleet.reports.files import write_atomically
from gpufleet.reports.weekly import report_dir

NOTICES_PREVIEW_NAME = "idle-notices-dry-run.txt"


def write_notices_preview(config: Config, week: str, day: dt.date) -> Path:
    """The idle notices `day` would send, as a dry run's text, written beside the week's
    report (nothing is sent or recorded)."""
    run = notify_idle(config, day=day, mode=DRY_RUN)
    path = report_dir(config, week) / NOTICES_PREVIEW_NAME
    write_atomically(path, (str(run) + "\n").encode("utf-8"))
    return path
