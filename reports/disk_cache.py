"""What a report render makes the same way every time, kept on disk between processes.

The cache folder is `$GPUFLEET_CACHE_DIR`; unset (or empty), the user's cache folder's
`gpufleet/` (platformdirs: `$XDG_CACHE_HOME/gpufleet`, by default `~/.cache/gpufleet`, on
Linux); `off` keeps nothing. An entry is one file, named by a digest of everything its bytes
depend on (its key), and begins with a line that holds that digest, the content's SHA-256
and its length: a file that is not whole (a process stopped while writing it, a full disk)
or not this entry's is ignored and written again. A write goes to a temporary name first
and is renamed over the entry, so no reader sees half of one; a cache that cannot be read
or written (a read-only home) costs the time of making the bytes again, never an error.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import platformdirs

from gpufleet.reports.files import write_atomically

CACHE_DIR_ENV = "GPUFLEET_CACHE_DIR"
CACHE_OFF = "off"  # the value of GPUFLEET_CACHE_DIR that keeps nothing

_MAGIC = b"gpufleet-cache-1"

log = logging.getLogger(__name__)


def cache_dir() -> Path | None:
    """The folder entries are kept in, or None where the cache is off."""
    value = os.environ.get(CACHE_DIR_ENV, "")
    if value == CACHE_OFF:
        return None
    if value:
        return Path(value)
    return Path(platformdirs.user_cache_dir("gpufleet", appauthor=False))


def cached_bytes(name: str, key: Sequence[str], make: Callable[[], bytes]) -> bytes:
    """`make()`'s bytes, kept as the entry `name` with `key` (everything the bytes depend
    on, as strings): read back when a whole entry is there, else made and written."""
    folder = cache_dir()
    if folder is None:
        return make()
    key_digest = hashlib.sha256("\0".join((name, *key)).encode()).hexdigest()
    path = folder / f"{name}-{key_digest[:32]}"
    kept = _read(path, key_digest)
    if kept is not None:
        return kept
    content = make()
    _write(path, key_digest, content)
    return content


def _header(key_digest: str, content: bytes) -> bytes:
    digest = hashlib.sha256(content).hexdigest()
    return b"%s %s %s %d\n" % (_MAGIC, key_digest.encode(), digest.encode(), len(content))


def _read(path: Path, key_digest: str) -> bytes | None:
    """The entry's content, or None when there is none, or none whole and of this key."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    header, newline, content = raw.partition(b"\n")
    if newline and header + newline == _header(key_digest, content):
        return content
    log.debug("cache entry %s is not whole: made again", path)
    return None


def _write(path: Path, key_digest: str, content: bytes) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(path, _header(key_digest, content) + content)
    except OSError as error:
        log.debug("cache entry %s not written: %s", path, error)
