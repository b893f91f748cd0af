"""The raw sample files an ingest works through, and `loaded_files`, its record of them.

Finding the files under raw/samples, telling new files from loaded ones (and from loaded
ones that changed since, judged by their content), planning batches of them, recording the
files loaded.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.warehouse.base.sample_files import LoadedFile, SampleFile
from gpufleet.warehouse.build.retention import expired_before, in_partition_before
from gpufleet.warehouse.ingest.quarantine import QUARANTINE_CHANGED
from gpufleet.warehouse.lake.content import (
    ChangedFile,
    is_compacted,
    record_same,
    same_rows_as_warehouse,
    settle_compacted,
)

logger = logging.getLogger("gpufleet.ingest")

# Two batches are read at once (`load.READ_AHEAD`): 1,000 files each keep the rows in memory
# as 2,000 did with one.
MAX_FILES_PER_BATCH = 1000


LINKED_FOLDER = (
    "{}: a symbolic link to a folder, not followed: its files are not loaded. Move the "
    "folder itself there (compaction rebuilds a host-day's folder in place)"
)


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def find_sample_files(config: Config) -> list[SampleFile]:
    """Every visible `*.parquet` below raw/samples, sorted by path (`os.scandir` with string
    paths lists 126,000 files in a third of `os.walk` with `Path`s' time).

    A folder linked in (a symbolic link) is not followed, and named in a warning:
    compaction swaps a host-day's folder for a rebuilt one, which would replace the link,
    not the folder it points to."""
    found: list[SampleFile] = []
    relative = config.samples_dir.relative_to(config.data_dir).as_posix()
    folders = [(os.fspath(config.samples_dir), relative)]  # (path, path below data_dir)
    while folders:
        directory, prefix = folders.pop()
        try:
            entries = os.scandir(directory)
        except OSError:
            continue  # gone, or not a folder: os.walk skips it alike
        with entries:
            for entry in entries:
                if _hidden(entry.name):
                    continue
                if entry.is_dir():
                    if not entry.is_symlink():
                        folders.append((entry.path, f"{prefix}/{entry.name}"))
                    else:
                        logger.warning(printable(LINKED_FOLDER.format(f"{prefix}/{entry.name}")))
                    continue
                if not entry.name.endswith(".parquet"):
                    continue
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue  # compacted or quarantined under our feet
                found.append(SampleFile(f"{prefix}/{entry.name}", stat.st_size, stat.st_mtime_ns))
    found.sort(key=lambda f: f.path)
    return found


@dataclass(frozen=True)
class Listing:
    """A listing as the write transaction finds it (after the writer lock: another ingest
    may have loaded, compacted or quarantined some of its files meanwhile)."""

    files: list[SampleFile]  # every file listed, less those gone since and those expired
    unsettled: list[SampleFile]  # those never loaded, or loaded and changed since
    warnings: tuple[str, ...] = ()  # about compacted files edited since they were loaded
    # Files in `date=` folders that retention expired (before `expired_before`): not
    # loaded, left to the next build's deletion (`build/retention.py`).
    expired: int = 0
    expired_before: dt.date | None = None


def check_listing(
    con: duckdb.DuckDBPyConnection, config: Config, files: Sequence[SampleFile]
) -> Listing:
    """Set aside the files gone since they were listed (never quarantined: a file compacted
    or quarantined by the ingest before is simply gone), and judge each loaded file found
    with another size or mtime by its content (`lake/content.py`): one that holds the same
    has its new mtime recorded; an edited compacted file is written again or named in a
    warning, never quarantined; an edited collector's file is left to quarantine. Files of
    the UTC dates retention expired are left out: loaded, the next build would only delete
    them again."""
    cut = expired_before(con)
    expired = 0
    if cut is not None:
        listed = len(files)
        files = [f for f in files if not in_partition_before(f.path, cut)]
        expired = listed - len(files)
    rows = _unsettled_rows(con, files)
    gone = _gone(config, [path for path, *_ in rows])
    by_path = {f.path: f for f in files}
    unsettled: list[SampleFile] = []
    compacted: list[ChangedFile] = []
    for path, size_bytes, mtime_ns, digest, lake_rows in rows:
        file = by_path[path]
        if path in gone:
            continue
        if size_bytes is None:  # never loaded
            unsettled.append(file)
        elif is_compacted(path):
            compacted.append(ChangedFile(file, size_bytes, mtime_ns, digest, lake_rows))
        elif file.size_bytes == size_bytes and same_rows_as_warehouse(con, config, path):
            record_same(con, file)
        else:
            unsettled.append(file)
    warnings = settle_compacted(con, config, compacted)
    for warning in warnings:
        logger.warning(printable(warning))
    kept = [f for f in files if f.path not in gone] if gone else list(files)
    return Listing(
        kept,
        sorted(unsettled, key=lambda f: f.path),
        tuple(warnings),
        expired=expired,
        expired_before=cut if expired else None,
    )


def _unsettled_rows(
    con: duckdb.DuckDBPyConnection, files: Sequence[SampleFile]
) -> list[tuple[Any, ...]]:
    """(path, and as loaded: size, mtime, content hash, rows in the lake) of each
    listed file never loaded (NULLs) or loaded at another size or mtime."""
    con.register("_ingest_listing", _listing_table(files))
    try:
        return con.execute(
            """
            select
                listing.path, loaded.size_bytes, loaded.mtime_ns, loaded.content_hash,
                lake.row_count,
            from _ingest_listing as listing
            left join loaded_files as loaded on loaded.path = listing.path
            left join build_state.lake_files as lake on lake.path = listing.path
            where loaded.path is null
                or loaded.size_bytes <> listing.size_bytes
                or loaded.mtime_ns <> listing.mtime_ns
            """
        ).fetchall()
    finally:
        con.unregister("_ingest_listing")


def _gone(config: Config, paths: Sequence[str]) -> set[str]:
    """The paths no longer there (one listing of each folder, not a stat per file)."""
    by_folder: dict[str, list[str]] = {}
    for path in paths:
        folder, _, name = path.rpartition("/")
        by_folder.setdefault(folder, []).append(name)
    gone: set[str] = set()
    for folder, names in by_folder.items():
        try:
            present = set(os.listdir(config.data_dir / folder))
        except OSError:  # the folder is gone too, or is no folder
            present = set()
        gone.update(f"{folder}/{name}" for name in names if name not in present)
    return gone


def _listing_table(files: Sequence[SampleFile]) -> pa.Table:
    return pa.table(
        {
            "path": pa.array([f.path for f in files], pa.string()),
            "size_bytes": pa.array([f.size_bytes for f in files], pa.int64()),
            "mtime_ns": pa.array([f.mtime_ns for f in files], pa.int64()),
        }
    )


def split_new_files(
    con: duckdb.DuckDBPyConnection, files: Sequence[SampleFile]
) -> tuple[list[SampleFile], list[tuple[SampleFile, str]]]:
    """(files never loaded, files loaded before that changed since, with the reason)."""
    con.register("_ingest_listing", _listing_table(files))
    try:
        rows = con.execute(
            """
            select
                listing.path,
                loaded.path is null as is_new,
                loaded.size_bytes as loaded_size_bytes,
                loaded.mtime_ns as loaded_mtime_ns,
            from _ingest_listing as listing
            left join loaded_files as loaded using (path)
            where loaded.path is null
                or loaded.size_bytes <> listing.size_bytes
                or loaded.mtime_ns <> listing.mtime_ns
            """
        ).fetchall()
    finally:
        con.unregister("_ingest_listing")
    by_path = {f.path: f for f in files}
    new: list[SampleFile] = []
    changed: list[tuple[SampleFile, str]] = []
    for path, is_new, size_bytes, mtime_ns in rows:
        file = by_path[path]
        if is_new:
            new.append(file)
        else:
            changed.append(
                (
                    file,
                    f"{QUARANTINE_CHANGED} (was {size_bytes:,} bytes, "
                    f"mtime {_ns_iso(mtime_ns)}; now {file.size_bytes:,} bytes, "
                    f"mtime {_ns_iso(file.mtime_ns)})",
                )
            )
    new.sort(key=lambda f: f.path)
    changed.sort(key=lambda item: item[0].path)
    return new, changed


def _ns_iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="seconds")


def plan_batches(
    files: Sequence[SampleFile], max_files: int = MAX_FILES_PER_BATCH
) -> list[list[SampleFile]]:
    """Runs of files (sorted by path) of one `date=` partition, at most `max_files`, made of
    whole directories: a host-day's files stay in one batch unless they alone are more.

    One day per batch keeps each batch's time range, and so the part of `samples` that
    deduplication has to look at, about one day wide; a whole host-day in one batch can be
    compacted from the rows as they are loaded (`CompactAhead`).
    """
    directories: dict[str, list[SampleFile]] = {}
    for file in sorted(files, key=lambda f: f.path):
        directories.setdefault(file.path.rsplit("/", 1)[0], []).append(file)
    batches: list[list[SampleFile]] = []
    current_key: str | None = None
    for directory, members in directories.items():
        key = next((part for part in directory.split("/") if part.startswith("date=")), "")
        fits = batches and len(batches[-1]) + len(members) <= max_files
        if not batches or key != current_key or not fits:
            batches.append([])
            current_key = key
        for file in members:
            if len(batches[-1]) >= max_files:
                batches.append([])
            batches[-1].append(file)
    return batches


def record_loaded(
    con: duckdb.DuckDBPyConnection,
    loaded: Sequence[LoadedFile],
    loaded_at: dt.datetime,
) -> None:
    """Add the loaded files to `loaded_files` in one insert."""
    ts = pa.timestamp("us", tz="UTC")
    table = pa.table(
        {
            "path": pa.array([item.file.path for item in loaded], pa.string()),
            "size_bytes": pa.array([item.file.size_bytes for item in loaded], pa.int64()),
            "mtime_ns": pa.array([item.file.mtime_ns for item in loaded], pa.int64()),
            "row_count": pa.array([item.row_count for item in loaded], pa.int64()),
            "min_ts": pa.array([item.min_ts for item in loaded], ts),
            "max_ts": pa.array([item.max_ts for item in loaded], ts),
            "loaded_at": pa.array([loaded_at] * len(loaded), ts),
        }
    )
    con.register("_ingest_loaded", table)
    try:
        con.execute(
            "insert into loaded_files (path, size_bytes, mtime_ns, row_count, min_ts, max_ts, "
            "loaded_at) select * from _ingest_loaded"
        )
    finally:
        con.unregister("_ingest_loaded")
