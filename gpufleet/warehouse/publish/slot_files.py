"""The files behind the two warehouse slots: the writer lock, slot paths, copies and links.

File-system steps `slots.write_transaction` is made of, each safe to repeat; how they fit
together is in `docs/warehouse.md` (the two slots).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from gpufleet.errors import GpufleetError, disk_full_path

TEMP_PREFIX = "."
TEMP_SUFFIX = ".tmp"
_FICLONE = 0x40049409  # Linux ioctl: copy-on-write clone where the file system can


@contextlib.contextmanager
def writer_lock(
    path: Path,
    timeout_s: float,
    *,
    holder: str = "another gpufleet ingest or build is writing the warehouse",
) -> Iterator[None]:
    """Hold an exclusive flock on `path`, waiting at most `timeout_s` seconds (then fail
    naming `holder`)."""
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
                        f"{path}: {holder}; gave up after waiting {timeout_s:g} s"
                    ) from exc
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def copy_file(source: Path, target: Path) -> None:
    """Copy `source` to `target`, as a copy-on-write clone where the file system allows
    (a failed write names `target`)."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
            return
        except OSError:
            pass
        try:
            shutil.copyfileobj(src, dst, length=16 * 1024 * 1024)
        except OSError as exc:
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(target)) from exc


def fsync_path(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_quietly(*paths: Path) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():  # DuckDB's spill directory `<db>.tmp`
            shutil.rmtree(path, ignore_errors=True)
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def keep_permissions(source: Path, target: Path) -> None:
    """Give the new warehouse file the old one's mode (and group, where allowed)."""
    stat = source.stat()
    os.chmod(target, stat.st_mode & 0o7777)
    with contextlib.suppress(OSError):
        os.chown(target, -1, stat.st_gid)


def remove_stale_temps(directory: Path, warehouse_name: str) -> None:
    """Delete copies left by a writer that was killed (only called while holding the lock)."""
    for stale in directory.glob(f"{TEMP_PREFIX}{warehouse_name}.*{TEMP_SUFFIX}*"):
        remove_quietly(stale)


def slot_paths(warehouse: Path) -> tuple[Path, Path]:
    return (
        warehouse.with_name(f".{warehouse.name}.slot-a"),
        warehouse.with_name(f".{warehouse.name}.slot-b"),
    )


def dirty_marker(slot: Path) -> Path:
    return slot.with_name(slot.name + ".dirty")


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return False


def open_in_this_process(path: Path) -> bool:
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


def link_over(source: Path, target: Path) -> None:
    """Make `target` a hard link to `source`, atomically (a temp link renamed over it)."""
    link = target.with_name(f"{TEMP_PREFIX}{target.name}.{os.getpid()}.link{TEMP_SUFFIX}")
    remove_quietly(link)
    os.link(source, link)
    os.replace(link, target)


# What a write may need beside the published warehouse: a copy of the warehouse (unless the
# other slot is caught up in place), a compacted copy of the result (when most of it is free
# blocks), DuckDB's write-ahead log (checkpointed at 16 MB) and temporary files, and what
# the write adds: up to about three times the warehouse's size and some megabytes more (a
# small warehouse's first build writes its marts' log and blocks), usually less.
_ROOM_PER_WAREHOUSE_BYTE = 3
_ROOM_BEYOND_BYTES = 32_000_000


def room_to_free(*, warehouse_bytes: int, free_bytes: int) -> tuple[int, int]:
    """(bytes to free, bytes free then) after a write of a `warehouse_bytes` warehouse failed
    on a full disk that has `free_bytes` free once the write's files are removed. A write
    needs about three times the warehouse, plus its log and temporary files; and since
    `free_bytes` proved too little, at least a warehouse's size (or 32 MB) more than that."""
    needed = max(
        _ROOM_PER_WAREHOUSE_BYTE * warehouse_bytes + _ROOM_BEYOND_BYTES,
        free_bytes + max(warehouse_bytes, _ROOM_BEYOND_BYTES),
    )
    return needed - free_bytes, needed


def disk_full_error(warehouse: Path, exc: BaseException) -> GpufleetError | None:
    """The one line a writer of `warehouse` fails with when `exc` is a full disk (the slot
    copy, DuckDB's WAL or checkpoint, a compacted file), once the write's own files are
    removed: the file, how much to free (`room_to_free`), and where. None for any other
    error."""
    path = disk_full_path(exc)
    if path is None:
        return None
    directory = warehouse.parent
    try:
        free = shutil.disk_usage(directory).free
        size = warehouse.stat().st_size if warehouse.exists() else 0
    except OSError:
        free = size = 0
    to_free, needed = room_to_free(warehouse_bytes=size, free_bytes=free)
    return GpufleetError(
        f"{path or directory}: no space left on the device ({_megabytes(free)} free); nothing "
        f"was changed. Free at least {_megabytes(to_free)} more on the file system of "
        f"{directory}, then run the command again: a write needs about {_megabytes(needed)} "
        f"there (a copy of the {_megabytes(size)} warehouse, a compacted copy, DuckDB's log "
        "and temporary files)"
    )


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"
