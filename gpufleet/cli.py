"""The `gpufleet` command line (CONTRACT section 5).

Each command imports its implementation lazily, so that `gpufleet collect` on a GPU host
needs only nvidia-ml-py and pyarrow, never the pipeline's packages.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from gpufleet import __version__
from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.weeks import week_monday


def iso_week(value: str) -> str:
    """argparse type for `YYYY-Www`."""
    try:
        week_monday(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"'{value}' is not a number") from exc
    if number <= 0:
        raise argparse.ArgumentTypeError(f"'{value}' must be greater than 0")
    return number


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"'{value}' is not a whole number") from exc
    if number <= 0:
        raise argparse.ArgumentTypeError(f"'{value}' must be greater than 0")
    return number


def iso_month(value: str) -> str:
    """argparse type for `YYYY-MM`."""
    match = re.match(r"^(\d{4})-(\d{2})$", value)
    if not match:
        raise argparse.ArgumentTypeError(f"'{value}' is not a month like 2026-11")
    if not 1 <= int(match.group(2)) <= 12:
        raise argparse.ArgumentTypeError(f"'{value}' is not a valid month")
    return value


def iso_date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"'{value}' is not a date like 2026-11-16") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description=(
            "Who is using our GPUs, how well, and what is the idle time costing us? "
            "Collect NVML samples on GPU hosts, load them into a DuckDB warehouse, "
            "build per-team utilization and idle-waste models, and report weekly."
        ),
        epilog="Data directory layout, tables and definitions: see README.md.",
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML configuration file (default: $GPUFLEET_CONFIG, else <data-dir>/gpufleet.toml)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="data directory (default: $GPUFLEET_DATA_DIR, else data_dir in config, else ./data)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    collect = commands.add_parser(
        "collect",
        help="sample this host's GPUs through NVML into raw/samples",
        description=(
            "Sample every GPU of this host through NVML each --interval and write Parquet "
            "files under <data-dir>/raw/samples. Each tick is appended to a spool on disk "
            "first, so a kill loses at most the tick in progress; every --flush, at UTC "
            "midnight and on SIGTERM/SIGINT the spool becomes one Parquet file."
        ),
    )
    collect.add_argument(
        "--interval",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between samples (default: 10)",
    )
    collect.add_argument(
        "--flush",
        type=positive_float,
        default=600.0,
        metavar="SECONDS",
        help="seconds between Parquet files (default: 600)",
    )
    collect.add_argument(
        "--host", metavar="NAME", help="host name to record (default: this machine's name)"
    )

    simulate = commands.add_parser(
        "simulate",
        help="write a simulated fleet's sample files and matching ref/allocation files",
        description=(
            "Write a realistic simulated fleet into the data directory, laid out as "
            "collectors and schedulers write it: training jobs, idle notebooks holding "
            "memory, team-owned hosts, spare GPUs, a throttling hot rack, a data gap and a "
            "driver reload."
        ),
    )
    simulate.add_argument(
        "--gpus", type=positive_int, default=128, help="number of GPUs (default: 128)"
    )
    simulate.add_argument(
        "--gpus-per-host", type=positive_int, default=8, help="GPUs per host (default: 8)"
    )
    simulate.add_argument(
        "--week",
        type=iso_week,
        metavar="YYYY-Www",
        help="ISO week to simulate (default: the last complete week)",
    )
    simulate.add_argument(
        "--start",
        type=iso_date,
        metavar="YYYY-MM-DD",
        help="first day to simulate (overrides --week)",
    )
    simulate.add_argument(
        "--days", type=positive_int, default=7, help="days to simulate (default: 7)"
    )
    simulate.add_argument(
        "--interval",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="collector interval (default: 10)",
    )
    simulate.add_argument(
        "--flush",
        type=positive_float,
        default=600.0,
        metavar="SECONDS",
        help="collector flush period, i.e. seconds per file (default: 600)",
    )
    simulate.add_argument("--seed", type=int, default=7, help="random seed (default: 7)")

    commands.add_parser(
        "ingest",
        help="load new raw files into the warehouse (idempotent)",
        description=(
            "Load sample files not yet loaded, the reference CSVs and the allocations into "
            "<data-dir>/warehouse.duckdb. Bad sample files are moved to quarantine/ and "
            "named in a warning; the others load. Bad reference files fail with a message "
            "and change nothing."
        ),
    )
    build = commands.add_parser(
        "build",
        help="(re)build every model in sql/",
        description=(
            "Run the SQL models (staging, intermediate, marts) into the warehouse. Only the "
            "local hours and days that new samples touch are recomputed; the first build, and "
            "any build after the SQL, the configuration or the reference data changed, "
            "rebuilds everything."
        ),
    )
    build.add_argument(
        "--full",
        action="store_true",
        help="rebuild every model from all samples, even when an incremental build would do",
    )
    report = commands.add_parser(
        "report",
        help="render the weekly report (and email it with --send)",
        description=(
            "Write <data-dir>/reports/<week>/index.html (self-contained, works offline) "
            "and report.eml beside it; --send emails it as configured in [smtp]/[report]."
        ),
    )
    report.add_argument(
        "--week",
        type=iso_week,
        metavar="YYYY-Www",
        help="ISO week (default: the last complete week in the configured zone)",
    )
    report.add_argument("--send", action="store_true", help="email the report to the recipients")
    report.add_argument(
        "--per-team",
        action="store_true",
        help="also write each team's email to its lead (ref/teams.csv) under "
        "reports/<week>/teams/; with --send, mail them",
    )

    demo = commands.add_parser(
        "demo",
        help="simulate a fleet week, ingest, build and report, and print where the report is",
    )
    demo.add_argument(
        "--gpus", type=positive_int, default=128, help="number of simulated GPUs (default: 128)"
    )
    query = commands.add_parser(
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
    query.add_argument("sql", metavar="SQL", help="the statement ('-' reads it from stdin)")
    formats = query.add_mutually_exclusive_group()
    for name in ("csv", "parquet", "json"):
        formats.add_argument(
            f"--{name}",
            dest="format",
            action="store_const",
            const=name,
            help=f"write {name.upper()} instead of a table",
        )
    query.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="write to FILE (the format from --csv/--parquet/--json, else from its suffix); "
        "without it CSV and JSON go to stdout",
    )
    notify = commands.add_parser(
        "notify",
        help="mail the people who held idle GPUs (notify idle)",
        description="Notices to the people who can stop idle-GPU waste.",
    )
    notices = notify.add_subparsers(dest="notify_command", metavar="NOTICE", required=True)
    idle = notices.add_parser(
        "idle",
        help="daily idle-GPU notices to the users who held them",
        description=(
            "For each user whose waste episodes (idle_episodes.is_waste) ended in the day, or\n"
            "are still open, one email: the GPUs, hosts and jobs, from when to when, the\n"
            "GPU-hours and dollars, and what to do. Users under [notify] min_waste_gpu_hours\n"
            "or in [notify] opt_out are left out; the episodes of users without an address\n"
            "(ref/users.csv email) go to their team's lead (ref/teams.csv). An episode is\n"
            "never sent twice (table notices_sent).\n\n"
            "Without --dry-run or --send, the emails are written as .eml files under\n"
            "<data-dir>/notices/<day>/ and not sent."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet notify idle --dry-run            # yesterday's, printed\n"
            "  gpufleet notify idle --day 2026-11-16     # written as .eml files\n"
            "  gpufleet notify idle --send               # written, sent and recorded"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    idle.add_argument(
        "--day",
        type=iso_date,
        metavar="YYYY-MM-DD",
        help="local day in the configured time zone (default: yesterday)",
    )
    idle_modes = idle.add_mutually_exclusive_group()
    idle_modes.add_argument(
        "--dry-run",
        action="store_true",
        help="print each email (recipients, subject, text); write, send and record nothing",
    )
    idle_modes.add_argument(
        "--send",
        action="store_true",
        help="write the emails, send them through [smtp] and record them as sent",
    )
    export = commands.add_parser(
        "export",
        help="export figures for other tools (export showback)",
        description="Export warehouse figures in other tools' formats.",
    )
    exports = export.add_subparsers(dest="export_command", metavar="EXPORT", required=True)
    showback = exports.add_parser(
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
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    showback.add_argument(
        "--month", type=iso_month, required=True, metavar="YYYY-MM", help="the month"
    )
    showback_formats = showback.add_mutually_exclusive_group()
    for name, label in (("csv", "CSV"), ("parquet", "Parquet")):
        showback_formats.add_argument(
            f"--{name}", dest="format", action="store_const", const=name, help=f"write {label}"
        )
    showback.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="write to FILE (the format from --csv/--parquet, else from its suffix); "
        "without it CSV goes to stdout",
    )
    commands.add_parser(
        "serve",
        help="run the Prefect deployments with their schedules",
        description=(
            "Serve the deployments: ingest every 15 minutes (building after each ingest that "
            "loaded something), the weekly report with --send every Monday 07:00 and the "
            "idle notices with --send every day at 08:00, in the configured time zone."
        ),
    )
    return parser


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace, config: Config) -> int:
    """Dispatch one parsed command; returns the exit status."""
    command: str = args.command
    if command == "collect":
        from gpufleet.collectors.collect import run_collector

        return run_collector(
            data_dir=config.data_dir,
            interval_s=args.interval,
            flush_s=args.flush,
            host=args.host,
        )

    # Everything below needs the pipeline extra.
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Without PREFECT_API_URL a flow starts a temporary server; on a busy small host its
    # start can take longer than Prefect's default 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    try:
        # ingest, build and report are flows that a configured Prefect server records;
        # without one they call the engine the flows call (flows/server.py).
        on_server = False
        if command in ("ingest", "build", "report"):
            from gpufleet.flows.server import prefect_server_configured

            on_server = prefect_server_configured()
        if command == "simulate":
            from gpufleet.simulate.fleet import SimulationSpec, simulate_fleet

            spec = SimulationSpec.from_cli(
                config=config,
                gpus=args.gpus,
                gpus_per_host=args.gpus_per_host,
                week=args.week,
                start=args.start,
                days=args.days,
                interval_s=args.interval,
                flush_s=args.flush,
                seed=args.seed,
            )
            summary = simulate_fleet(spec, data_dir=config.data_dir, progress=_progress)
            print(summary)
            return 0
        if command == "ingest":
            from gpufleet.warehouse.quarantine import QuarantineWarning

            # The log line on stderr names each quarantined file; the warning (for code
            # that calls ingest) would name it again, with a line of gpufleet's source.
            warnings.filterwarnings("ignore", category=QuarantineWarning)
            if not on_server:
                from gpufleet.warehouse.ingest import ingest

                print(ingest(config, progress=_progress))
                return 0
            from gpufleet.flows.ingest import ingest_flow

            result = ingest_flow(data_dir=str(config.data_dir), config_path=_source(config))
            print(result)
            return 0
        if command == "build":
            if not on_server:
                from gpufleet.warehouse.build import build

                print(build(config, full=args.full))
                return 0
            from gpufleet.flows.build import build_flow

            print(
                build_flow(
                    data_dir=str(config.data_dir), config_path=_source(config), full=args.full
                )
            )
            return 0
        if command == "report":
            if not on_server:
                from gpufleet.reports.run import run_report

                report = run_report(config, args.week, send=args.send, per_team=args.per_team)
                print(report)
                return 0
            from gpufleet.flows.report import report_flow

            paths = report_flow(
                data_dir=str(config.data_dir),
                config_path=_source(config),
                week=args.week,
                send=args.send,
                per_team=args.per_team,
            )
            print(paths)
            return 0
        if command == "demo":
            from gpufleet.demo import run_demo

            return run_demo(config, gpus=args.gpus, progress=_progress)
        if command == "query":
            from gpufleet.query import run_query

            return run_query(config, args.sql, fmt=args.format, output=args.output)
        if command == "notify":
            from gpufleet.notices.idle import DRY_RUN, SEND, WRITE, notify_idle

            mode = DRY_RUN if args.dry_run else SEND if args.send else WRITE
            print(notify_idle(config, day=args.day, mode=mode))
            return 0
        if command == "export":
            from gpufleet.showback import export_showback

            written = export_showback(config, args.month, fmt=args.format, output=args.output)
            if written:
                print(written)
            return 0
        if command == "serve":
            from gpufleet.flows.serve import serve

            return serve(config)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in {
            "prefect",
            "duckdb",
            "altair",
            "numpy",
            "jinja2",
            "vl_convert",
            "polars",
        }:
            raise GpufleetError(
                f"'gpufleet {command}' needs the pipeline packages "
                f"(missing '{exc.name}'): pip install 'gpufleet[pipeline]'"
            ) from exc
        raise
    raise AssertionError(f"unhandled command {command}")


def _source(config: Config) -> str | None:
    return str(config.source) if config.source else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(config_path=args.config, data_dir=args.data_dir)
        return run(args, config)
    except GpufleetError as exc:
        print(f"gpufleet: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpufleet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
