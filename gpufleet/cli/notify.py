"""`gpufleet notify idle`: notices to the people who can stop idle-GPU waste."""

from __future__ import annotations

import argparse
import sys

from gpufleet.cli.common import iso_date
from gpufleet.config import Config


def add_notify(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "notify",
        help="mail the people who held idle GPUs (notify idle)",
        description="Notices to the people who can stop idle-GPU waste.",
        epilog="example:\n  gpufleet notify idle --dry-run",
    )
    notices = parser.add_subparsers(dest="notify_command", metavar="NOTICE", required=True)
    add_notify_idle(notices)


def add_notify_idle(notices: argparse._SubParsersAction) -> None:
    parser = notices.add_parser(
        "idle",
        help="daily idle-GPU notices to the users who held them",
        description=(
            "For each user whose waste episodes (idle_episodes.is_waste) ended in the day, or\n"
            "are still open, one email: the GPUs, hosts and jobs, from when to when, the\n"
            "GPU-hours and dollars, and what to do. Users under [notify] min_waste_gpu_hours\n"
            "or in [notify] opt_out are left out; the episodes of users without an address\n"
            "(ref/users.csv email) go to their team's lead (ref/teams.csv). An episode is\n"
            "never sent twice (table notices_sent). An address the SMTP server refuses is\n"
            "named in an error line (exit status 1) and tried again by the next --send; the\n"
            "other notices go out.\n\n"
            "Without --dry-run or --send, the emails are written as .eml files under\n"
            "<data-dir>/notices/<day>/ and not sent."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet notify idle --dry-run            # yesterday's, printed\n"
            "  gpufleet notify idle --day 2026-11-16     # written as .eml files\n"
            "  gpufleet notify idle --send               # written, sent and recorded"
        ),
    )
    parser.add_argument(
        "--day",
        type=iso_date,
        metavar="YYYY-MM-DD",
        help="local day, at each host's site in its zone (default: yesterday)",
    )
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument(
        "--dry-run",
        action="store_true",
        help="print each email (recipients, subject, text); write, send and record nothing",
    )
    modes.add_argument(
        "--send",
        action="store_true",
        help="write the emails, send them through [smtp] and record them as sent",
    )
    parser.set_defaults(handler=run_notify_idle)


def run_notify_idle(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.notices.idle import DRY_RUN, SEND, WRITE, notify_idle

    mode = DRY_RUN if args.dry_run else SEND if args.send else WRITE
    run = notify_idle(config, day=args.day, mode=mode)
    print(run)
    for line in run.failures:  # each refused address, after what went out
        print(f"gpufleet: error: {line}", file=sys.stderr)
    return 1 if run.failures else 0
