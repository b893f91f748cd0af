"""Object storage: an `s3://bucket/prefix` location and the S3 filesystem that reaches it.

It needs pyarrow alone and imports nothing else of gpufleet, so that the collector's
`--upload` uses it on a GPU host; the ingest's copy of a bucket's raw files into the local
`<data_dir>/raw` is an integration's (`gpufleet.integrations.mirror`)."""

from gpufleet.storage.s3 import S3_SCHEME, S3Location, describe_error, s3_filesystem

__all__ = ["S3_SCHEME", "S3Location", "describe_error", "s3_filesystem"]
