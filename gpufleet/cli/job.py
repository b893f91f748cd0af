"""`gpufleet job`: one job's page (its GPUs, hours, utilization by hour, memory peak, idle
stretches and waste), or the list of one user's jobs; read-only."""

from __future__ import annotations

import argparse
import json
import sys

from gpufleet.cli.collect import cluster_name
from gpufleet.cli.common import iso_week
from gpufleet.config import Config

# The options that list a user's jobs rather than show one.
_LISTING = ("user", "week", "since", "until")


def add_job(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "job",
        help="one job's page: GPUs, hours, utilization by hour, idle stretches, waste "
        "(or --user: a user's jobs)",
        description=(
            "Show one job as the warehouse knows it: its GPUs (host, index, uuid, model),\n"
            "GPU-hours, utilization and SM activity (where measured) hour by hour, memory\n"
            "peak, idle stretches and waste, as text or --json. With --user instead of a\n"
            "job id, list that user's jobs (one row per job and GPU model), of a week or\n"
            "between --since and --until. Reads the published warehouse read-only."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet job 4807074\n"
            "  gpufleet job 4807074 --json\n"
            "  gpufleet job --user alice --week 2026-W47\n"
            "  gpufleet job --user alice --since 2026-11-01 --until 2026-12-01"
        ),
    )
    parser.add_argument(
        "job_id", metavar="JOBID", nargs="?", help="the job id, as Slurm prints it (4242_7)"
    )
    parser.add_argument("--user", metavar="USER", help="list this user's jobs instead")
    parser.add_argument(
        "--week",
        type=iso_week,
        metavar="YYYY-Www",
        help="with --user: the jobs that ran in this ISO week (local days)",
    )
    parser.add_argument(
        "--since",
        metavar="TIME",
        help="with --user: the jobs that had not ended by this ISO-8601 date or time",
    )
    parser.add_argument(
        "--until",
        metavar="TIME",
        help="with --user: the jobs that started before this ISO-8601 date or time",
    )
    parser.add_argument(
        "--cluster",
        type=cluster_name,
        metavar="NAME",
        help="the job (or jobs) at this site only; needed for an id that ran at several",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(handler=run_job)


def run_job(args: argparse.Namespace, config: Config) -> int:
    listing = [f"--{name}" for name in _LISTING if getattr(args, name) is not None]
    problem = None
    if args.job_id is None and args.user is None:
        problem = "give a job id, or --user USER to list a user's jobs"
    elif args.job_id is not None and listing:
        problem = f"{', '.join(listing)} list a user's jobs: give them without a job id"
    elif args.week is not None and (args.since is not None or args.until is not None):
        problem = "--week and --since/--until exclude each other"
    if problem is not None:
        print(f"gpufleet: error: job: {problem}", file=sys.stderr)
        return 2

    from gpufleet.job_page import load_job_page, load_user_jobs

    shown: object
    if args.job_id is not None:
        page = load_job_page(config, args.job_id, cluster=args.cluster)
        shown = page.to_json() if args.json else page
    else:
        jobs = load_user_jobs(
            config,
            args.user,
            week=args.week,
            since=args.since,
            until=args.until,
            cluster=args.cluster,
        )
        shown = jobs.to_json() if args.json else jobs
    print(json.dumps(shown, indent=2) if args.json else shown)
    return 0
