"""Opening the warehouse: one writer at a time, readers never blocked.

A DuckDB connection opened read-only in another process holds a lock that makes every
read-write open of the same file fail, and users keep such connections open for hours.
So a writer never opens the file readers open. The warehouse lives in two files, slots
`.warehouse.duckdb.slot-a` and `-b`; `warehouse.duckdb` is a hard link to the one last
published. `write_transaction`:

1. takes an exclusive `flock` on `<data_dir>/.warehouse.lock` (writers queue there,
   waiting up to `lock_timeout_s` before failing with a clear message);
2. opens the other slot (the warehouse as of the publish before) read-write and catches
   it up with the published one (`_catch_up`: the rows `samples_stored` gained, the
   `samples_attributed` rows incremental builds replaced, the small tables whole). When
   it cannot (a reader still holds that file, in this process or another; a full build
   since; no such slot yet), it copies `warehouse.duckdb` to a hidden temporary file, or
   creates a new database there, as before the slots;
3. hands a read-write connection on it to the caller (raw tables ensured), after
   counting the publish in `build_state.generation`;
4. on success: CHECKPOINT (and, when most of the file is free blocks, as after samples
   left for the lake, a compact copy takes its place), close, fsync, then links
   `warehouse.duckdb` to it (a new link renamed over the old: an atomic publish) and
   fsyncs the directory;
5. on an exception: the published warehouse is untouched; a slot written in place is
   marked `.dirty` and never trusted again (the next writer copies).

A reader that opened the old file keeps reading that snapshot (its open file descriptor
still points at the old inode, which no writer opens while it is held); a connection
opened after the publish sees the new one. Nested `write_transaction` calls on the same
warehouse in the same thread join the outer one, so `ingest` and `build` can publish
together.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.raw_tables import ensure_raw_tables

LOCK_FILE_NAME = ".warehouse.lock"
DEFAULT_LOCK_TIMEOUT_S = 600.0
_TEMP_PREFIX = "."
_TEMP_SUFFIX = ".tmp"
_FICLONE = 0x40049409  # Linux ioctl: copy-on-write clone where the file system can


@dataclass
class _OpenTransaction:
    connection: duckdb.DuckDBPyConnection
    thread_id: int
    depth: int


_open: dict[Path, _OpenTransaction] = {}
_open_guard = threading.Lock()


def lock_path(config: Config) -> Path:
    """The lock file writers serialize on."""
    return config.data_dir / LOCK_FILE_NAME


@contextlib.contextmanager
def _writer_lock(path: Path, timeout_s: float) -> Iterator[None]:
    """Hold an exclusive flock on `path`, waiting at most `timeout_s` seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise GpufleetError(
                        f"{path}: another gpufleet ingest or build is writing the warehouse; "
                        f"gave up after waiting {timeout_s:g} s"
                    ) from exc
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _copy_file(source: Path, target: Path) -> None:
    """Copy `source` to `target`, as a copy-on-write clone where the file system allows."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
            return
        except OSError:
            pass
        shutil.copyfileobj(src, dst, length=16 * 1024 * 1024)


def _fsync_path(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(*paths: Path) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():  # DuckDB's spill directory `<db>.tmp`
            shutil.rmtree(path, ignore_errors=True)
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _keep_permissions(source: Path, target: Path) -> None:
    """Give the new warehouse file the old one's mode (and group, where allowed)."""
    stat = source.stat()
    os.chmod(target, stat.st_mode & 0o7777)
    with contextlib.suppress(OSError):
        os.chown(target, -1, stat.st_gid)


def _remove_stale_temps(directory: Path, warehouse_name: str) -> None:
    """Delete copies left by a writer that was killed (only called while holding the lock)."""
    for stale in directory.glob(f"{_TEMP_PREFIX}{warehouse_name}.*{_TEMP_SUFFIX}*"):
        _remove_quietly(stale)


GENERATION_DDL = """
create schema if not exists build_state;
create table if not exists build_state.generation (value bigint not null);
insert into build_state.generation select 0 where not exists (from build_state.generation);
-- The rows of a table that a publish replaced, by key (see REPLAY_KEYS); one key per row.
create table if not exists build_state.replaced (
    generation bigint not null,
    table_name varchar not null,
    key varchar not null,          -- a name in REPLAY_KEYS
    gpu_uuid varchar,
    since_ts timestamptz,
    day date,
    run_id bigint,                 -- an episode or event id; a series id for series_since_ts
    iso_week varchar,
    hour bigint
);
-- a warehouse made before the log had hours (gpu_from_hour)
alter table build_state.replaced add column if not exists hour bigint;
create table if not exists build_state.full_builds (generation bigint not null);
"""
# How a logged key selects a table's rows ({t}: the table, {k}: the log row).
REPLAY_KEYS = {
    "series_since_ts": "{t}.series_id = {k}.run_id and {t}.ts >= {k}.since_ts",
    "gpu_from_day": "{t}.gpu_uuid = {k}.gpu_uuid and {t}.day >= {k}.day",
    "gpu_from_hour": (
        "{t}.gpu_uuid = {k}.gpu_uuid"
        " and ({t}.day > {k}.day or ({t}.day = {k}.day and {t}.hour >= {k}.hour))"
    ),
    "gpu_day": "{t}.gpu_uuid = {k}.gpu_uuid and {t}.day = {k}.day",
    "gpu_episode": "{t}.gpu_uuid = {k}.gpu_uuid and {t}.episode_id = {k}.run_id",
    "gpu_event": "{t}.gpu_uuid = {k}.gpu_uuid and {t}.event_id = {k}.run_id",
    "day": "{t}.day = {k}.day",
    "iso_week": "{t}.iso_week = {k}.iso_week",
}
# Tables only ever changed by incremental builds (which log what they replace) or full
# builds (after which the other slot is copied afresh); every other table is copied whole.
LOGGED_TABLES = (
    "samples_attributed_rows",
    "run_pieces",
    "idle_episodes",
    "thermal_events",
    "gpu_team_daily",
    "gpu_hourly",
    "team_daily",
    "gpu_daily",
    "host_daily",
    "team_weekly",
)
_LOG_KEPT = 16  # generations of the log kept: a slot further behind is copied afresh
# Rows are appended with a growing load_id, and deleted only when they leave for the lake.
_APPEND_ONLY = "samples_stored"
# More rows than this (a table copied whole, or samples gained) are not copied row by row:
# the file is (the catch-up runs before the build's memory cap, and row by row is slower).
_WHOLE_TABLE_LIMIT = 5_000_000


def current_generation(con: duckdb.DuckDBPyConnection) -> int:
    """The number of the publish this connection's changes will be (or were) part of."""
    row = con.execute("select value from build_state.generation").fetchone()
    return int(row[0]) if row else 0


def _slot_paths(warehouse: Path) -> tuple[Path, Path]:
    return (
        warehouse.with_name(f".{warehouse.name}.slot-a"),
        warehouse.with_name(f".{warehouse.name}.slot-b"),
    )


def _dirty_marker(slot: Path) -> Path:
    return slot.with_name(slot.name + ".dirty")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return False


def _open_in_this_process(path: Path) -> bool:
    """Whether this process holds `path` open (a DuckDB reader in this process, say)."""
    try:
        target = path.stat()
    except FileNotFoundError:
        return False
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            st = os.stat(f"/proc/self/fd/{fd}")
            if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev):
                return True
    return False


def _columns(con: duckdb.DuckDBPyConnection, database: str) -> dict[str, list[str]]:
    """Each table's columns (and types), by schema.table."""
    rows = con.execute(
        """
        select schema_name || '.' || table_name,
            list(column_name || ' ' || data_type order by column_index),
        from duckdb_columns()
        where database_name = $database and schema_name in ('main', 'build_state')
            and not internal
            and (schema_name, table_name) in (
                select (schema_name, table_name) from duckdb_tables()
                where database_name = $database
            )
        group by all
        """,
        {"database": database},
    ).fetchall()
    return {name: columns for name, columns in rows}


def _views(con: duckdb.DuckDBPyConnection, database: str) -> dict[str, str]:
    """Each view's definition, by schema.view (a full build replaces them)."""
    rows = con.execute(
        """
        select schema_name || '.' || view_name, sql,
        from duckdb_views()
        where database_name = ? and schema_name in ('main', 'build_state') and not internal
        """,
        [database],
    ).fetchall()
    return {name: sql for name, sql in rows}


def _catch_up(con: duckdb.DuckDBPyConnection, published: Path, *, rebuild: bool) -> bool:
    """Bring the slot open on `con` up to the published warehouse; False if it cannot.

    The slot is the warehouse as it was one publish (or a few) ago. `samples_stored` gains
    rows of later loads (load_id), and loses rows only when they leave for the lake (which
    changes the `samples` view, or the row count: then the file is copied); the marts'
    rows that incremental builds replaced are replaced again, by the keys
    `build_state.replaced` logs for each publish; every other table is small and copied
    whole. A full build since, a different schema, or a slot too far behind means copying
    the file instead. When the writer is about to rebuild every mart (`rebuild`: a full
    build), the marts are left as they are (the build replaces them all), so neither a full
    build since nor the log matters.
    """
    own = con.execute("select current_database()").fetchone()
    assert own is not None
    con.execute("attach ? as _published (read_only)", [str(published)])
    try:
        tables = _columns(con, "_published")
        if _columns(con, own[0]) != tables:
            return False
        if not rebuild and _views(con, own[0]) != _views(con, "_published"):
            return False
        behind = current_generation(con)
        row = con.execute("select value from _published.build_state.generation").fetchone()
        ahead = int(row[0]) if row else 0
        if ahead == behind:
            return True
        if not rebuild:
            if not behind < ahead <= behind + _LOG_KEPT:
                return False
            full = con.execute(
                "select count(*) from _published.build_state.full_builds where generation > ?",
                [behind],
            ).fetchone()
            if full and full[0]:
                return False
        for name in tables:
            if name == f"main.{_APPEND_ONLY}":
                row = con.execute(f"select coalesce(max(load_id), -1) from {name}").fetchone()
                loaded = row[0] if row else -1
                gained = con.execute(
                    f"select count(*) from _published.{name} where load_id > ?", [loaded]
                ).fetchone()
                if not gained or gained[0] > _WHOLE_TABLE_LIMIT:
                    return False  # a backfill since: copying the file is cheaper
                con.execute(
                    f"insert into {name} select * from _published.{name} where load_id > ?",
                    [loaded],
                )
                counts = con.execute(
                    f"select (select count(*) from {name}), "
                    f"(select count(*) from _published.{name})"
                ).fetchone()
                if not counts or counts[0] != counts[1]:
                    return False
            elif name.removeprefix("main.") in LOGGED_TABLES:
                if not rebuild:
                    _replay(con, name, behind)
            else:
                size = con.execute(f"select count(*) from _published.{name}").fetchone()
                if size and size[0] > _WHOLE_TABLE_LIMIT:
                    return False
                con.execute(f"delete from {name}")
                con.execute(f"insert into {name} select * from _published.{name}")
        return True
    finally:
        con.execute("detach _published")


def _replay(con: duckdb.DuckDBPyConnection, name: str, behind: int) -> None:
    """Replace the table's rows the publishes since `behind` replaced, key by key."""
    table = name.removeprefix("main.")
    con.execute(
        """
        create or replace temp table _sync_keys as
        select distinct key, gpu_uuid, since_ts, day, hour, run_id, iso_week,
        from _published.build_state.replaced
        where generation > ? and table_name = ?
        """,
        [behind, table],
    )
    kinds = [row[0] for row in con.execute("select distinct key from _sync_keys").fetchall()]
    for kind in kinds:
        match = REPLAY_KEYS[kind].format(t="rows", k="keys")
        keys = f"(select * from _sync_keys where key = '{kind}') as keys"
        con.execute(f"delete from {name} as rows using {keys} where {match}")
        con.execute(
            f"""
            insert into {name}
            select distinct on (rows.rowid) rows.* exclude (rowid),
            from (select *, rowid from _published.{name}) as rows
            inner join {keys} on {match}
            """
        )
    con.execute("drop table temp._sync_keys")


# A file with more free blocks than blocks in use, and this many bytes free, is written
# afresh before it is published: DuckDB reuses free blocks but never gives them back, so
# rows that left for the lake (gpufleet/warehouse/lake.py) would otherwise keep their size on disk.
_REWRITE_FREE_BYTES = 64 * 1024 * 1024
_REWRITE_FREE_PER_USED = 1.0


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
    fresh = work.with_name(f"{work.name}.fresh{_TEMP_SUFFIX}")
    _remove_quietly(fresh, fresh.with_name(fresh.name + ".wal"))
    own = con.execute("select current_database()").fetchone()
    assert own is not None
    con.execute("set preserve_insertion_order = true")
    con.execute("attach ? as _fresh", [str(fresh)])
    try:
        con.execute(f'copy from database "{own[0]}" to _fresh')
    finally:
        con.execute("detach _fresh")
    return fresh


def _link_over(source: Path, target: Path) -> None:
    """Make `target` a hard link to `source`, atomically (a temp link renamed over it)."""
    link = target.with_name(f"{_TEMP_PREFIX}{target.name}.{os.getpid()}.link{_TEMP_SUFFIX}")
    _remove_quietly(link)
    os.link(source, link)
    os.replace(link, target)


def _open_slot_in_place(
    warehouse: Path, *, rebuild: bool
) -> tuple[Path, duckdb.DuckDBPyConnection] | None:
    """The stale slot, opened read-write and caught up, when no reader holds it."""
    slots = _slot_paths(warehouse)
    if _same_file(warehouse, slots[0]):
        target = slots[1]
    elif _same_file(warehouse, slots[1]):
        target = slots[0]
    else:  # a warehouse from before the slots, or one replaced by hand
        with contextlib.suppress(OSError):  # no hard links here: copy on every write
            _link_over(warehouse, slots[0])
        return None
    if (
        not target.exists()
        or _dirty_marker(target).exists()
        or target.with_name(target.name + ".wal").exists()
        or _open_in_this_process(target)
    ):
        return None
    try:
        connection = duckdb.connect(str(target))
    except duckdb.IOException:  # a reader in another process still has it open
        return None
    _dirty_marker(target).touch()
    try:
        ensure_raw_tables(connection)
        connection.execute(GENERATION_DDL)
        if _catch_up(connection, warehouse, rebuild=rebuild):
            return target, connection
    except BaseException:
        connection.close()
        raise
    connection.close()
    return None


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
    """
    warehouse = config.warehouse_path.absolute()
    with _open_guard:
        current = _open.get(warehouse)
        if current is not None and current.thread_id == threading.get_ident():
            current.depth += 1
            joined: _OpenTransaction | None = current
        else:
            joined = None
    if joined is not None:
        try:
            yield joined.connection
        finally:
            with _open_guard:
                joined.depth -= 1
        return

    with _writer_lock(warehouse.parent / LOCK_FILE_NAME, lock_timeout_s):
        _remove_stale_temps(warehouse.parent, warehouse.name)
        opened = _open_slot_in_place(warehouse, rebuild=rebuild) if warehouse.exists() else None
        in_place = opened is not None
        if opened is not None:
            work, connection = opened
        else:
            work = warehouse.with_name(
                f"{_TEMP_PREFIX}{warehouse.name}.{os.getpid()}.{secrets.token_hex(4)}{_TEMP_SUFFIX}"
            )
        work_wal = work.with_name(work.name + ".wal")
        work_spill = work.with_name(work.name + ".tmp")
        old_wal = warehouse.with_name(warehouse.name + ".wal")
        published = False
        try:
            if not in_place:
                if warehouse.exists():
                    _copy_file(warehouse, work)
                    if old_wal.exists():
                        # Left by a read-write session that did not checkpoint: replayed on open.
                        _copy_file(old_wal, work_wal)
                connection = duckdb.connect(str(work))
                ensure_raw_tables(connection)
                connection.execute(GENERATION_DDL)
            rewritten: Path | None = None
            entry = _OpenTransaction(connection, threading.get_ident(), 1)
            with _open_guard:
                _open[warehouse] = entry
            try:
                connection.execute("update build_state.generation set value = value + 1")
                connection.execute(
                    "delete from build_state.replaced where generation < ?",
                    [current_generation(connection) - _LOG_KEPT],
                )
                yield connection
                connection.execute("checkpoint")
                rewritten = _rewrite_if_mostly_free(connection, work)
            finally:
                with _open_guard:
                    _open.pop(warehouse, None)
                connection.close()
            if rewritten is not None:
                os.replace(rewritten, work)
                _remove_quietly(work_wal)
            _fsync_path(work)
            if warehouse.exists():
                _keep_permissions(warehouse, work)
            # The new version holds what the WAL held; the old WAL must not be replayed on it.
            _remove_quietly(old_wal, work_wal, work_spill)
            if in_place:
                _link_over(work, warehouse)
            else:
                slots = _slot_paths(warehouse)
                target = slots[1] if _same_file(warehouse, slots[0]) else slots[0]
                _dirty_marker(target).touch()
                os.replace(work, target)
                try:
                    _link_over(target, warehouse)
                except OSError:  # a file system without hard links: publish the file itself
                    os.replace(target, warehouse)
                work = target
            published = True
            _fsync_path(warehouse.parent, directory=True)
            _remove_quietly(_dirty_marker(work))
        finally:
            if not published:
                if in_place:
                    _remove_quietly(work_wal, work_spill)  # the slot stays marked dirty
                else:
                    _remove_quietly(work, work_wal, work_spill)


def connect_read_only(config: Config) -> duckdb.DuckDBPyConnection:
    """A read-only connection on the current warehouse snapshot (for reports and users)."""
    warehouse = config.warehouse_path
    if not warehouse.is_file():
        raise GpufleetError(f"{warehouse}: no warehouse yet; run 'gpufleet ingest' first")
    try:
        return duckdb.connect(str(warehouse), read_only=True)
    except duckdb.Error as exc:
        raise GpufleetError(f"{warehouse}: cannot open the warehouse: {exc}") from exc
