"""`gpufleet collect` as a process: the collector started, ticking until SIGTERM or SIGINT,
flushed on the way out, and its finished files uploaded when asked (`upload.py`)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.collectors.collect import Collector
from gpufleet.collectors.stopflag import StopFlag
from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    from gpufleet.collectors.upload import Uploader


def run_collector(
    *,
    data_dir: Path,
    interval_s: float,
    flush_s: float,
    host: str | None = None,
    slurm_gpustat: Path | None = None,
    upload: str | None = None,
    s3_endpoint_url: str = "",
    s3_region: str = "",
    cluster: str | None = None,
) -> int:
    """`gpufleet collect`: returns the exit status. SIGTERM/SIGINT flush and return 0.

    `upload`: an `s3://bucket/prefix` each finished file is shipped to (`upload.py`),
    through `s3_endpoint_url` (empty: AWS) in `s3_region`. `cluster`: the site recorded in
    every sample (None: none)."""
    stop = StopFlag()
    collector: Collector | None = None
    try:
        with stop.on_signals(signal.SIGTERM, signal.SIGINT):
            try:
                collector = Collector(
                    data_dir=data_dir,
                    interval_s=interval_s,
                    flush_s=flush_s,
                    host=host,
                    slurm_gpustat=slurm_gpustat,
                    cluster=cluster,
                )
                if upload:
                    collector.uploader = _uploader(
                        collector, upload, endpoint_url=s3_endpoint_url, region=s3_region
                    )
                collector.start()
            except ValueError as exc:
                raise GpufleetError(str(exc)) from exc
            print(
                f"gpufleet: collecting {len(collector.gpus)} GPU(s) on {collector.host}"
                + (f" at site {collector.cluster}" if collector.cluster else "")
                + f" every "
                f"{interval_s:g} s into {collector.samples_root}"
                + (f", Slurm jobs from {slurm_gpustat}" if slurm_gpustat is not None else "")
                + (f", uploading each file to {upload}" if upload else "")
                + f" (pid {os.getpid()})",
                file=sys.stderr,
                flush=True,
            )
            collector.run(stop)
            return 0 if collector.close() else 1
    except GpufleetError as exc:
        print(f"gpufleet: error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        stop.close()


def _uploader(collector: Collector, url: str, *, endpoint_url: str, region: str) -> Uploader:
    """The collector's uploader to `url` (imported here: pyarrow's S3 support is loaded only
    by a collector that uploads)."""
    from gpufleet.collectors.upload import Uploader
    from gpufleet.storage.s3 import S3Location, s3_filesystem

    return Uploader(
        samples_root=collector.samples_root,
        location=S3Location.parse(url),
        # One retry inside the SDK: the uploader's own backoff does the rest.
        filesystem=s3_filesystem(endpoint_url=endpoint_url, region=region, max_attempts=2),
        say=collector._say,
        monotonic=collector._monotonic,
        retry_s=collector.interval_s,
    )
