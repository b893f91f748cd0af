"""`gpufleet collect --upload s3://bucket/prefix`: ship each finished sample file to a bucket.

The local `raw/samples` is the outbox: every visible `*.parquet` there is a file not yet
uploaded. Each is sent whole, oldest first, to `<prefix>/samples/date=.../host=.../<name>`
(one PUT for a small file, a multipart upload for a large one: either way S3 shows the
object only once it is complete, never a partial file), and removed locally once the store
confirms it holds that many bytes. While the store is down the files wait on the local disk
and are tried again at the next tick after a backoff (the collector's interval, doubling up
to 5 minutes); a restart finds them where they were. A crash between the upload and the
removal uploads the same bytes again, under the same key: nothing is lost or doubled.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow.fs as pafs

from gpufleet.storage.s3 import S3Location, describe_error

MAX_BACKOFF_S = 300.0
SAMPLES_FOLDER = "samples"  # below the location's prefix, as below the data directory's raw/


class Uploader:
    """Uploads the files waiting under `samples_root` to `location`, a round at a time."""

    def __init__(
        self,
        *,
        samples_root: Path,
        location: S3Location,
        filesystem: pafs.FileSystem,
        say: Callable[[str, str], None],
        monotonic: Callable[[], float],
        retry_s: float,
    ) -> None:
        if not retry_s > 0:
            raise ValueError(f"retry_s must be a positive number of seconds, got {retry_s}")
        self.samples_root = samples_root
        self.location = location
        self._fs = filesystem
        self._say = say
        self._monotonic = monotonic
        self._first_retry_s = float(retry_s)
        self._retry_s = float(retry_s)
        self._next_try = 0.0
        self._failure = ""  # the last failure's reason, printed once while it lasts
        self.uploaded = 0  # files uploaded by this process

    def pending(self) -> list[Path]:
        """The finished files not yet uploaded, oldest first (a file's name starts with the
        UTC time of its first tick; temporary `.` names are skipped)."""
        if not self.samples_root.is_dir():
            return []
        found = [
            path
            for path in self.samples_root.rglob("*.parquet")
            if not any(part.startswith((".", "_")) for part in path.parts[-3:])
        ]
        return sorted(found, key=lambda path: (path.name, path.as_posix()))

    def key(self, path: Path) -> str:
        """The object's name: the file's place below raw/, below the location's prefix."""
        relative = path.relative_to(self.samples_root).as_posix()
        return self.location.path(f"{SAMPLES_FOLDER}/{relative}")

    def due(self) -> bool:
        return self._monotonic() >= self._next_try

    def upload(self, *, budget_s: float | None = None) -> bool:
        """One round: upload the waiting files, oldest first, until none is left (True), the
        store fails (False: the next round waits for the backoff) or `budget_s` seconds have
        gone (False: the rest go at the next round, without waiting)."""
        started = self._monotonic()
        for path in self.pending():
            if budget_s is not None and self._monotonic() - started >= budget_s:
                return False
            try:
                self._upload_one(path)
            except FileNotFoundError:
                continue  # gone meanwhile: nothing to upload
            except OSError as exc:
                self._failed(path, exc)
                return False
            self.uploaded += 1
        if self._failure:
            self._say("warning", f"uploads to {self.location.url} go through again")
        self._failure = ""
        self._retry_s = self._first_retry_s
        self._next_try = 0.0
        return True

    def _upload_one(self, path: Path) -> None:
        data = path.read_bytes()
        key = self.key(path)
        with self._fs.open_output_stream(key) as out:
            out.write(data)
        stored = self._fs.get_file_info(key)
        if stored.type != pafs.FileType.File or stored.size != len(data):
            raise OSError(f"the store holds {stored.size} bytes of {len(data)} for {key}")
        path.unlink()
        for folder in (path.parent, path.parent.parent):  # host=..., then date=...
            if folder == self.samples_root:
                break
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only when empty

    def _failed(self, path: Path, exc: OSError) -> None:
        reason = describe_error(exc)
        if reason != self._failure:  # not the same line at every retry
            waiting = len(self.pending())
            self._say(
                "error",
                f"cannot upload {path.name} to {self.location.url}: {reason}; {waiting} "
                f"file(s) wait in {self.samples_root} and are retried, every "
                f"{self._retry_s:g} s and up to every {MAX_BACKOFF_S:g} s",
            )
        self._failure = reason
        self._next_try = self._monotonic() + self._retry_s
        self._retry_s = min(self._retry_s * 2, MAX_BACKOFF_S)
