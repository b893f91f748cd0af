"""`gpufleet import slurm`: the jobs sacct and squeue know, as allocation rows
(docs/slurm.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpufleet.cli.common import progress
from gpufleet.cli.import_prometheus import iso_timestamp
from gpufleet.config import Config
from gpufleet.console import printable_lines


def add_slurm(imports: argparse._SubParsersAction) -> None:
    parser = imports.add_parser(
        "slurm",
        help="GPU allocations of Slurm jobs (sacct and squeue)",
        description=(
            "Ask sacct for the jobs that ran since the last import (all users: run it as\n"
            "root, SlurmUser or an operator) and squeue for the GPUs the running ones hold,\n"
            "and write one allocation row per job and GPU under <data-dir>/raw/allocations\n"
            "(slurm-<cluster>-<day>.csv); a job that ended has its rows closed. Every started\n"
            "GPU job also gets a job record under <data-dir>/raw/jobs (same file names). The\n"
            "team is the job's account, renamed by ref/accounts.csv ([slurm] team_from =\n"
            '"user": the user\'s team from ref/users.csv). A job that began and ended between\n'
            "two imports gets a job record but no rows: sacct does not say which GPUs it\n"
            "held. Then run 'gpufleet ingest' and 'gpufleet build'."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet import slurm --since 2026-11-01T00:00:00+00:00\n"
            "  gpufleet import slurm\n"
            "  gpufleet import slurm --sacct-json sacct.json --squeue-json squeue.json"
        ),
    )
    parser.add_argument(
        "--since",
        type=iso_timestamp,
        metavar="TIME",
        help="import the jobs that ran from TIME on, ISO-8601 with offset (needed the first "
        "time; default: an hour before the last import ended)",
    )
    parser.add_argument(
        "--sacct-json",
        type=Path,
        metavar="FILE",
        help="read this saved 'sacct --json --allusers --allocations --duplicates' output "
        "instead of running sacct",
    )
    parser.add_argument(
        "--squeue-json",
        type=Path,
        metavar="FILE",
        help="read this saved 'squeue --json --all' output instead of running squeue "
        "(with --sacct-json and without it, no squeue is read)",
    )
    parser.set_defaults(handler=run_import_slurm, needs_pipeline=False)


def run_import_slurm(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.integrations.slurm import import_slurm

    result = import_slurm(
        config,
        since=args.since,
        sacct_json=args.sacct_json,
        squeue_json=args.squeue_json,
        warn=progress,
    )
    print(printable_lines(result))
    return 0
