"""`gpufleet query`: one read-only SQL statement on the warehouse."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpufleet.config import Config


def add_query(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "query",
        help="run one read-only SQL statement on the warehouse (a table, CSV, Parquet or JSON)",
        description=(
            "Run one read-only SQL statement (select, describe, show, summarize, explain)\n"
            "on the published warehouse and print the result as an aligned table, or write\n"
            "it as CSV, Parquet or JSON (an array of row objects). The warehouse is opened\n"
            "read-only, so a query never blocks ingest or build. The tables: README.md,\n"
            "or gpufleet query 'show tables'."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet query \"select * from team_weekly where iso_week = '2026-W47'\"\n"
            "  gpufleet query 'from idle_episodes where is_waste' --csv -o waste.csv\n"
            "  gpufleet query 'describe team_daily'"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sql", metavar="SQL", help="the statement ('-' reads it from stdin)")
    formats = parser.add_mutually_exclusive_group()
    for name in ("csv", "parquet", "json"):
        formats.add_argument(
            f"--{name}",
            dest="format",
            action="store_const",
            const=name,
            help=f"write {name.upper()} instead of a table",
        )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="write to FILE (the format from --csv/--parquet/--json, else from its suffix); "
        "without it CSV and JSON go to stdout",
    )
    parser.set_defaults(handler=run_query)


def run_query(args: argparse.Namespace, config: Config) -> int:
    from gpufleet import query

    return query.run_query(config, args.sql, fmt=args.format, output=args.output)
