"""Opening the warehouse: one writer at a time, readers never blocked.

A DuckDB connection opened read-only in another process holds a lock that makes every
read-write open of the same file fail, and users keep such connections open for hours.
So a writer never opens `warehouse.duckdb` read-write. `write_transaction` instead:

1. takes an exclusive `flock` on `<data_dir>/.warehouse.lock` (writers queue there,
   waiting up to `lock_timeout_s` before failing with a clear message);
2. copies `warehouse.duckdb` to a hidden temporary file in the same directory
   (`.warehouse.duckdb.<pid>.<random>.tmp`), or creates a new database there;
3. hands a read-write connection on the copy to the caller (raw tables ensured);
4. on success: CHECKPOINT, close, fsync the file, `os.replace` it over
   `warehouse.duckdb` and fsync the directory, an atomic publish;
5. on an exception: closes and deletes the copy; `warehouse.duckdb` is untouched.

A reader that opened the old file keeps reading that snapshot (its open file
descriptor still points at the replaced inode); a connection opened after the publish
sees the new one. Nested `write_transaction` calls on the same warehouse in the same
thread join the outer one, so `ingest` and `build` can publish together.
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

from flows.raw_tables import ensure_raw_tables
from gpufleet.config import Config
from gpufleet.errors import GpufleetError

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


@contextlib.contextmanager
def write_transaction(
    config: Config, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection on a private copy of the warehouse, published on success.

    Everything done through the connection becomes visible to new readers at once when
    the block exits normally; if it raises, the warehouse is left exactly as it was.
    Creates the warehouse (with the raw tables) when it does not exist yet.
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
        temp = warehouse.with_name(
            f"{_TEMP_PREFIX}{warehouse.name}.{os.getpid()}.{secrets.token_hex(4)}{_TEMP_SUFFIX}"
        )
        temp_wal = temp.with_name(temp.name + ".wal")
        temp_spill = temp.with_name(temp.name + ".tmp")
        old_wal = warehouse.with_name(warehouse.name + ".wal")
        published = False
        try:
            if warehouse.exists():
                _copy_file(warehouse, temp)
                if old_wal.exists():
                    # Left by a read-write session that did not checkpoint: replayed on open.
                    _copy_file(old_wal, temp_wal)
            connection = duckdb.connect(str(temp))
            entry = _OpenTransaction(connection, threading.get_ident(), 1)
            with _open_guard:
                _open[warehouse] = entry
            try:
                ensure_raw_tables(connection)
                yield connection
                connection.execute("checkpoint")
            finally:
                with _open_guard:
                    _open.pop(warehouse, None)
                connection.close()
            _fsync_path(temp)
            if warehouse.exists():
                _keep_permissions(warehouse, temp)
            # The copy holds what the WAL held; the old WAL must not be replayed on top of it.
            _remove_quietly(old_wal, temp_wal, temp_spill)
            os.replace(temp, warehouse)
            published = True
            _fsync_path(warehouse.parent, directory=True)
        finally:
            if not published:
                _remove_quietly(temp, temp_wal, temp_spill)


def connect_read_only(config: Config) -> duckdb.DuckDBPyConnection:
    """A read-only connection on the current warehouse snapshot (for reports and users)."""
    warehouse = config.warehouse_path
    if not warehouse.is_file():
        raise GpufleetError(f"{warehouse}: no warehouse yet; run 'gpufleet ingest' first")
    try:
        return duckdb.connect(str(warehouse), read_only=True)
    except duckdb.Error as exc:
        raise GpufleetError(f"{warehouse}: cannot open the warehouse: {exc}") from exc
