"""The sample objects a Dask ingest leaves in the store (docs/dask.md, reading from the store).

With a load fan-out (`[compute] dask`), `mirror_raw_location(defer=True)` does not copy a new
sample object of a host-day that is over and has no file in `<data_dir>/raw/` yet: the
workers read such host-days from the store and the compacted file replaces them, so the
pipeline host's copy would serve no one. The mirror lists them instead in
`<data_dir>/raw/.s3-pending.jsonl` (rewritten by every mirror: what a failed ingest left
there is listed again by the next), a line per object with the store's size and
last-modified time and the time it was first listed (`write_pending`). From there:

- the ingest's listing lists each as the file it would be (`raw/samples/...`: the store's
  size, and the time it was listed, as a copy's time is when it was copied), and
  `loaded_files` records it so (arrival is judged alike: `warehouse/raw/arrival.py`);
- the workers are sent it as any copied object (`stored_objects`);
- compaction checks a host-day's pending objects by those sizes and times, as it checks
  copies by theirs, and once their compacted file is swapped in records them as copied,
  by the store's size and last-modified time (`settle_pending`): the next mirror does not
  look at them again, as it does not look again at a copy that compaction replaced;
- whatever the pipeline host reads itself (a batch a worker refused or was not sent, a file
  to quarantine, a host-day left as collector files, a loaded file to judge again) is
  copied first (`fetch_pending`), the copy given the time it was listed, and recorded as
  the mirror records its copies.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.fs as pafs

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.errors import GpufleetError
from gpufleet.integrations import mirror
from gpufleet.integrations.files import replace_lines
from gpufleet.storage.s3 import S3Location, StoredObject, describe_error, s3_filesystem


@dataclass(frozen=True, kw_only=True)
class Pending:
    """A sample object not copied: where it is, and where its copy would be."""

    location: str  # the store's s3://bucket/prefix
    key: str  # below it: samples/date=D/host=H/x.parquet
    path: str  # its copy's path below the data directory: raw/samples/date=D/host=H/x
    size_bytes: int
    mtime_ns: int  # the store's last-modified time (the record's, as for a copy)
    listed_ns: int  # when the mirror listed it: the file's time here, as a copy's then

    @classmethod
    def of(cls, location: S3Location, key: str, target: str, info: pafs.FileInfo) -> Pending:
        """The object `key` of `location`, as listed (`info`), whose copy would be `target`
        (below raw/)."""
        return cls(
            location=location.url,
            key=key,
            path=f"raw/{target}",
            size_bytes=info.size,
            mtime_ns=info.mtime_ns,
            listed_ns=time.time_ns(),
        )

    @property
    def stored(self) -> StoredObject:
        """The object as a Dask worker is sent it (no ETag: the listing gives none)."""
        path = S3Location.parse(self.location).path(self.key)
        return StoredObject(relative=self.path, path=path, size_bytes=self.size_bytes, etag="")

    @property
    def listed_as(self) -> tuple[str, str, int, int]:
        """The object as the store lists it: the same one while none of these changes."""
        return (self.location, self.key, self.size_bytes, self.mtime_ns)

    @property
    def directory(self) -> str:
        return self.path.rsplit("/", 1)[0]

    @property
    def line(self) -> str:
        return json.dumps(
            {
                "location": self.location,
                "key": self.key,
                "path": self.path,
                "size_bytes": self.size_bytes,
                "mtime_ns": self.mtime_ns,
                "listed_ns": self.listed_ns,
            }
        )


def deferred(raw_dir: Path, target: str, today: dt.date, empty: dict[str, bool]) -> bool:
    """Whether `target` (below raw/) is a sample file of a host-day (`samples/date=D/host=H`)
    before `today` whose folder holds no file here (`empty`: each folder's, looked at once)."""
    parts = target.split("/")
    if len(parts) != 4 or parts[0] != "samples" or not parts[2].startswith("host="):
        return False
    try:
        if not parts[1].startswith("date=") or dt.date.fromisoformat(parts[1][5:]) >= today:
            return False
    except ValueError:
        return False
    folder = "/".join(parts[:3])
    if folder not in empty:
        try:
            with os.scandir(raw_dir / folder) as entries:
                empty[folder] = all(entry.name.startswith((".", "_")) for entry in entries)
        except FileNotFoundError:
            empty[folder] = True
        except OSError:  # no folder, or unreadable: copied, as always
            empty[folder] = False
    return empty[folder]


def replaced_here(raw_dir: Path, replaced: mirror.Replaced | None) -> Callable[[str, int], bool]:
    """Whether a sample file (below raw/) of a size is one its host-day's compacted file
    here replaced, of that size (`replaced`: what a host-day folder's compacted file
    replaced, read once a folder; None: never). Such an object is in the lake already: an
    ingest swapped in the compacted file of objects it left in the store and stopped
    before recording them as copied (`settle_pending`). A copy would come back beside the
    compacted file, to be quarantined as changed after its load (`raw/loaded.py`)."""
    found: dict[str, Mapping[str, int]] = {}

    def judged(target: str, size_bytes: int) -> bool:
        folder, _, name = target.rpartition("/")
        if replaced is None or not folder.startswith("samples/date="):
            return False
        if folder not in found:
            found[folder] = replaced(raw_dir / folder)
        return found[folder].get(name) == size_bytes

    return judged


def pending_path(config: Config) -> Path:
    return config.data_dir / "raw" / mirror.PENDING_NAME


def read_pending(config: Config) -> list[Pending]:
    """The objects listed and not copied whose copy is not there (since fetched, or there
    by another way), by path; none when the last mirror deferred nothing."""
    return sorted(
        (e for e in _entries(pending_path(config)) if not (config.data_dir / e.path).exists()),
        key=lambda entry: entry.path,
    )


def _entries(path: Path) -> Iterator[Pending]:
    """The pending list's lines, each read whole and naming a path below raw/samples/."""
    try:
        # (bytes that are no UTF-8, a damaged file: their lines left out as torn ones)
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    for line in text.splitlines():
        try:
            item = json.loads(line)
            entry = Pending(
                location=str(item["location"]),
                key=str(item["key"]),
                path=str(item["path"]),
                size_bytes=int(item["size_bytes"]),
                mtime_ns=int(item["mtime_ns"]),
                listed_ns=int(item["listed_ns"]),
            )
        except (ValueError, KeyError, TypeError):
            continue  # a torn line: its object is listed again by the next mirror
        parts = entry.path.split("/")
        if parts[:2] != ["raw", "samples"] or {"", ".", ".."} & set(parts):
            continue  # (an edited line) its copy would be outside raw/samples/: left out
        yield entry


def pending_by_directory(config: Config) -> dict[str, dict[str, tuple[int, int]]]:
    """The pending objects' (size, time) by path, by host-day directory (`raw/samples/...`):
    compaction's check of a host-day's files, as it checks its copies'."""
    found: dict[str, dict[str, tuple[int, int]]] = {}
    for entry in read_pending(config):
        found.setdefault(entry.directory, {})[entry.path] = (entry.size_bytes, entry.listed_ns)
    return found


def fetch_pending(config: Config, paths: Iterable[str]) -> int:
    """Copy the pending objects of `paths` (relative to the data directory) to their places
    as the mirror would (a temporary `.` name, flushed and renamed), each given the store's
    time, recorded as copied and no longer pending; how many. GpufleetError, in one line
    naming the object, when one is gone or holds another size than the store listed."""
    wanted = set(paths)
    entries = read_pending(config) if wanted else []
    fetched = [entry for entry in entries if entry.path in wanted]
    if not fetched:
        return 0
    fs = s3_filesystem(endpoint_url=config.s3.endpoint_url, region=config.s3.region)
    done: list[tuple[Pending, mirror.Copied]] = []
    try:
        for entry in fetched:
            url = f"{entry.location}/{entry.key}"
            info = pafs.FileInfo(
                S3Location.parse(entry.location).path(entry.key),
                pafs.FileType.File,
                size=entry.size_bytes,
                mtime_ns=entry.mtime_ns,
            )
            target = config.data_dir / entry.path
            try:
                copied = mirror._copy(fs, info, target, None)
            except OSError as exc:
                raise GpufleetError(
                    f"{printable(url)}: cannot be copied for the pipeline host to read: "
                    f"{describe_error(exc)} (the next ingest lists it again)"
                ) from exc
            if copied is None:
                raise GpufleetError(
                    f"{printable(url)}: listed, but not found when copied for the pipeline "
                    "host to read (deleted since); the next ingest lists the store again"
                )
            os.utime(target, ns=(entry.listed_ns, entry.listed_ns))  # as the listing has it
            done.append((entry, copied))
    finally:
        _record(config, done)
    return len(done)


def settle_pending(config: Config, directories: Collection[str]) -> None:
    """Record the pending objects of `directories` (host-days whose compacted file now
    replaces them) as copied, by the store's size and time: the mirror does not copy them
    again, as it does not copy again a copy that compaction replaced."""
    if not directories:
        return
    entries = [entry for entry in read_pending(config) if entry.directory in directories]
    _record(config, [(e, mirror.Copied(e.size_bytes, e.mtime_ns, "")) for e in entries])


def _record(config: Config, done: list[tuple[Pending, mirror.Copied]]) -> None:
    """Append each to the mirror's record, then take them out of the pending list."""
    if not done:
        return
    raw_dir = config.data_dir / "raw"
    with (raw_dir / mirror.RECORD_NAME).open("a", encoding="utf-8") as log:
        for entry, seen in done:
            line = mirror._line(S3Location.parse(entry.location), entry.key, seen)
            log.write(json.dumps(line) + "\n")
        log.flush()
        os.fsync(log.fileno())
    gone = {entry.path for entry, _ in done}
    write_pending(raw_dir, [e for e in read_pending(config) if e.path not in gone])


def write_pending(raw_dir: Path, entries: Iterable[Pending]) -> None:
    """The pending list, replaced whole (none: removed). An object listed before as it is
    (the same size and last-modified time) keeps the time it was first listed, as a copy
    keeps its copy's time: an ingest running meanwhile finds its files as it loaded them."""
    path = raw_dir / mirror.PENDING_NAME
    first = {entry.listed_as: entry.listed_ns for entry in _entries(path)}
    kept = [replace(e, listed_ns=first.get(e.listed_as, e.listed_ns)) for e in entries]
    lines = [entry.line + "\n" for entry in kept]
    if not lines:
        path.unlink(missing_ok=True)
        return
    replace_lines(path, lines)  # two ingests may write the list at once
