"""Quarantine: the raw files an ingest could not load, recorded and moved aside.

Each goes to `<data_dir>/quarantine/<its relative path>` (a UTC time stamp added to the name
if that is taken), is listed in `quarantined_files`, and is named in a warning. The move
happens after the publish, so a failed ingest moves nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.console import printable

QUARANTINE_CHANGED = "changed after load"
logger = logging.getLogger("gpufleet.ingest")


class QuarantineWarning(UserWarning):
    """A raw file could not be loaded and was moved to quarantine/."""


@dataclass(frozen=True)
class QuarantinedFile:
    path: str  # where it was found, relative to the data directory
    reason: str
    moved_to: str  # where it goes, relative to the data directory

    def __str__(self) -> str:
        """The line that names it (names escaped: `gpufleet.console`)."""
        return f"quarantined {printable(self.path)}: {printable(self.reason)}"


def quarantine_destination(config: Config, path: str, now: dt.datetime) -> str:
    """Where a quarantined file goes: quarantine/<its relative path>, made unique if taken."""
    target = Path("quarantine") / path
    if (config.data_dir / target).exists():
        stamp = now.strftime("%Y%m%dT%H%M%S%fZ")
        target = target.with_name(f"{target.stem}.{stamp}{target.suffix}")
    return target.as_posix()


def record_quarantined(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    bad: Sequence[tuple[str, str]],
    now: dt.datetime,
) -> tuple[QuarantinedFile, ...]:
    """Add the files to `quarantined_files`; returns them with their destinations. A file
    no longer there is not quarantined: it was not loaded, and there is nothing to move
    (another ingest compacted or quarantined it after this one listed it)."""
    items = tuple(
        QuarantinedFile(path, reason, quarantine_destination(config, path, now))
        for path, reason in bad
        if (config.data_dir / path).exists()
    )
    if items:
        ts = pa.timestamp("us", tz="UTC")
        table = pa.table(
            {
                "path": pa.array([q.path for q in items], pa.string()),
                "reason": pa.array([q.reason for q in items], pa.string()),
                "quarantined_at": pa.array([now] * len(items), ts),
                "moved_to": pa.array([q.moved_to for q in items], pa.string()),
            }
        )
        con.register("_ingest_quarantined", table)
        try:
            con.execute(
                "insert into quarantined_files (path, reason, quarantined_at, moved_to) "
                "select * from _ingest_quarantined"
            )
        finally:
            con.unregister("_ingest_quarantined")
    return items


def move_to_quarantine(
    config: Config,
    quarantined: Sequence[QuarantinedFile],
    *,
    warn: Callable[[str], None] | None = None,
) -> None:
    """Move each quarantined file to its destination (after the publish) and report it once:
    to `warn` (a flow's run logger) where given, else as a log line of gpufleet.ingest and
    a QuarantineWarning (for code that calls the engine)."""
    for item in quarantined:
        source = config.data_dir / item.path
        target = config.data_dir / item.moved_to
        message = str(item)
        if source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)
        if warn is not None:
            warn(message)
        else:
            logger.warning(message)
            warnings.warn(message, QuarantineWarning, stacklevel=2)
