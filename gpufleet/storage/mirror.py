"""`raw_location = "s3://bucket/prefix"`: before an ingest lists its files, the new and changed
objects under `<prefix>/samples/`, `<prefix>/allocations/` and `<prefix>/jobs/` are copied
into the local `<data_dir>/raw/...` at the same relative path, each under a temporary `.`
name, flushed and renamed, so that everything after it (batches, quarantine, a file changed
after it was loaded) works on local files as it always has.

An object is judged by its listing: one whose (key, size, last-modified time) is the one
recorded at its last copy is not looked at again; any other is opened, and copied unless its
ETag is the one recorded (the same bytes uploaded again). The record is
`<data_dir>/raw/.s3-objects.jsonl`, a line per copy (the last line of a key wins), appended
only after the copy is renamed into place: a crash in between copies the object again, with
the same content, which the ingest then finds to hold the rows it loaded.

S3's last-modified time counts whole seconds: an object overwritten with as many bytes
within the second of its copy is not seen to change.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.storage.s3 import S3_SCHEME, S3Location, describe_error, s3_filesystem

logger = logging.getLogger("gpufleet.ingest")

RECORD_NAME = ".s3-objects.jsonl"
# The folders copied, each with the files its local reader takes.
FOLDERS = (("samples", ".parquet"), ("allocations", ".csv"), ("jobs", ".csv"))
_CHUNK_BYTES = 8 * 1024 * 1024


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


def reads_object_storage(config: Config) -> bool:
    return config.raw_location.startswith(S3_SCHEME)


def mirror_raw_location(
    config: Config, *, filesystem: pafs.FileSystem | None = None
) -> MirrorResult | None:
    """Copy the new and changed objects of `config.raw_location` into `<data_dir>/raw`;
    None when the raw files are local. GpufleetError, in one line naming the location,
    when the store cannot be listed or read: the objects copied before it are whole and
    recorded, and nothing half-copied is left visible."""
    if not reads_object_storage(config):
        return None
    location = S3Location.parse(config.raw_location)
    raw_dir = config.data_dir / "raw"
    record_path = raw_dir / RECORD_NAME
    record, lines = _read_record(record_path, location)
    copied = listed = 0
    keys: set[str] = set()
    try:
        fs = filesystem or s3_filesystem(
            endpoint_url=config.s3.endpoint_url, region=config.s3.region
        )
        raw_dir.mkdir(parents=True, exist_ok=True)
        with record_path.open("a", encoding="utf-8") as log:
            for folder, suffix in FOLDERS:
                for info in _objects(fs, location, folder, suffix):
                    listed += 1
                    relative = location.relative(info.path)
                    keys.add(relative)
                    known = record.get(relative)
                    if known and (known.size_bytes, known.mtime_ns) == (info.size, info.mtime_ns):
                        continue
                    seen = _copy(fs, info, raw_dir / relative, known)
                    copied += seen.etag != (known.etag if known else None)
                    record[relative] = seen
                    log.write(json.dumps(_line(location, relative, seen)) + "\n")
                    log.flush()
                    lines += 1
            os.fsync(log.fileno())
    except OSError as exc:
        endpoint = f" at {config.s3.endpoint_url}" if config.s3.endpoint_url else ""
        raise GpufleetError(
            f"cannot read the raw files from {location.url}{endpoint}: {describe_error(exc)} "
            f"({copied} new file(s) copied before are kept for the next ingest)"
        ) from exc
    if lines > 2 * len(keys) + 1000:  # mostly lines of objects copied again or gone
        _rewrite_record(record_path, location, {key: record[key] for key in sorted(keys)})
    if copied:
        logger.info("copied %d new or changed file(s) of %s into %s", copied, location.url, raw_dir)
    return MirrorResult(location.url, listed, copied)


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


def _copy(fs: pafs.FileSystem, info: pafs.FileInfo, target: Path, known: Copied | None) -> Copied:
    """Copy one object to `target` (a temporary `.` name, fsync, rename) unless its ETag
    says it holds the bytes copied before; returns what was seen."""
    with fs.open_input_stream(info.path) as source:
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


def _read_record(path: Path, location: S3Location) -> tuple[dict[str, Copied], int]:
    """The last copy of each object of `location` (a torn last line is skipped), and the
    number of lines."""
    record: dict[str, Copied] = {}
    count = 0
    with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8") as lines:
        for text in lines:
            count += 1
            try:
                line = json.loads(text)
                if line["location"] == location.url:
                    record[line["key"]] = Copied(
                        int(line["size_bytes"]), int(line["mtime_ns"]), str(line["etag"])
                    )
            except (ValueError, KeyError, TypeError):
                continue
    return record, count


def _rewrite_record(path: Path, location: S3Location, record: dict[str, Copied]) -> None:
    """The record of the objects listed now, one line each (another location's lines go:
    the record serves the configured location alone)."""
    temporary = path.with_name(f"{path.name}.tmp")
    with temporary.open("w", encoding="utf-8") as out:
        for key, seen in record.items():
            out.write(json.dumps(_line(location, key, seen)) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
