"""An `s3://bucket/prefix` location and the pyarrow S3 filesystem that reaches it.

Credentials come from where every AWS client finds them (AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws, an instance role), never from gpufleet's
configuration file, and are never printed. The endpoint (an S3-compatible store: MinIO,
SeaweedFS, Ceph's radosgw...) and the region come from `[s3]`.

pyarrow is imported when a filesystem is made: the configuration's checks parse locations
without it.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow.fs as pafs

S3_SCHEME = "s3://"
# S3's bucket names: 3 to 63 lowercase letters, digits, dots and hyphens.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_CONNECT_TIMEOUT_S = 5.0
_REQUEST_TIMEOUT_S = 60.0
_CHUNK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class S3Location:
    """A bucket and a key prefix (no leading or trailing `/`; empty: the bucket's top)."""

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """`s3://bucket` or `s3://bucket/some/prefix`; ValueError says what is wrong."""
        if not url.startswith(S3_SCHEME):
            raise ValueError(f"not an s3://bucket/prefix URL: {url!r}")
        bucket, _, prefix = url[len(S3_SCHEME) :].partition("/")
        if not _BUCKET.match(bucket):
            raise ValueError(f"not an S3 bucket name: {bucket!r} (in {url!r})")
        prefix = prefix.strip("/")
        if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
            raise ValueError(f"an empty, '.' or '..' part in the prefix of {url!r}")
        if not prefix.isprintable():
            raise ValueError(f"a control character in the prefix of {url!r}")
        return cls(bucket, prefix)

    @property
    def url(self) -> str:
        return f"{S3_SCHEME}{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")

    def path(self, relative: str = "") -> str:
        """pyarrow's name of the object (or folder) `relative` below the prefix:
        `bucket/prefix/relative`."""
        parts = [self.bucket, self.prefix, relative.strip("/")]
        return "/".join(part for part in parts if part)

    def relative(self, path: str) -> str:
        """The inverse of `path`: `samples/date=.../x.parquet` of `bucket/prefix/samples/...`."""
        top = self.path() + "/"
        if not path.startswith(top):
            raise ValueError(f"{path!r} is not below {self.url}")
        return path[len(top) :]


def s3_filesystem(
    *, endpoint_url: str = "", region: str = "", max_attempts: int = 3
) -> pafs.S3FileSystem:
    """The S3 filesystem for `[s3]`'s endpoint (empty: AWS) and region (empty: the AWS
    configuration's, else us-east-1), with the standard credential chain.

    A file written through it is sent as one PUT when it is small (under pyarrow's part
    size, 10 MB at the least) and as a multipart upload otherwise: in both cases the
    object becomes visible only when it is complete."""
    import pyarrow.fs as pafs

    options: dict[str, object] = {
        "connect_timeout": _CONNECT_TIMEOUT_S,
        "request_timeout": _REQUEST_TIMEOUT_S,
        # Open the object at the first write: a small file then goes as one PutObject.
        "allow_delayed_open": True,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=max_attempts),
    }
    if endpoint_url:
        options["endpoint_override"] = endpoint_url
    if region:
        options["region"] = region
    return pafs.S3FileSystem(**options)


def describe_error(exc: BaseException) -> str:
    """The part of an AWS SDK error a person needs ("Could not connect to server",
    "Access Denied"...), on one line, without the request's details."""
    text = " ".join(str(exc).split())
    match = re.search(r"AWS Error (\S+) during (\w+) operation: (.*)", text)
    if match is None:
        return text
    code, operation, detail = match.groups()
    detail = re.sub(r"curlCode: \d+, ", "", detail).split("; Details:")[0].strip()
    return f"{detail or code} ({operation})"


@dataclass(frozen=True, kw_only=True)
class StoredObject:
    """A collector file that a Dask worker reads from the store itself (docs/dask.md): its
    object, what the pipeline host's copy of it holds, and where the worker puts its own."""

    relative: str  # the copy's path below the data directory: raw/samples/date=D/host=H/x
    path: str  # pyarrow's name of the object: bucket/prefix/key
    size_bytes: int  # of the pipeline host's copy
    etag: str  # the object's ETag when copied ("" when the store gave none)


@contextlib.contextmanager
def downloaded(
    objects: Iterable[StoredObject], *, endpoint_url: str, region: str
) -> Iterator[Path]:
    """A new folder of this machine's own (a Dask worker's) holding each object at its
    `relative` path, copied through pyarrow's S3 filesystem with the credentials of this
    machine's environment; removed on the way out. OSError, in one line, when one cannot
    be read, or holds other bytes than the pipeline host's copy (another size or ETag:
    overwritten since)."""
    fs = s3_filesystem(endpoint_url=endpoint_url, region=region)
    with tempfile.TemporaryDirectory(prefix="gpufleet-s3-", ignore_cleanup_errors=True) as own:
        root = Path(own)
        for item in objects:
            target = root / item.relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(item.path) as source, target.open("wb") as out:
                etag = _etag(source.metadata())
                while chunk := source.read(_CHUNK_BYTES):
                    out.write(chunk)
                size = out.tell()
            if size != item.size_bytes or (etag and item.etag and etag != item.etag):
                raise OSError(
                    f"s3://{item.path}: other bytes than the pipeline host's copy ({size} "
                    f"bytes, ETag {etag or '-'}; copied: {item.size_bytes} bytes, ETag "
                    f"{item.etag or '-'}): overwritten since"
                )
        yield root


def _etag(metadata: Mapping[str, bytes] | Mapping[str, str]) -> str:
    for name, value in metadata.items():
        if name.lower() == "etag":
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""
