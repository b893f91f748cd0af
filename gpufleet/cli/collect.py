"""`gpufleet collect`: the one command a GPU host runs, with nvidia-ml-py and pyarrow alone."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from gpufleet.cli.common import positive_float
from gpufleet.config import Config


def add_collect(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "collect",
        help="sample this host's GPUs through NVML into raw/samples",
        description=(
            "Sample every GPU of this host through NVML each --interval and write Parquet "
            "files under <data-dir>/raw/samples. Each tick is appended to a spool on disk "
            "first, so a kill loses at most the tick in progress; every --flush, at UTC "
            "midnight and on SIGTERM/SIGINT the spool becomes one Parquet file. With --upload "
            "each finished file is then shipped to an S3 bucket and removed locally once the "
            "store has it."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet collect --data-dir /var/lib/gpufleet --interval 10 --flush 600\n"
            "  gpufleet collect --slurm-gpustat /run/gpustat --cluster site-a\n"
            "  gpufleet collect --upload s3://gpufleet-raw/site-a"
        ),
    )
    parser.add_argument(
        "--interval",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between samples (default: 10)",
    )
    parser.add_argument(
        "--flush",
        type=positive_float,
        default=600.0,
        metavar="SECONDS",
        help="seconds between Parquet files (default: 600)",
    )
    parser.add_argument(
        "--host", metavar="NAME", help="host name to record (default: this machine's name)"
    )
    parser.add_argument(
        "--cluster",
        type=cluster_name,
        metavar="NAME",
        help=(
            "the site this host belongs to, recorded in every sample's cluster column and in "
            "its folder's name (host=<host>@<site>), so that hosts of the same name at two "
            "sites never mix (default: the configuration's cluster; none: null)"
        ),
    )
    parser.add_argument(
        "--slurm-gpustat",
        type=Path,
        metavar="DIR",
        help=(
            "read jobstats' Slurm prolog files in DIR (usually /run/gpustat: one file per GPU "
            "index or MIG UUID holding '<job id> <uid>') each tick, and record the job holding "
            "each GPU in alloc_job_id/alloc_user (default: not read; both null)"
        ),
    )
    parser.add_argument(
        "--upload",
        type=s3_url,
        metavar="S3_URL",
        help=(
            "upload each finished file to s3://bucket/prefix (under <prefix>/samples/, as "
            "under raw/samples), through [s3] endpoint_url and region, with the standard AWS "
            "credentials; a file is removed locally once the store has it, and waits on the "
            "local disk while the store is down (default: no upload)"
        ),
    )
    parser.set_defaults(handler=run_collect, needs_pipeline=False)


def s3_url(text: str) -> str:
    """An `s3://bucket/prefix` argument, checked."""
    from gpufleet.storage.s3 import S3Location

    try:
        return S3Location.parse(text).url
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def cluster_name(text: str) -> str:
    """A `--cluster` argument, checked."""
    from gpufleet.site_names import check_cluster

    try:
        return check_cluster(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def run_collect(args: argparse.Namespace, config: Config) -> int:
    # Arrow's C++ buffers (the Parquet writer's among them) from malloc, not mimalloc, whose
    # arenas stay resident between flushes, a share of a collector's memory: read once, when
    # pyarrow is first imported, which is below. An ARROW_DEFAULT_MEMORY_POOL set wins.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    from gpufleet.collectors.service import run_collector

    return run_collector(
        data_dir=config.data_dir,
        interval_s=args.interval,
        flush_s=args.flush,
        host=args.host,
        slurm_gpustat=args.slurm_gpustat,
        upload=args.upload,
        s3_endpoint_url=config.s3.endpoint_url,
        s3_region=config.s3.region,
        cluster=args.cluster or config.cluster or None,
    )
