"""A compaction whose swap outlived its ingest: recorded by the next one.

Compaction swaps a host-day's compacted file in for its collector files on disk, then
records the swap in `loaded_files`, in the ingest's transaction (`compact.py`). An ingest
that dies between the two leaves the swap done and unrecorded: `loaded_files` lists
collector files that are gone, and not their compacted file. Left so, the next ingest
would load the compacted file as a new file, and the host-day, its recorded files never
all present again, would never be compacted again.

`record_interrupted_swaps` finds such host-days before the next ingest judges its listing:
every collector file recorded there is gone, and named, at the size it was loaded, among
the files the compacted file replaced (`replaced.py`). Their rows in `loaded_files` (and
the compacted file's own, from a compaction before) give way to one for the compacted
file, as the interrupted compaction would have recorded it, when each of its samples is
already the warehouse's. Otherwise (it also holds the samples of a file the dead ingest
loaded, lost with its transaction) the rows of the gone files go, and the compacted file
is loaded as a new file: its samples not yet there are added, and none twice. So is a
host-day's compacted file, recorded before, that a dead ingest compacted again with a late
file it loaded: no collector file of it is recorded, and the compacted file, grown from
the recorded one, would otherwise be taken for an edit and written again without them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence

import duckdb
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.integrations.pending import read_pending
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.lake.content import (
    content_hash,
    grown_from_warehouse,
    is_compacted,
    same_rows_as_warehouse,
)
from gpufleet.warehouse.lake.replaced import replaced_files

logger = logging.getLogger("gpufleet.ingest")


def record_interrupted_swaps(
    con: duckdb.DuckDBPyConnection, config: Config, files: Sequence[SampleFile]
) -> int:
    """Record the compacted file of each host-day of the listing `files` whose swap was
    not recorded (the module's docstring); how many host-days. Host-days with objects
    left in the store (`integrations/pending.py`) are left to their own recovery."""
    compacted = {f.directory: f for f in files if is_compacted(f.path)}
    if not compacted:
        return 0
    con.register("_listed_compacted", _listed(compacted.values()))
    try:
        # Recorded as found: no swap to record (every host-day of a normal ingest). One
        # equality join on the primary key; the folders' join below reads every row's path.
        unrecorded = {
            folder
            for (folder,) in con.execute(
                """
                select listed.folder from _listed_compacted as listed
                anti join loaded_files as loaded
                    on loaded.path = listed.path
                    and loaded.size_bytes = listed.size_bytes
                    and loaded.mtime_ns = listed.mtime_ns
                """
            ).fetchall()
        }
    finally:
        con.unregister("_listed_compacted")
    if not unrecorded:
        return 0
    con.register("_listed_compacted", _listed(compacted[folder] for folder in unrecorded))
    try:
        # Folders holding a listed compacted file unrecorded or recorded as another file,
        # with the files recorded there.
        rows = con.execute(
            """
            select listed.folder, list((loaded.path, loaded.size_bytes) order by loaded.path)
            from loaded_files as loaded
            inner join _listed_compacted as listed
                on regexp_extract(loaded.path, '^(.*)/[^/]+$', 1) = listed.folder
            group by listed.folder, listed.path
            order by listed.folder
            """
        ).fetchall()
    finally:
        con.unregister("_listed_compacted")
    if not rows:
        return 0
    pending = {item.directory for item in read_pending(config)}
    recorded = 0
    for folder, loaded in rows:
        file = compacted[folder]
        if folder in pending:
            continue
        if [path for path, _ in loaded] == [file.path]:
            recorded += _record_grown(con, config, file)
        elif _swapped(config, file, dict(loaded)):
            _record_swap(con, config, file, [path for path, _ in loaded])
            recorded += 1
    return recorded


def _record_grown(con: duckdb.DuckDBPyConnection, config: Config, compacted: SampleFile) -> int:
    """A host-day compacted before, compacted again with a late file its dead ingest
    loaded (lost with its transaction): its compacted file, recorded as it was, now holds
    those samples too. Its row goes, so that it loads as a new file (its samples not yet
    there added, none twice), rather than be taken for an edit and written again from the
    warehouse, without them (`content.py`); 1 when so. A file of the lake, of another
    content hash, or not grown so from the recorded one (`grown_from_warehouse`) is left
    to `settle_compacted`."""
    recorded = con.execute(
        "select loaded.content_hash, loaded.min_ts, loaded.max_ts,"
        " exists (select 1 from build_state.lake_files as lake where lake.path = $path)"
        " from loaded_files as loaded where loaded.path = $path",
        {"path": compacted.path},
    ).fetchone()
    if recorded is None or recorded[3] or not replaced_files(config.data_dir / compacted.path):
        return 0
    digest, first, last, _ = recorded
    try:
        if content_hash(config.data_dir / compacted.path) == digest:
            return 0  # the same file, another mtime
    except OSError:
        return 0
    if not grown_from_warehouse(con, config, compacted.path, first, last):
        return 0
    con.execute("delete from loaded_files where path = $path", {"path": compacted.path})
    logger.warning(
        "ingest: %s was compacted again with samples the warehouse lacks in a compaction "
        "its ingest did not live to record: loaded as a new file",
        printable(compacted.path),
    )
    return 1


def _listed(files: Iterable[SampleFile]) -> pa.Table:
    """The compacted files `files` as a table: folder, path, size_bytes, mtime_ns."""
    listed = list(files)
    return pa.table(
        {
            "folder": pa.array([f.directory for f in listed], pa.string()),
            "path": pa.array([f.path for f in listed], pa.string()),
            "size_bytes": pa.array([f.size_bytes for f in listed], pa.int64()),
            "mtime_ns": pa.array([f.mtime_ns for f in listed], pa.int64()),
        }
    )


def _swapped(config: Config, compacted: SampleFile, loaded: dict[str, int]) -> bool:
    """Whether every collector file recorded in the folder (`loaded`: size by path) is gone
    and named, at that size, among those `compacted` replaced."""
    try:
        present = set(os.listdir(config.data_dir / compacted.directory))
    except OSError:
        return False
    replaced = replaced_files(config.data_dir / compacted.path)
    collectors = {path: size for path, size in loaded.items() if path != compacted.path}
    return bool(collectors) and all(
        name not in present and replaced.get(name) == size
        for name, size in ((path.rsplit("/", 1)[-1], size) for path, size in collectors.items())
    )


def _record_swap(
    con: duckdb.DuckDBPyConnection, config: Config, compacted: SampleFile, paths: list[str]
) -> None:
    """Replace the rows of `paths` in `loaded_files` with one for `compacted`, as
    compaction records it (`_record` in `compact.py`), when its samples are the
    warehouse's; else only remove them (it is then loaded as a new file)."""
    total = con.execute(
        "select sum(row_count), min(min_ts), max(max_ts) from loaded_files"
        " where path in (select unnest($paths))",
        {"paths": paths},
    ).fetchone()
    con.execute("delete from loaded_files where path in (select unnest($paths))", {"paths": paths})
    shown = printable(compacted.path)
    if total is None or not same_rows_as_warehouse(con, config, compacted.path):
        logger.warning(
            "ingest: %s replaced %s recorded files in a compaction its ingest did not live to "
            "record, and holds samples the warehouse lacks: loaded as a new file",
            shown,
            len(paths),
        )
        return
    con.execute(
        "insert into loaded_files (path, size_bytes, mtime_ns, row_count, min_ts, max_ts,"
        " loaded_at, content_hash) values ($path, $size, $mtime, $rows, $first, $last, now(),"
        " $hash)",
        {
            "path": compacted.path,
            "size": compacted.size_bytes,
            "mtime": compacted.mtime_ns,
            "rows": total[0],
            "first": total[1],
            "last": total[2],
            "hash": content_hash(config.data_dir / compacted.path),
        },
    )
    logger.info(
        "ingest: %s recorded in place of the %s files it replaced in a compaction its "
        "ingest did not live to record",
        shown,
        len(paths),
    )
