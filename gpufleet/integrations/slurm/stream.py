"""A `sacct --json` or `squeue --json` payload read as a stream: its jobs one by one, as the
bytes are read, so that the import of a hundred thousand jobs never holds the whole JSON
document (about 2 KB a job as text, ten times that as Python objects), only each job's
parsed record.

The checks are `load_payload`'s, with the same lines and in the same order: JSON, an
object, no error Slurm reported, a known schema, `jobs` a list. Slurm 22.05 prints `meta`
and `errors` before the jobs, the data_parser releases after them: each is read first in a
pass of its own over the stream (a saved file, or the command's output spooled to one),
which stops where it is found, then the jobs in another. ijson (yajl's C parser) reads
every pass; a pass that does not build what it reads costs about two thirds of the one
that does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TypeVar

import ijson

from gpufleet.errors import GpufleetError
from gpufleet.integrations.slurm.payload import (
    Payload,
    check_errors,
    checked_jobs,
    load_payload,
    schema_version,
)

CHUNK_BYTES = 1 << 16  # what each read of the stream asks for
_OVERFLOW = "integer overflow"  # yajl's error for an integer beyond 64 bits
_MISSING = object()

Parsed = TypeVar("Parsed")


class IntegerOverflow(Exception):
    """An integer yajl cannot read (beyond 64 bits): the payload is read whole instead."""


class _Counted:
    """The stream's reads, counted (`PayloadStream.bytes_read`)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.bytes_read += len(data)
        return data


class PayloadStream:
    """The payload in `stream` (binary, seekable): its header checked at once, its jobs
    read as they are asked for."""

    def __init__(self, stream: IO[bytes], *, source: str) -> None:
        self.stream = stream
        self.source = source
        self.bytes_read = 0  # by the jobs' pass, so far
        if not stream.read(CHUNK_BYTES).lstrip().startswith(b"{"):
            # Not an object (or not JSON): what load_payload says of it, from the whole text.
            stream.seek(0)
            load_payload(stream.read().decode("utf-8", errors="replace"), source=source)
            raise GpufleetError(f"{source}: expected a JSON object with 'meta' and 'jobs'")
        errors, meta = self._first("errors"), self._first("meta")
        check_errors(None if errors is _MISSING else errors, source)
        self.version = schema_version(None if meta is _MISSING else meta, source)

    def jobs(self) -> Iterator[Any]:
        """Each job object, in order. `jobs` not a list raises its `GpufleetError` line."""
        self.stream.seek(0)
        counted = _Counted(self.stream)
        seen = 0
        with _read_as(self.source):
            for job in ijson.items(counted, "jobs.item", use_float=True, buf_size=CHUNK_BYTES):
                self.bytes_read = counted.bytes_read
                seen += 1
                yield job
        if not seen:  # was `jobs` an empty list, or no list at all?
            jobs = self._first("jobs")
            checked_jobs(None if jobs is _MISSING else jobs, self.source)

    def _first(self, prefix: str) -> Any:
        """The value at `prefix` (a top-level key), read from the stream's start up to it."""
        self.stream.seek(0)
        with _read_as(self.source):
            found = ijson.items(self.stream, prefix, use_float=True, buf_size=CHUNK_BYTES)
            return next(found, _MISSING)


@contextmanager
def _read_as(source: str) -> Iterator[None]:
    """yajl's errors as the payload's line (`not JSON (...)`, with its first line: yajl's
    has three), and an integer beyond 64 bits as `IntegerOverflow`."""
    try:
        yield
    except ijson.JSONError as exc:
        text = str(exc).strip()
        if _OVERFLOW in text:
            raise IntegerOverflow(text) from exc
        first_line = text.splitlines()[0] if text else type(exc).__name__
        raise GpufleetError(f"{source}: not JSON ({first_line})") from exc


def parse_stream(stream: IO[bytes], *, source: str, parse: Callable[[Payload], Parsed]) -> Parsed:
    """`parse` (parse_sacct, parse_squeue: a function of the payload alone, which may be
    called twice) of the payload in `stream`, its jobs read one by one as the stream is. An
    integer beyond 64 bits, which no Slurm release prints (its unset numbers are null or
    `{"set": false}`) but a damaged file may hold, is read as Python's `json` reads it:
    `parse` starts again on the payload loaded whole."""
    try:
        payload = PayloadStream(stream, source=source)
        return parse(Payload(source, payload.version, payload.jobs()))
    except IntegerOverflow:
        stream.seek(0)
        text = stream.read().decode("utf-8", errors="replace")
        return parse(load_payload(text, source=source))
