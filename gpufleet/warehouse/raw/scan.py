"""Finding the raw sample files: every visible `*.parquet` below raw/samples, and the folders
that could not be read, with why."""

from __future__ import annotations

import logging
import os

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.integrations.pending import read_pending
from gpufleet.warehouse.base.sample_files import SampleFile, SampleListing, Unreadable
from gpufleet.warehouse.lake.content import is_compacted

logger = logging.getLogger("gpufleet.ingest")

LINKED_FOLDER = (
    "{}: a symbolic link to a folder, not followed: its files are not loaded. Move the "
    "folder itself there (compaction rebuilds a host-day's folder in place)"
)


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def list_sample_files(config: Config) -> SampleListing:
    """Every visible `*.parquet` below raw/samples, and the objects a Dask ingest reads from
    the store without a copy here (`_pending`), sorted by path (`os.scandir` with string
    paths lists 126,000 files in a third of `os.walk` with `Path`s' time), and the folders
    (or files) that could not be read, with why: a folder gone meanwhile, or not a folder,
    is simply not listed (as `os.walk` skips it), but one refused (permission denied, an
    I/O error on a share) is named, since its files would otherwise never load unseen.

    A folder linked in (a symbolic link) is not followed, and named in a warning:
    compaction swaps a host-day's folder for a rebuilt one, which would replace the link,
    not the folder it points to."""
    found: list[SampleFile] = []
    unreadable: list[Unreadable] = []
    relative = config.samples_dir.relative_to(config.data_dir).as_posix()
    folders = [(os.fspath(config.samples_dir), relative)]  # (path, path below data_dir)
    while folders:
        directory, prefix = folders.pop()
        try:
            entries = os.scandir(directory)
        except (FileNotFoundError, NotADirectoryError):
            continue  # gone, or not a folder: os.walk skips it alike
        except OSError as exc:
            unreadable.append(Unreadable(prefix, _why(exc)))
            continue
        with entries:
            try:
                for entry in entries:
                    if _hidden(entry.name):
                        continue
                    try:
                        file = _listed(entry, prefix, folders)
                    except FileNotFoundError:
                        continue  # compacted or quarantined under our feet
                    except OSError as exc:
                        unreadable.append(Unreadable(f"{prefix}/{entry.name}", _why(exc), False))
                        continue
                    if file is not None:
                        found.append(file)
            except OSError as exc:  # the folder failed half-way (a share gone)
                unreadable.append(Unreadable(prefix, _why(exc)))
    found += _pending(config, found)
    found.sort(key=lambda f: f.path)
    return SampleListing(found, tuple(sorted(unreadable, key=lambda u: u.path)))


def _pending(config: Config, found: list[SampleFile]) -> list[SampleFile]:
    """The objects a Dask ingest left in the store (`integrations/pending.py`), as the
    files they would be: the store's size, the time the mirror listed them (a copy's time
    is when it was copied); none of a host-day whose compacted file is here (it replaced
    them since)."""
    compacted = {f.directory for f in found if is_compacted(f.path)}
    return [
        SampleFile(item.path, item.size_bytes, item.listed_ns)
        for item in read_pending(config)
        if item.directory not in compacted
    ]


def _listed(
    entry: os.DirEntry[str], prefix: str, folders: list[tuple[str, str]]
) -> SampleFile | None:
    """The sample file `entry` is, or None (a folder, queued on `folders`, or another file)."""
    if entry.is_dir():
        if not entry.is_symlink():
            folders.append((entry.path, f"{prefix}/{entry.name}"))
        else:
            logger.warning(printable(LINKED_FOLDER.format(f"{prefix}/{entry.name}")))
        return None
    if not entry.name.endswith(".parquet"):
        return None
    stat = entry.stat()
    return SampleFile(f"{prefix}/{entry.name}", stat.st_size, stat.st_mtime_ns)


def _why(exc: OSError) -> str:
    """The system's words for an error, in lower case: "permission denied"."""
    return (exc.strerror or type(exc).__name__).lower()


def find_sample_files(config: Config) -> list[SampleFile]:
    """The sample files of `list_sample_files`, each folder that could not be read named in
    a warning of the log."""
    listing = list_sample_files(config)
    for item in listing.unreadable:
        logger.warning(str(item))
    return listing.files
