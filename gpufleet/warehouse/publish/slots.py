"""Opening the warehouse: one writer at a time, readers never blocked.

`write_transaction` hands a writer a read-write connection on the slot readers do not use
and publishes it atomically on success; readers open the published snapshot
(`read_only.py`).
The protocol (two slots, the lock, the catch-up, the publish) is in `docs/warehouse.md`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.base.connect import connect
from gpufleet.warehouse.base.raw_tables import ensure_raw_tables
from gpufleet.warehouse.publish.catch_up import catch_up
from gpufleet.warehouse.publish.log import GENERATION_DDL, current_generation, start_publish
from gpufleet.warehouse.publish.slot_files import (
    TEMP_PREFIX,
    TEMP_SUFFIX,
    copy_file,
    dirty_marker,
    disk_full_error,
    fsync_path,
    keep_permissions,
    link_over,
    open_in_this_process,
    remove_quietly,
    remove_stale_temps,
    same_file,
    slot_paths,
    writer_lock,
)

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_S",
    "LOCK_FILE_NAME",
    "current_generation",
    "in_write_transaction",
    "lock_path",
    "write_transaction",
]

LOCK_FILE_NAME = ".warehouse.lock"
DEFAULT_LOCK_TIMEOUT_S = 600.0
# A writer's connection is capped from the moment it opens, through the catch-up and the
# ingest (a build sets its own cap: `build/memory.py`): uncapped, DuckDB takes up to 80 %
# of the machine, more than a pipeline host's budget when it catches a slot up with hours
# of samples loaded at once.
WRITER_MEMORY_LIMIT = "1536MB"

# A file with more free blocks than blocks in use, and this many bytes free, is written
# afresh before it is published: DuckDB reuses free blocks but never gives them back, so
# rows that left for the lake (`lake/samples.py`) would otherwise keep their size on disk.
_REWRITE_FREE_BYTES = 64 * 1024 * 1024
_REWRITE_FREE_PER_USED = 1.0


@dataclass
class _OpenTransaction:
    connection: duckdb.DuckDBPyConnection
    thread_id: int
    depth: int


# The write transaction open on each warehouse in this process (nested calls join it).
_open: dict[Path, _OpenTransaction] = {}
_open_guard = threading.Lock()


def lock_path(config: Config) -> Path:
    """The lock file writers serialize on."""
    return config.data_dir / LOCK_FILE_NAME


def in_write_transaction(config: Config) -> bool:
    """Whether this thread has a write transaction open on the warehouse: one started now
    joins it and is published only with it."""
    with _open_guard:
        return _open_in_this_thread(config.warehouse_path.absolute()) is not None


@contextlib.contextmanager
def write_transaction(
    config: Config, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S, rebuild: bool = False
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection on a private version of the warehouse, published on success.

    Everything done through the connection becomes visible to new readers at once when
    the block exits normally; if it raises, the warehouse is left exactly as it was.
    Creates the warehouse (with the raw tables) when it does not exist yet. `rebuild`
    promises that the caller replaces every mart (a full build): the other slot is then
    used even after a full build, its marts left stale, instead of copying the file.
    Nested calls on the same warehouse in the same thread join the outer one.
    """
    warehouse = config.warehouse_path.absolute()
    joined = _join_open(warehouse)
    if joined is not None:
        try:
            yield joined.connection
        finally:
            with _open_guard:
                joined.depth -= 1
        return

    try:
        with _writing(warehouse, lock_timeout_s, rebuild=rebuild) as connection:
            yield connection
    except (OSError, duckdb.Error) as exc:
        # A full disk is one line naming the file and what to free, not a traceback.
        full = disk_full_error(warehouse, exc)
        if full is None:
            raise
        raise full from exc


@contextlib.contextmanager
def _writing(
    warehouse: Path, lock_timeout_s: float, *, rebuild: bool
) -> Iterator[duckdb.DuckDBPyConnection]:
    """`write_transaction` on `warehouse` when no transaction is open on it in this thread."""
    with writer_lock(warehouse.parent / LOCK_FILE_NAME, lock_timeout_s):
        remove_stale_temps(warehouse.parent, warehouse.name)
        opened = _open_slot_in_place(warehouse, rebuild=rebuild) if warehouse.exists() else None
        in_place = opened is not None
        work = opened[0] if opened is not None else _private_copy_path(warehouse)
        work_wal = work.with_name(work.name + ".wal")
        work_spill = work.with_name(work.name + ".tmp")
        published = False
        try:
            connection = opened[1] if opened is not None else _open_copy(warehouse, work)
            rewritten: Path | None = None
            with _registered(warehouse, connection):
                start_publish(connection)
                yield connection
                connection.execute("checkpoint")
                rewritten = _rewrite_if_mostly_free(connection, work)
            _seal(warehouse, work, rewritten)
            work = _publish(warehouse, work, in_place=in_place)
            published = True
            fsync_path(warehouse.parent, directory=True)
            remove_quietly(dirty_marker(work))
        finally:
            if not published:
                if in_place:
                    remove_quietly(work_wal, work_spill)  # the slot stays marked dirty
                else:
                    remove_quietly(work, work_wal, work_spill)


def _join_open(warehouse: Path) -> _OpenTransaction | None:
    """The write transaction this thread has open on `warehouse`, one level deeper; or None."""
    with _open_guard:
        current = _open_in_this_thread(warehouse)
        if current is not None:
            current.depth += 1
        return current


def _open_in_this_thread(warehouse: Path) -> _OpenTransaction | None:
    """The write transaction this thread has open on `warehouse` (hold `_open_guard`)."""
    current = _open.get(warehouse)
    return current if current is not None and current.thread_id == threading.get_ident() else None


@contextlib.contextmanager
def _registered(warehouse: Path, connection: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Make `connection` the one nested calls in this thread join; close it at the end."""
    with _open_guard:
        _open[warehouse] = _OpenTransaction(connection, threading.get_ident(), 1)
    try:
        yield
    finally:
        with _open_guard:
            _open.pop(warehouse, None)
        connection.close()


def _private_copy_path(warehouse: Path) -> Path:
    """A hidden temporary file beside the warehouse, unique to this writer."""
    return warehouse.with_name(
        f"{TEMP_PREFIX}{warehouse.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    )


def _open_slot_in_place(
    warehouse: Path, *, rebuild: bool
) -> tuple[Path, duckdb.DuckDBPyConnection] | None:
    """The stale slot, opened read-write and caught up, when no reader holds it."""
    slots = slot_paths(warehouse)
    if same_file(warehouse, slots[0]):
        target = slots[1]
    elif same_file(warehouse, slots[1]):
        target = slots[0]
    else:  # a warehouse from before the slots, or one replaced by hand
        with contextlib.suppress(OSError):  # no hard links here: copy on every write
            link_over(warehouse, slots[0])
        return None
    if (
        not target.exists()
        or dirty_marker(target).exists()
        or target.with_name(target.name + ".wal").exists()
        or open_in_this_process(target)
    ):
        return None
    try:
        connection = connect(str(target))
    except duckdb.IOException:  # a reader in another process still has it open
        return None
    dirty_marker(target).touch()
    try:
        connection.execute("set memory_limit = ?", [WRITER_MEMORY_LIMIT])
        ensure_raw_tables(connection)
        connection.execute(GENERATION_DDL)
        if catch_up(connection, warehouse, rebuild=rebuild):
            return target, connection
    except BaseException:
        connection.close()
        raise
    connection.close()
    return None


def _open_copy(warehouse: Path, work: Path) -> duckdb.DuckDBPyConnection:
    """A read-write connection on `work`: a copy of the warehouse, or a new database."""
    if warehouse.exists():
        copy_file(warehouse, work)
        old_wal = warehouse.with_name(warehouse.name + ".wal")
        if old_wal.exists():
            # Left by a read-write session that did not checkpoint: replayed on open.
            copy_file(old_wal, work.with_name(work.name + ".wal"))
    connection = connect(str(work))
    connection.execute("set memory_limit = ?", [WRITER_MEMORY_LIMIT])
    ensure_raw_tables(connection)
    connection.execute(GENERATION_DDL)
    return connection


def _rewrite_if_mostly_free(con: duckdb.DuckDBPyConnection, work: Path) -> Path | None:
    """A compact copy of the checkpointed database on `con` when most of its file is free
    blocks (COPY FROM DATABASE keeps tables, views, constraints, comments and row order);
    None when it is not worth it."""
    row = con.execute(
        "select block_size, used_blocks, free_blocks from pragma_database_size()"
        " where database_name = current_database()"
    ).fetchone()
    if row is None:
        return None
    block_size, used, free = (int(value) for value in row)
    if free <= used * _REWRITE_FREE_PER_USED or free * block_size < _REWRITE_FREE_BYTES:
        return None
    fresh = work.with_name(f"{work.name}.fresh{TEMP_SUFFIX}")
    remove_quietly(fresh, fresh.with_name(fresh.name + ".wal"))
    own = con.execute("select current_database()").fetchone()
    assert own is not None
    con.execute("set preserve_insertion_order = true")
    con.execute("attach ? as _fresh", [str(fresh)])
    try:
        con.execute(f'copy from database "{own[0]}" to _fresh')
    finally:
        con.execute("detach _fresh")
    return fresh


def _seal(warehouse: Path, work: Path, rewritten: Path | None) -> None:
    """Make the closed `work` file durable and ready to publish (the compact copy, if any,
    in its place; the old one's permissions; no WAL or spill files beside it)."""
    work_wal = work.with_name(work.name + ".wal")
    if rewritten is not None:
        os.replace(rewritten, work)
        remove_quietly(work_wal)
    fsync_path(work)
    if warehouse.exists():
        keep_permissions(warehouse, work)
    # The new version holds what the WAL held; the old WAL must not be replayed on it.
    old_wal = warehouse.with_name(warehouse.name + ".wal")
    remove_quietly(old_wal, work_wal, work.with_name(work.name + ".tmp"))


def _publish(warehouse: Path, work: Path, *, in_place: bool) -> Path:
    """Link `warehouse.duckdb` to the sealed `work` (atomically); the slot now published."""
    if in_place:
        link_over(work, warehouse)
        return work
    slots = slot_paths(warehouse)
    target = slots[1] if same_file(warehouse, slots[0]) else slots[0]
    dirty_marker(target).touch()
    os.replace(work, target)
    try:
        link_over(target, warehouse)
    except OSError:  # a file system without hard links: publish the file itself
        os.replace(target, warehouse)
    return target
