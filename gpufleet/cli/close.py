"""`gpufleet close` and `gpufleet reopen`: keep a month's marts and showback as they are, or
let builds change them again (docs/operations.md#closing-a-month)."""

from __future__ import annotations

import argparse

from gpufleet.cli.collect import cluster_name
from gpufleet.config import Config


def add_close(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "close",
        help="keep a month's marts and showback as they are now",
        description=(
            "Close a month (local dates): its rows of team_daily, team_weekly, gpu_team_daily, "
            "gpu_daily, gpu_hourly, host_daily, idle_episodes, thermal_events and run_pieces, and "
            "its showback, stay as they are now (job_efficiency and samples_attributed are not "
            "kept). Later reference edits, late sample files, allocation changes and "
            "'build --full' leave them unchanged; a build that would change them says so in "
            "one line per month instead. Run 'gpufleet build' first."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet close --month 2026-11\n"
            "  gpufleet close --month 2026-11 --cluster site-a"
        ),
    )
    parser.add_argument("--month", required=True, metavar="YYYY-MM", help="the month to close")
    parser.add_argument(
        "--cluster",
        metavar="NAME",
        type=cluster_name,
        help="close it for this site only (default: every site)",
    )
    parser.set_defaults(handler=run_close)


def add_reopen(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "reopen",
        help="let builds change a closed month again",
        description=(
            "Reopen a closed month: the next 'gpufleet build' recomputes it (and every later "
            "day) with the current samples, reference data and allocations."
        ),
        epilog="example:\n  gpufleet reopen --month 2026-11",
    )
    parser.add_argument("--month", required=True, metavar="YYYY-MM", help="the month to reopen")
    parser.add_argument(
        "--cluster",
        metavar="NAME",
        type=cluster_name,
        help="reopen it for this site only (default: every site closed in that month)",
    )
    parser.set_defaults(handler=run_reopen)


def run_close(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.close import close

    print(close(config, args.month, cluster=args.cluster))
    return 0


def run_reopen(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.close import reopen

    print(reopen(config, args.month, cluster=args.cluster))
    return 0
