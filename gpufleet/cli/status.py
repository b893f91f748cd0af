"""`gpufleet status`: the last file of each host, the last ingest and build, the backlog, and
the stale hosts; exit status 1 when the input is stale, for monitoring."""

from __future__ import annotations

import argparse
import json

from gpufleet.config import Config


def add_status(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "status",
        help="last file per host, last ingest and build, backlog, stale hosts (read-only)",
        description=(
            "Show each host's last sample file, the last ingest and build, the files not "
            "loaded yet, and the hosts with no file for [ingest] stale_after_minutes. "
            "Read-only: it never waits for a running ingest or build. Exit status 1 when "
            "the input is stale (the raw location missing, empty or unreadable, a folder below "
            "it unreadable, no new file in time, or a stale host)."
        ),
        epilog="examples:\n  gpufleet status\n  gpufleet status --json",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.set_defaults(handler=run_status)


def run_status(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.status import read_status

    status = read_status(config)
    print(json.dumps(status.to_json(), indent=2) if args.json else status)
    return 1 if status.is_stale else 0
