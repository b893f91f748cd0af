"""`loaded_files`, the record of the raw sample files loaded: a listing (`scan.py`) judged
against it (new files, and loaded ones that changed since, judged by their content), and
the files loaded recorded in it."""

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
from gpufleet.integrations.pending import fetch_pending, read_pending, settle_pending
from gpufleet.warehouse.base.sample_files import LoadedFile, SampleFile, Unreadable
from gpufleet.warehouse.build.retention import expired_before, in_partition_before
from gpufleet.warehouse.lake.content import (
    ChangedFile,
    content_hash,
    is_compacted,
    record_same,
    same_rows_as_warehouse,
    settle_compacted,
)
from gpufleet.warehouse.lake.interrupted import record_interrupted_swaps
from gpufleet.warehouse.lake.replaced import replaced_files
from gpufleet.warehouse.raw.quarantine import (
    QUARANTINE_CHANGED,
    QuarantinedFile,
    record_quarantined,
)
from gpufleet.warehouse.raw.scan import list_sample_files

logger = logging.getLogger("gpufleet.ingest")


@dataclass(frozen=True)
class Listing:
    """A listing as the write transaction finds it (after the writer lock: another ingest
    may have loaded, compacted or quarantined some of its files meanwhile)."""

    files: list[SampleFile]  # every file listed, less those gone since and those expired
    unsettled: list[SampleFile]  # those never loaded, or loaded and changed since
    # About compacted files edited since they were loaded, and what could not be read.
    warnings: tuple[str, ...] = ()
    # Files in `date=` folders that retention expired (before `expired_before`): not
    # loaded, left to the next build's deletion (`build/retention.py`).
    expired: int = 0
    expired_before: dt.date | None = None
    # Each file loaded, replaced by its host-day's compacted file since, and found again
    # with other content: quarantined as changed after load (recorded, to move).
    changed: tuple[QuarantinedFile, ...] = ()
    unreadable: tuple[Unreadable, ...] = ()  # what the listing could not read
    # Files of the listing given that were gone once the lock was taken (another ingest
    # loaded and compacted or quarantined them meanwhile): the files were listed again.
    listed_again: int = 0


def check_listing(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    files: Sequence[SampleFile],
    *,
    unreadable: Sequence[Unreadable] = (),
) -> Listing:
    """Judge a listing made before the writer lock. Files gone since it was made (never
    quarantined: a file compacted or quarantined by another ingest is simply gone) make it
    out of date: raw/samples is listed again, so that the files that ingest compacted, and
    any new since, are this one's to judge and load. Each loaded file found with another
    size or mtime is judged by its content (`lake/content.py`): one that holds the same
    has its new mtime recorded; an edited compacted file is written again or named in a
    warning, never quarantined; an edited collector's file is left to quarantine, as is a
    file of a compacted host-day that the compacted file replaced and that came back with
    other content (`lake/replaced.py`). Files of the UTC dates retention expired are left
    out: loaded, the next build would only delete them again. `unreadable`: what the
    listing could not read, each named in a warning. First, a compaction swapped in by an
    ingest that died before recording it is recorded (`lake/interrupted.py`)."""
    record_interrupted_swaps(con, config, files)
    cut = expired_before(con)
    listed = _compare(con, config, files, cut)
    listed_again = 0
    if listed.gone:
        listed_again = len(listed.gone)
        logger.info(
            "ingest: %s files listed were gone once the writer lock was taken (another "
            "ingest loaded them meanwhile): listed again",
            f"{listed_again:,}",
        )
        fresh = list_sample_files(config)
        unreadable = fresh.unreadable
        listed = _compare(con, config, fresh.files, cut)
    by_path = {f.path: f for f in listed.files}
    # Loaded before and left in the store: copied, to be judged by its content.
    fetch_pending(config, (path for path, size_bytes, *_ in listed.rows if size_bytes is not None))
    # the compacted file of each folder that has one listed
    compacted = {f.path.rpartition("/")[0]: f.path for f in listed.files if is_compacted(f.path)}
    replaced: dict[str, dict[str, int]] = {}  # size by name, by folder, read once each
    unsettled: list[SampleFile] = []
    edited: list[ChangedFile] = []
    changed: list[tuple[str, str]] = []
    for path, size_bytes, mtime_ns, digest, lake_rows in listed.rows:
        file = by_path[path]
        if path in listed.gone:
            continue
        if size_bytes is None:  # never loaded, or loaded and replaced by a compacted file
            folder, _, name = path.rpartition("/")
            if folder in compacted and not is_compacted(path):
                if folder not in replaced:
                    replaced[folder] = replaced_files(config.data_dir / compacted[folder])
                size_before = replaced[folder].get(name)
                if size_before is not None and not (
                    file.size_bytes == size_before and same_rows_as_warehouse(con, config, path)
                ):
                    changed.append((path, compacted_reason(size_before, compacted[folder], file)))
                    continue
            unsettled.append(file)
        elif is_compacted(path):
            edited.append(ChangedFile(file, size_bytes, mtime_ns, digest, lake_rows))
        elif file.size_bytes == size_bytes and same_rows_as_warehouse(con, config, path):
            record_same(con, file)
        else:
            unsettled.append(file)
    warnings = [*map(str, unreadable), *settle_compacted(con, config, edited)]
    for warning in warnings:
        logger.warning(printable(warning))
    gone = listed.gone
    return Listing(
        [f for f in listed.files if f.path not in gone] if gone else list(listed.files),
        sorted(unsettled, key=lambda f: f.path),
        tuple(warnings),
        expired=listed.expired,
        expired_before=cut if listed.expired else None,
        changed=record_quarantined(con, config, sorted(changed), dt.datetime.now(dt.UTC)),
        unreadable=tuple(unreadable),
        listed_again=listed_again,
    )


@dataclass(frozen=True)
class _Compared:
    files: list[SampleFile]  # those listed, less those retention expired
    expired: int
    rows: list[tuple[Any, ...]]  # `_unsettled_rows`
    gone: set[str]  # of `rows`, the paths no longer there


def _compare(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    files: Sequence[SampleFile],
    cut: dt.date | None,
) -> _Compared:
    """The listed files outside the expired partitions compared with `loaded_files`."""
    kept = list(files)
    if cut is not None:
        kept = [f for f in files if not in_partition_before(f.path, cut)]
        # Left in the store (`integrations/pending.py`): recorded, as their copies would be.
        settle_pending(config, {f.directory for f in files if in_partition_before(f.path, cut)})
    rows = _unsettled_rows(con, kept)
    return _Compared(kept, len(files) - len(kept), rows, _gone(config, [p for p, *_ in rows]))


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
    """The paths no longer there (one listing of each folder, not a stat per file), nor
    left in the store by a Dask ingest (`integrations/pending.py`)."""
    by_folder: dict[str, list[str]] = {}
    for path in paths:
        folder, _, name = path.rpartition("/")
        by_folder.setdefault(folder, []).append(name)
    pending = {item.path for item in read_pending(config)} if paths else set()
    gone: set[str] = set()
    for folder, names in by_folder.items():
        try:
            present = set(os.listdir(config.data_dir / folder))
        except OSError:  # the folder is gone too, or is no folder
            present = set()
        gone.update(
            f"{folder}/{name}"
            for name in names
            if name not in present and f"{folder}/{name}" not in pending
        )
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
    rows = _unsettled_rows(con, files)
    by_path = {f.path: f for f in files}
    new: list[SampleFile] = []
    changed: list[tuple[SampleFile, str]] = []
    for path, size_bytes, mtime_ns, *_ in rows:
        file = by_path[path]
        if size_bytes is None:  # never loaded (loaded_files.size_bytes is NOT NULL)
            new.append(file)
        else:
            changed.append((file, changed_reason(size_bytes, mtime_ns, file)))
    new.sort(key=lambda f: f.path)
    changed.sort(key=lambda item: item[0].path)
    return new, changed


def changed_reason(size_bytes: int, mtime_ns: int, file: SampleFile) -> str:
    """The quarantine reason of a file loaded at `size_bytes` and `mtime_ns`, now `file`."""
    return (
        f"{QUARANTINE_CHANGED} (was {size_bytes:,} bytes, mtime {_ns_iso(mtime_ns)}; "
        f"now {file.size_bytes:,} bytes, mtime {_ns_iso(file.mtime_ns)})"
    )


def compacted_reason(size_bytes: int, compacted: str, file: SampleFile) -> str:
    """The quarantine reason of a file replaced by `compacted` at `size_bytes`, now `file`."""
    return (
        f"{QUARANTINE_CHANGED} (was {size_bytes:,} bytes when {compacted.rsplit('/', 1)[-1]} "
        f"replaced it; now {file.size_bytes:,} bytes, mtime {_ns_iso(file.mtime_ns)})"
    )


def _ns_iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="seconds")


def _hash_here(config: Config, path: str) -> int | None:
    """The content hash of the file `path`, None when it has no copy here."""
    try:
        return content_hash(config.data_dir / path)
    except FileNotFoundError:
        return None


def record_loaded(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    loaded: Sequence[LoadedFile],
    loaded_at: dt.datetime,
) -> None:
    """Add the loaded files to `loaded_files` in one insert; a compacted file loaded as a
    new file (copied from another warehouse's lake; swapped in by an ingest that died with
    samples the warehouse lacks: `lake/interrupted.py`) with its content hash, as
    compaction records it (`lake/content.py`); none for one read from the store with no
    copy here (`integrations/pending.py`), as for a compacted file of an older release."""
    ts = pa.timestamp("us", tz="UTC")
    paths = [item.file.path for item in loaded]
    hashes = [_hash_here(config, p) if is_compacted(p) else None for p in paths]
    table = pa.table(
        {
            "path": pa.array(paths, pa.string()),
            "size_bytes": pa.array([item.file.size_bytes for item in loaded], pa.int64()),
            "mtime_ns": pa.array([item.file.mtime_ns for item in loaded], pa.int64()),
            "row_count": pa.array([item.row_count for item in loaded], pa.int64()),
            "min_ts": pa.array([item.min_ts for item in loaded], ts),
            "max_ts": pa.array([item.max_ts for item in loaded], ts),
            "loaded_at": pa.array([loaded_at] * len(loaded), ts),
            "content_hash": pa.array(hashes, pa.int64()),
        }
    )
    con.register("_ingest_loaded", table)
    try:
        con.execute(
            "insert into loaded_files (path, size_bytes, mtime_ns, row_count, min_ts, max_ts, "
            "loaded_at, content_hash) select * from _ingest_loaded"
        )
    finally:
        con.unregister("_ingest_loaded")
