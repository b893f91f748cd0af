"""The collector files a host-day's compacted file replaced, named in its own footer.

Compaction deletes a host-day's collector files, and their rows in `loaded_files` give way
to the compacted file's. A file of one of those names that appears again (an object
overwritten in the bucket and copied again, a file put back from a backup) would then look
new. So each compacted file keeps, in its Parquet key-value metadata, the name and size of
every file it replaced as they were loaded, and the ingest judges such a file by them as it
judges a loaded file (`raw/loaded.py`). A host-day compacted again (a late file) keeps
the names its compacted file named before; a file written again from the warehouse
(`content.py`) keeps those its edited file still names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPLACED_KEY = b"gpufleet.replaced_files"


def replaced_metadata(files: Mapping[str, int]) -> dict[bytes, bytes]:
    """The key-value metadata naming `files` (size in bytes, by name), sorted by name."""
    record = {name: int(files[name]) for name in sorted(files)}
    return {REPLACED_KEY: json.dumps(record, separators=(",", ":")).encode()}


def replaced_files(compacted: Path) -> dict[str, int]:
    """The files the compacted file `compacted` replaced (size in bytes, by name); empty
    when it names none (written by a release before the record, or unreadable)."""
    try:
        metadata = pq.read_schema(compacted).metadata or {}
        record = json.loads(metadata.get(REPLACED_KEY, b"{}"))
        return {str(name): int(size) for name, size in record.items()}
    except (OSError, ValueError, TypeError, AttributeError, pa.ArrowException):
        return {}
