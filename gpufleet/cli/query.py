"""`gpufleet query`: one read-only SQL statement on the warehouse."""

from __future__ import annotations

import argparse

from gpufleet.cli.common import add_output_options
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
            "  gpufleet query 'describe team_daily'\n"
            "  gpufleet query 'from samples_attributed' --csv | head"
        ),
    )
    parser.add_argument("sql", metavar="SQL", help="the statement ('-' reads it from stdin)")
    add_output_options(parser, "csv", "parquet", "json")
    parser.set_defaults(handler=run_query)


def run_query(args: argparse.Namespace, config: Config) -> int:
    from gpufleet import query

    return query.run_query(config, args.sql, fmt=args.format, output=args.output)
