"""Whether sample files still arrive: the raw location there, and a new file within
`[ingest] stale_after_minutes`.

Arrival is judged by the mtimes of the collectors' files, never by the samples' own
timestamps: a backfill of last month's samples is fresh input. Compaction replaces a day's
files with one written now, so each ingest keeps the newest mtime of each host's files it
listed in `build_state.file_arrivals` (ARRIVALS_DDL), which outlives their compaction (a
warehouse from before it falls back to `loaded_files`). `gpufleet ingest` fails on a
problem once the good files are loaded and published; `gpufleet status` shows the same.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.warehouse.base.sample_files import SampleFile, Unreadable
from gpufleet.warehouse.lake.content import is_compacted

NO_FILES_YET = "no sample files yet in {}"
ARRIVALS_TABLE = "build_state.file_arrivals"
ARRIVALS_DDL = f"""
create schema if not exists build_state;
-- When each host's sample files last arrived: the newest mtime of a collector's file (not
-- a compacted one) any ingest listed in its host= folder ('' for files outside one).
create table if not exists {ARRIVALS_TABLE} (
    host varchar primary key,
    last_file_mtime_ns bigint not null
);
"""


@dataclass(frozen=True, kw_only=True)
class InputCheck:
    """What an ingest found about its input: a `problem` makes it fail, a `note` does not."""

    problem: str = ""  # one line naming the location and the newest file's time
    note: str = ""


def location_state(location: Path, files_listed: int, *, unreadable: bool = False) -> str:
    """`ok`, `unreadable` (its listing refused: `unreadable`), `missing` (gone or not a
    folder) or `empty` (no sample file below it)."""
    if unreadable:
        return "unreadable"
    if not location.is_dir():
        return "missing"
    return "ok" if files_listed else "empty"


def iso_ns(ns: int | None) -> str:
    """A file time (ns since the epoch) as ISO 8601 in UTC to the second, or `never`."""
    if ns is None:
        return "never"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="seconds")


def judge_input(
    *,
    location: Path,
    state: str,
    files_loaded_before: int,
    newest_ns: int | None,
    stale_after_minutes: int,
    now: dt.datetime,
    unreadable: Sequence[Unreadable] = (),
) -> InputCheck:
    """The verdict on the input from the location's `state`, the files ever loaded from it,
    the newest file time known (listed or loaded), and what below it could not be read.
    Nothing ever loaded is no problem: a new data directory, or the first collectors still
    to come, say so in a note. A location or a folder below it that cannot be read always
    is: its files would never load, and nothing else would say so."""
    check = _judge_arrival(
        location=location,
        state=state,
        files_loaded_before=files_loaded_before,
        newest_ns=newest_ns,
        stale_after_minutes=stale_after_minutes,
        now=now,
        unreadable=unreadable,
    )
    if not unreadable or state == "unreadable":
        return check
    first, count = unreadable[0], len(unreadable)
    what = "1 folder or file below it" if count == 1 else f"{count:,} folders or files below it"
    more = f" and {count - 1:,} more" if count > 1 else ""
    problem = (
        f"{location}: {what} cannot be read, so the sample files there are not loaded: "
        f"{printable(first.path)} ({first.reason}){more}"
    )
    return replace(check, problem="; ".join(p for p in (check.problem, problem) if p))


def _judge_arrival(
    *,
    location: Path,
    state: str,
    files_loaded_before: int,
    newest_ns: int | None,
    stale_after_minutes: int,
    now: dt.datetime,
    unreadable: Sequence[Unreadable],
) -> InputCheck:
    newest = iso_ns(newest_ns)
    if state == "unreadable":
        reason = unreadable[0].reason if unreadable else "refused"
        return InputCheck(
            problem=f"{location}: the raw samples location cannot be read ({reason}): its "
            f"sample files are not loaded; newest sample file: {newest}"
        )
    if files_loaded_before == 0:
        return InputCheck(note=NO_FILES_YET.format(location)) if state != "ok" else InputCheck()
    if state == "missing":
        return InputCheck(
            problem=f"{location}: the raw samples location is missing or not a folder (a share "
            f"not mounted?); newest sample file: {newest}"
        )
    if state == "empty":
        return InputCheck(
            problem=f"{location}: no sample file in the raw samples location, yet "
            f"{files_loaded_before:,} were loaded from it before (a share not mounted?); "
            f"newest sample file: {newest}"
        )
    if stale_after_minutes <= 0 or newest_ns is None:
        return InputCheck()
    age_minutes = (now.timestamp() - newest_ns / 1e9) / 60
    if age_minutes <= stale_after_minutes:
        return InputCheck()
    return InputCheck(
        problem=f"{location}: no new sample file for {age_minutes:,.0f} minutes (newest sample "
        f"file: {newest}; [ingest] stale_after_minutes = {stale_after_minutes})"
    )


def newest_by_host(files: Sequence[SampleFile], *, now: dt.datetime) -> dict[str, int]:
    """The newest mtime of the collectors' files listed, by host (compacted files left out:
    written by compaction; an mtime in the future, from a skewed clock, counts as `now`)."""
    cap = int(now.timestamp() * 1e9)
    newest: dict[str, int] = {}
    for file in files:
        if not is_compacted(file.path):
            host = host_of(file.path) or ""
            newest[host] = max(newest.get(host, 0), min(file.mtime_ns, cap))
    return newest


def record_arrivals(
    con: duckdb.DuckDBPyConnection, files: Sequence[SampleFile], *, now: dt.datetime
) -> None:
    """Keep the newest file time of each host listed in `build_state.file_arrivals`."""
    con.execute(ARRIVALS_DDL)
    newest = newest_by_host(files, now=now)
    if not newest:
        return
    con.register(
        "_arrivals",
        pa.table(
            {
                "host": pa.array(list(newest), pa.string()),
                "ns": pa.array(list(newest.values()), pa.int64()),
            }
        ),
    )
    try:
        con.execute(
            f"""
            insert into {ARRIVALS_TABLE} select host, ns from _arrivals
            on conflict (host) do update
            set last_file_mtime_ns = greatest(last_file_mtime_ns, excluded.last_file_mtime_ns)
            """
        )
    finally:
        con.unregister("_arrivals")


def check_input(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    files: Sequence[SampleFile],
    *,
    now: dt.datetime | None = None,
    unreadable: Sequence[Unreadable] = (),
) -> InputCheck:
    """Record when this ingest's listing says each host's files last arrived, and judge the
    input (on the ingest's connection, with its files recorded in `loaded_files`;
    `unreadable`: what the listing could not read)."""
    now = now or dt.datetime.now(dt.UTC)
    record_arrivals(con, files, now=now)
    row = con.execute(
        f"""
        select
            (select count(*) from loaded_files),
            coalesce(
                (select max(last_file_mtime_ns) from {ARRIVALS_TABLE}),
                (select max(mtime_ns) from loaded_files)
            )
        """
    ).fetchone()
    loaded, newest = (int(row[0]), row[1]) if row else (0, None)
    return judge_input(
        location=config.samples_dir,
        state=location_state(
            config.samples_dir, len(files), unreadable=root_unreadable(config, unreadable)
        ),
        files_loaded_before=loaded,
        newest_ns=newest,
        stale_after_minutes=config.ingest.stale_after_minutes,
        now=now,
        unreadable=unreadable,
    )


def root_unreadable(config: Config, unreadable: Sequence[Unreadable]) -> bool:
    """Whether raw/samples itself is among what could not be read."""
    root = config.samples_dir.relative_to(config.data_dir).as_posix()
    return any(item.path == root for item in unreadable)


def host_of(path: str) -> str | None:
    """The host of a sample file's path (its `host=` folder), or None."""
    for part in path.split("/"):
        if part.startswith("host="):
            return part.removeprefix("host=")
    return None
