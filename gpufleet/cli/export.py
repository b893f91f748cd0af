"""`gpufleet export showback`: warehouse figures in other tools' formats."""

from __future__ import annotations

import argparse

from gpufleet.cli.common import add_output_options, iso_month
from gpufleet.config import Config


def add_export(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export",
        help="export figures for other tools (export showback)",
        description="Export warehouse figures in other tools' formats.",
        epilog="example:\n  gpufleet export showback --month 2026-11 -o showback-2026-11.csv",
    )
    exports = parser.add_subparsers(dest="export_command", metavar="EXPORT", required=True)
    add_export_showback(exports)


def add_export_showback(exports: argparse._SubParsersAction) -> None:
    parser = exports.add_parser(
        "showback",
        help="GPU usage and cost per team, month and GPU model, FOCUS column names",
        description=(
            "One row per team and GPU model with samples in the month (local dates in the\n"
            "configured time zone): GPU-hours, busy, idle and waste hours, energy, the\n"
            "price used and the cost. Columns follow the FinOps FOCUS specification where\n"
            "one fits (SubAccountName = team, ConsumedQuantity = GPU-hours, BilledCost,\n"
            "ChargePeriodStart/End, ...); the others start with x_. A team's rows add up\n"
            "to its team_daily figures of the month. The mapping: README.md."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet export showback --month 2026-11 -o showback-2026-11.csv\n"
            "  gpufleet export showback --month 2026-11 --parquet -o showback.parquet\n"
            "  gpufleet export showback --month 2026-11 > showback.csv"
        ),
    )
    parser.add_argument(
        "--month", type=iso_month, required=True, metavar="YYYY-MM", help="the month"
    )
    add_output_options(parser, "csv", "parquet")
    parser.set_defaults(handler=run_export_showback)


def run_export_showback(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.showback import export_showback

    written = export_showback(config, args.month, fmt=args.format, output=args.output)
    if written:
        print(written)
    return 0
