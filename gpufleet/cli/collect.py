"""`gpufleet collect`: the one command a GPU host runs, with nvidia-ml-py and pyarrow alone."""

from __future__ import annotations

import argparse
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
            "midnight and on SIGTERM/SIGINT the spool becomes one Parquet file."
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
        "--slurm-gpustat",
        type=Path,
        metavar="DIR",
        help=(
            "read jobstats' Slurm prolog files in DIR (usually /run/gpustat: one file per GPU "
            "index or MIG UUID holding '<job id> <uid>') each tick, and record the job holding "
            "each GPU in alloc_job_id/alloc_user (default: not read; both null)"
        ),
    )
    parser.set_defaults(handler=run_collect, needs_pipeline=False)


def run_collect(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.collectors.collect import run_collector

    return run_collector(
        data_dir=config.data_dir,
        interval_s=args.interval,
        flush_s=args.flush,
        host=args.host,
        slurm_gpustat=args.slurm_gpustat,
    )
