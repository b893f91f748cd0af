"""Quarantine: the raw files an ingest could not load, recorded and moved aside.

Each goes to `<data_dir>/quarantine/<its relative path>` (a UTC time stamp added to the name
if that is taken), is listed in `quarantined_files`, and is named in a warning. The move
happens after the publish, so a failed ingest moves nothing.

A bad line of an allocation or job file (raw/allocations, raw/jobs) is quarantined alone:
listed with its line in the reason and no `moved_to` (the file stays, its other lines
load), once however often the file is read again while the line is there.
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
from gpufleet.warehouse.refs.records import SetAside

QUARANTINE_CHANGED = "changed after load"
logger = logging.getLogger("gpufleet.ingest")


class QuarantineWarning(UserWarning):
    """A raw file could not be loaded and was moved to quarantine/."""


@dataclass(frozen=True)
class QuarantinedFile:
    path: str  # where it was found, relative to the data directory
    reason: str  # "line 3: ..." for a line of an allocation or job file
    moved_to: str | None  # where it goes, relative to the data directory; None: one line

    def __str__(self) -> str:
        """The line that names it (names escaped: `gpufleet.console`)."""
        if self.moved_to is None:
            return (
                f"quarantined {printable(self.path)}, {printable(self.reason)} (that line is "
                "not loaded; the file's other lines are)"
            )
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
    _insert(con, items, now)
    return items


def record_set_aside(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    set_aside: Sequence[SetAside],
    now: dt.datetime,
) -> tuple[QuarantinedFile, ...]:
    """Add what the reading of the allocation and job files set aside to
    `quarantined_files`: a whole file as a sample file (moved after the publish), a line
    with no destination, unless `quarantined_files` lists that line of that file with the
    same reason already (the file was read again, changed elsewhere). Returns the new."""
    whole = record_quarantined(
        con, config, [(item.source, item.reason) for item in set_aside if item.whole_file], now
    )
    lines = [item for item in dict.fromkeys(set_aside) if not item.whole_file]
    known = set(
        con.execute(
            "select path, reason from quarantined_files where moved_to is null"
            " and path in (select unnest(?::varchar[]))",
            [sorted({item.source for item in lines})],
        ).fetchall()
    )
    new = tuple(
        QuarantinedFile(item.source, item.reason, None)
        for item in lines
        if (item.source, item.reason) not in known
    )
    _insert(con, new, now)
    return (*whole, *new)


def _insert(
    con: duckdb.DuckDBPyConnection, items: Sequence[QuarantinedFile], now: dt.datetime
) -> None:
    if not items:
        return
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


def move_to_quarantine(
    config: Config,
    quarantined: Sequence[QuarantinedFile],
    *,
    warn: Callable[[str], None] | None = None,
) -> None:
    """Move each quarantined file to its destination (after the publish; a quarantined line
    stays in its file) and report it once:
    to `warn` (a flow's run logger) where given, else as a log line of gpufleet.ingest and
    a QuarantineWarning (for code that calls the engine)."""
    for item in quarantined:
        source = config.data_dir / item.path
        message = str(item)
        if item.moved_to is not None and source.exists():
            target = config.data_dir / item.moved_to
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)
        if warn is not None:
            warn(message)
        else:
            logger.warning(message)
            warnings.warn(message, QuarantineWarning, stacklevel=2)
