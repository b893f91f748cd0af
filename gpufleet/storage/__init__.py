"""Object storage: an `s3://bucket/prefix` location, the S3 filesystem that reaches it, and
the ingest's copy of its raw files into the local `<data_dir>/raw` (`mirror.py`).

`s3.py` needs pyarrow alone (the collector's `--upload` uses it); `mirror.py` is the
pipeline's."""

from gpufleet.storage.s3 import S3_SCHEME, S3Location, describe_error, s3_filesystem

__all__ = ["S3_SCHEME", "S3Location", "describe_error", "s3_filesystem"]
