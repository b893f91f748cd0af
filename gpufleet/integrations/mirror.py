"""`raw_location = "s3://bucket/prefix"` (and each `[clusters.<site>] raw_location`):
before an ingest lists its files, the new and changed objects under `<prefix>/samples/`,
`<prefix>/allocations/` and `<prefix>/jobs/` are copied into the local `<data_dir>/raw/...`
at the same relative path (a site's: in its site's folders and names, `local_path`), each
under a temporary `.` name, flushed and renamed, so that everything after it (batches,
quarantine, a file changed after it was loaded) works on local files as it always has.

An object is judged by its listing: one whose (key, size, last-modified time) is the one
recorded at its last copy is not looked at again; any other is opened, and copied unless its
ETag is the one recorded (the same bytes uploaded again). The record is
`<data_dir>/raw/.s3-objects.jsonl`, a line per copy naming its location and key (the last
line of a location's key wins: two stores' same key are two objects), appended only after
the copy is renamed into place: a crash in between copies the object again, with the same
content, which the ingest then finds to hold the rows it loaded.

S3's last-modified time counts whole seconds: an object overwritten with as many bytes
within the second of its copy is not seen to change.

A Dask ingest (`defer`) copies no new sample object of a host-day that is over and has no
file here yet: it lists them in `<data_dir>/raw/.s3-pending.jsonl` for the workers to read
from the store (`pending.py`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from gpufleet.collectors.schema import folder_host, host_folder
from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.errors import GpufleetError
from gpufleet.integrations.files import replace_lines
from gpufleet.storage.s3 import S3Location, StoredObject, describe_error, s3_filesystem

logger = logging.getLogger("gpufleet.ingest")

RECORD_NAME = ".s3-objects.jsonl"
PENDING_NAME = ".s3-pending.jsonl"  # the objects not copied (`pending.py`)
# The folders copied, each with the files its local reader takes.
FOLDERS = (("samples", ".parquet"), ("allocations", ".csv"), ("jobs", ".csv"))
_CHUNK_BYTES = 8 * 1024 * 1024
# The ETag recorded for an object not copied (`local_path` found no place for it, or a control
# character in its name): warned about once, and again only when it changes.
REFUSED = "-"
_UNCARRIED = "\ufffd"
# The collector files a host-day folder's compacted file replaced, size by name.
Replaced = Callable[[Path], Mapping[str, int]]


@dataclass(frozen=True)
class Copied:
    """What the last copy of an object saw."""

    size_bytes: int
    mtime_ns: int
    etag: str


@dataclass(frozen=True)
class MirrorResult:
    location: str
    objects: int  # objects listed
    copied: int  # copied this time (new, or changed since their last copy)
    pending: int = 0  # new, not copied: for the Dask workers to read (`pending.py`)


@dataclass(frozen=True)
class RawSource:
    """One store the ingest copies from: the top-level `raw_location` (site None: each
    object at its own relative path), or a site's `[clusters.<site>] raw_location` (every
    sample file the site's, placed in a `host=<host>@<site>` folder; docs/sites.md)."""

    location: S3Location
    site: str | None = None


def raw_sources(config: Config) -> list[RawSource]:
    """The configured stores, the top-level one first."""
    sources = [RawSource(S3Location.parse(config.raw_location))] if config.raw_location else []
    sources += [RawSource(S3Location.parse(url), site) for site, url in config.site_locations]
    return sources


def reads_object_storage(config: Config) -> bool:
    return bool(raw_sources(config))


def mirror_raw_location(
    config: Config,
    *,
    filesystem: pafs.FileSystem | None = None,
    defer: bool = False,
    replaced: Replaced | None = None,
) -> list[MirrorResult]:
    """Copy the new and changed objects of `raw_location` and of each site's into
    `<data_dir>/raw`; one result per store (none when the raw files are local).
    GpufleetError, in one line naming the location, when a store cannot be listed or read:
    the objects copied before it are whole and recorded, and nothing half-copied is left
    visible. `defer` (an ingest with a load fan-out): a new sample object of a host-day
    before today (UTC) with no file here is listed as pending instead (`pending.py`).
    `replaced` (the files a compacted file replaced): a new object its host-day's compacted
    file replaced, as it is, is recorded, not copied (`pending.replaced_here`)."""
    from gpufleet.integrations.pending import Pending, deferred, replaced_here, write_pending

    raw_dir = config.data_dir / "raw"
    sources = raw_sources(config)
    if not sources:
        (raw_dir / PENDING_NAME).unlink(missing_ok=True)
        return []
    record_path = raw_dir / RECORD_NAME
    records, lines = _read_record(record_path)
    results: list[MirrorResult] = []
    keys: dict[str, set[str]] = {}
    pending: list[Pending] = []
    empty: dict[str, bool] = {}  # host-day folder -> whether it holds no file (yet)
    in_lake = replaced_here(raw_dir, replaced)  # compacted, not recorded: not copied
    today = dt.datetime.now(dt.UTC).date()
    fs = filesystem
    for source in sources:
        location = source.location
        record = records.setdefault(location.url, {})
        listed = copied = left = 0
        keys[location.url] = seen_keys = set()
        try:
            fs = fs or s3_filesystem(endpoint_url=config.s3.endpoint_url, region=config.s3.region)
            raw_dir.mkdir(parents=True, exist_ok=True)
            with record_path.open("a", encoding="utf-8") as log:
                for folder, suffix in FOLDERS:
                    for info in _objects(fs, location, folder, suffix):
                        listed += 1
                        relative = location.relative(info.path)
                        seen_keys.add(relative)
                        known = record.get(relative)
                        if known and (known.size_bytes, known.mtime_ns) == (
                            info.size,
                            info.mtime_ns,
                        ):
                            continue
                        target = None if _odd_name(relative) else local_path(relative, source.site)
                        if (
                            defer
                            and not known
                            and target
                            and deferred(raw_dir, target, today, empty)
                        ):
                            left += 1
                            pending.append(Pending.of(location, relative, target, info))
                            continue  # not recorded: looked at again until compacted or copied
                        if target is None:
                            logger.warning(_refused(location, relative, source.site))
                            seen = Copied(info.size, info.mtime_ns, REFUSED)
                        elif not known and in_lake(target, info.size):
                            seen = Copied(info.size, info.mtime_ns, "")  # compacted: no copy
                        elif (opened := _copy(fs, info, raw_dir / target, known)) is None:
                            logger.warning(_gone(location, relative))
                            continue  # not recorded: listed again, looked at again
                        else:
                            seen = opened
                            copied += seen.etag != (known.etag if known else None)
                        record[relative] = seen
                        log.write(json.dumps(_line(location, relative, seen)) + "\n")
                        log.flush()
                        lines += 1
                os.fsync(log.fileno())
            if not listed:
                _check_bucket(fs, source, config.s3.endpoint_url)
        except OSError as exc:
            endpoint = f" at {config.s3.endpoint_url}" if config.s3.endpoint_url else ""
            raise GpufleetError(
                f"cannot read the raw files from {location.url}{endpoint}: "
                f"{describe_error(exc)} ({copied} new file(s) copied before are kept for the "
                "next ingest)"
            ) from exc
        if copied:
            logger.info(
                "copied %d new or changed file(s) of %s into %s", copied, location.url, raw_dir
            )
        if left:
            logger.info("left %d new file(s) of %s for the Dask workers", left, location.url)
        results.append(MirrorResult(location.url, listed, copied, left))
    # Replaced whole, not removed first: an ingest running meanwhile reads its list.
    write_pending(raw_dir, pending)
    if (
        lines > 2 * sum(map(len, keys.values())) + 1000
    ):  # mostly lines of objects copied again or gone
        kept = {  # (an object listed but not recorded, pending or gone, is not kept)
            url: {key: records[url][key] for key in sorted(found) if key in records[url]}
            for url, found in keys.items()
        }
        _rewrite_record(record_path, kept)
    return results


def stored_objects(config: Config) -> dict[str, StoredObject]:
    """The sample objects copied into `<data_dir>/raw/samples`, by their copy's path below
    the data directory (`raw/samples/...`), as the record names them: what a Dask worker
    reads from the store instead of the copy (docs/dask.md); and those not copied
    (`pending.py`)."""
    from gpufleet.integrations.pending import read_pending  # (a cycle)

    records, _ = _read_record(config.data_dir / "raw" / RECORD_NAME)
    found = {item.path: item.stored for item in read_pending(config)}
    for source in raw_sources(config):
        location = source.location
        for key, seen in records.get(location.url, {}).items():
            if seen.etag == REFUSED or not key.startswith("samples/"):
                continue
            if (target := local_path(key, source.site)) is not None:
                relative = f"raw/{target}"
                found[relative] = StoredObject(
                    relative=relative,
                    path=location.path(key),
                    size_bytes=seen.size_bytes,
                    etag=seen.etag,
                )
    return found


def local_path(relative: str, site: str | None) -> str | None:
    """Where the object `relative` (below its location) goes below `<data_dir>/raw`: the
    same path for the top-level location; for a site's, a sample file's `host=<host>`
    folder becomes `host=<host>@<site>` and an allocation or job file's `<name>.csv`
    becomes `<name>@<site>.csv` (two sites' files of one name stay two). None: a sample
    file of a site's store outside a `host=` folder, or in one that names another site."""
    if site is None:
        return relative
    parts = relative.split("/")
    if parts[0] != "samples":
        stem, dot, suffix = parts[-1].rpartition(".")
        parts[-1] = f"{stem}@{site}{dot}{suffix}"
        return "/".join(parts)
    for index, part in enumerate(parts[1:-1], start=1):
        if part.startswith("host="):
            host, named = folder_host(part.removeprefix("host="))
            if named not in (None, site):
                return None
            parts[index] = "host=" + host_folder(host, site)
            return "/".join(parts)
    return None


def _odd_name(relative: str) -> bool:
    """Whether an object's name (as listed) holds a control character, or U+FFFD: the
    replacement character the listing gives for one it cannot carry (SeaweedFS, for `\x1b`),
    a name the object cannot be opened by."""
    return not relative.isprintable() or _UNCARRIED in relative


def _shown(location: S3Location, relative: str) -> str:
    """An object's URL on one printable line: control characters and U+FFFD escaped."""
    return printable(f"{location.url}/{relative}").replace(_UNCARRIED, "\\ufffd")


def _refused(location: S3Location, relative: str, site: str | None) -> str:
    if _odd_name(relative):
        return (
            f"{_shown(location, relative)}: not copied: its name holds a control character "
            "(\\ufffd where the store's listing cannot carry it); rename or delete the object"
        )
    return (
        f"{_shown(location, relative)}: not copied: a sample file of site {site}'s "
        f"raw_location must be in a host=<host>/ or host=<host>@{site}/ folder, not another "
        "site's"
    )


def _gone(location: S3Location, relative: str) -> str:
    return (
        f"{_shown(location, relative)}: not copied: listed, but not found when opened (deleted "
        "since, or the store lists it by another name); the next ingest looks again"
    )


def _check_bucket(fs: pafs.FileSystem, source: RawSource, endpoint_url: str) -> None:
    """GpufleetError when the bucket of a store that listed nothing does not exist (its
    listing is empty all the same)."""
    location = source.location
    if fs.get_file_info(location.bucket).type != pafs.FileType.NotFound:
        return
    setting = f"clusters.{source.site}.raw_location" if source.site else "raw_location"
    store = f"at {endpoint_url}" if endpoint_url else "in AWS S3"
    raise GpufleetError(
        f"'{setting}' ({location.url}): no bucket {location.bucket!r} {store}: create it, or "
        "correct the setting"
    )


def _objects(
    fs: pafs.FileSystem, location: S3Location, folder: str, suffix: str
) -> list[pafs.FileInfo]:
    """The visible objects of one folder (no part of the name starting with `.` or `_`,
    the local readers' rule), sorted by name."""
    selector = pafs.FileSelector(location.path(folder), recursive=True, allow_not_found=True)
    found = [
        info
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File
        and info.path.endswith(suffix)
        and not any(part.startswith((".", "_")) for part in location.relative(info.path).split("/"))
    ]
    return sorted(found, key=lambda info: info.path)


def _copy(
    fs: pafs.FileSystem, info: pafs.FileInfo, target: Path, known: Copied | None
) -> Copied | None:
    """Copy one object to `target` (a temporary `.` name, fsync, rename) unless its ETag
    says it holds the bytes copied before; returns what was seen, None when the object is
    not found by its listed name."""
    try:
        stream = fs.open_input_stream(info.path)
    except FileNotFoundError:
        return None
    with stream as source:
        etag = _etag(source.metadata())
        if known is not None and etag and etag == known.etag:
            return Copied(info.size, info.mtime_ns, etag)  # uploaded again, same bytes
        temporary = target.with_name(f".{target.name}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with temporary.open("wb") as out:
                while chunk := source.read(_CHUNK_BYTES):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
                size = out.tell()
            if size != info.size:
                raise OSError(f"{info.path} changed while it was read ({size} bytes copied)")
            os.replace(temporary, target)
            _fsync_directory(target.parent)  # the rename is durable before it is recorded
        finally:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
    return Copied(info.size, info.mtime_ns, etag)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _etag(metadata: dict[str, bytes] | dict[str, str]) -> str:
    for name, value in metadata.items():
        if name.lower() == "etag":
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""


def _line(location: S3Location, relative: str, seen: Copied) -> dict[str, object]:
    return {
        "location": location.url,
        "key": relative,
        "size_bytes": seen.size_bytes,
        "mtime_ns": seen.mtime_ns,
        "etag": seen.etag,
    }


def _read_record(path: Path) -> tuple[dict[str, dict[str, Copied]], int]:
    """The last copy of each object, by location and key (a torn last line is skipped),
    and the number of lines."""
    records: dict[str, dict[str, Copied]] = {}
    count = 0
    with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8") as lines:
        for text in lines:
            count += 1
            try:
                line = json.loads(text)
                records.setdefault(str(line["location"]), {})[line["key"]] = Copied(
                    int(line["size_bytes"]), int(line["mtime_ns"]), str(line["etag"])
                )
            except (ValueError, KeyError, TypeError):
                continue
    return records, count


def _rewrite_record(path: Path, records: dict[str, dict[str, Copied]]) -> None:
    """The record of the objects listed now, one line each (a location no longer configured
    goes: the record serves the configured locations alone)."""
    # a name of its own for the new file: two ingests' mirrors may rewrite it at once
    replace_lines(
        path,
        (
            json.dumps(_line(S3Location.parse(url), key, seen)) + "\n"
            for url, record in records.items()
            for key, seen in record.items()
        ),
    )
