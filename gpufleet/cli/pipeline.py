"""`gpufleet ingest`, `build`, `report` and `serve`: the pipeline's steps and their schedules.

With a Prefect server configured, ingest, build and report run as the flows that server
records; without one they call the engine the flows call (gpufleet/flows/server.py), with no
temporary Prefect server to start.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpufleet.cli.collect import cluster_name
from gpufleet.cli.common import config_source, iso_week, progress
from gpufleet.config import Config

if TYPE_CHECKING:
    from gpufleet.warehouse.build import BuildResult


def run_engine_or_flow(*, engine: Callable[[], object], flow: Callable[[], object]) -> int:
    """Print what `flow` returns when a Prefect server is configured, else what `engine`
    returns, then its `failures` (a report's refused recipients), if it has any, as error
    lines: exit status 1. Each imports its own modules: the engine path never imports
    Prefect. A configured server that does not answer fails in one line."""
    from gpufleet.flows.server import configured_server_answers, prefect_server_configured

    if prefect_server_configured():
        with configured_server_answers("to run the command without one"):
            result = flow()
    else:
        result = engine()
    print(result)
    failures: tuple[str, ...] = getattr(result, "failures", ())
    for line in failures:
        print(f"gpufleet: error: {line}", file=sys.stderr)
    return 1 if failures else 0


def add_ingest(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "ingest",
        help="load new raw files into the warehouse (idempotent)",
        description=(
            "Load sample files not yet loaded, the reference CSVs and the allocations into "
            "<data-dir>/warehouse.duckdb. Bad sample files are moved to quarantine/ and "
            "named in a warning; the others load. A bad line of an allocation or job file is "
            "quarantined alone; its other lines load. Bad reference files fail with a "
            "message and change nothing."
        ),
        epilog="example:\n  gpufleet ingest --data-dir /srv/gpufleet",
    )
    parser.set_defaults(handler=run_ingest)


def run_ingest(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.warehouse.ingest import QuarantineWarning

    # The log line on stderr names each quarantined file; the warning (for code that calls
    # ingest) would name it again, with a line of gpufleet's source.
    warnings.filterwarnings("ignore", category=QuarantineWarning)

    def engine() -> object:
        from gpufleet.warehouse.ingest import ingest

        return ingest(config, progress=progress)

    def flow() -> object:
        from gpufleet.flows.ingest import ingest_flow

        return ingest_flow(data_dir=str(config.data_dir), config_path=config_source(config))

    # [compute] dask: compaction from files runs as Prefect tasks, with or without a server
    return run_engine_or_flow(engine=flow if config.compute.dask else engine, flow=flow)


def add_build(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "build",
        help="(re)build every model in sql/",
        description=(
            "Run the SQL models (staging, intermediate, marts) into the warehouse. Only the "
            "local hours and days that new samples touch are recomputed; the first build, and "
            "any build after the SQL, the configuration or the reference data changed, "
            "rebuilds everything."
        ),
        epilog="examples:\n  gpufleet build\n  gpufleet build --full --verbose",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="rebuild every model from all samples, even when an incremental build would do",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="also print each step's wall time, CPU time and rows (kept in "
        "build_state.build_steps either way)",
    )
    parser.set_defaults(handler=run_build)


class _WithSteps:
    """A build's result, printed with its steps (`--verbose`)."""

    def __init__(self, result: BuildResult) -> None:
        self.result = result

    def __str__(self) -> str:
        return "\n".join([str(self.result), *self.result.step_lines()])


def run_build(args: argparse.Namespace, config: Config) -> int:
    def shown(result: BuildResult) -> object:
        return _WithSteps(result) if args.verbose else result

    def engine() -> object:
        from gpufleet.warehouse.build import build

        return shown(build(config, full=args.full))

    def flow() -> object:
        from gpufleet.flows.build import build_flow

        return shown(
            build_flow(
                data_dir=str(config.data_dir), config_path=config_source(config), full=args.full
            )
        )

    # [compute] dask: a full build's partitions are Prefect tasks, with or without a server
    return run_engine_or_flow(engine=flow if config.compute.dask else engine, flow=flow)


def add_report(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "report",
        help="render the weekly report (and email it with --send)",
        description=(
            "Write <data-dir>/reports/<week>/index.html (self-contained, works offline) "
            "and report.eml beside it; --send emails it as configured in [smtp]/[report]."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet report\n"
            "  gpufleet report --week 2026-W47 --send\n"
            "  gpufleet report --per-team --cluster site-a"
        ),
    )
    parser.add_argument(
        "--week",
        type=iso_week,
        metavar="YYYY-Www",
        help="ISO week (default: the last complete week in the configured zone)",
    )
    parser.add_argument("--send", action="store_true", help="email the report to the recipients")
    parser.add_argument(
        "--per-team",
        action="store_true",
        help="also write each team's email to its lead (ref/teams.csv) under "
        "reports/<week>/teams/; with --send, mail them",
    )
    parser.add_argument(
        "--cluster",
        type=cluster_name,
        metavar="NAME",
        help="the report of one site only, written to reports/<week>/sites/<NAME>/ "
        "(not sent; default: every site, with a table per site)",
    )
    parser.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace, config: Config) -> int:
    if args.cluster and (args.send or args.per_team):
        print(
            "gpufleet: error: report --cluster writes one site's report: no --send or --per-team",
            file=sys.stderr,
        )
        return 2

    def engine() -> object:
        from gpufleet.reports import run

        return run.run_report(
            config, args.week, send=args.send, per_team=args.per_team, cluster=args.cluster
        )

    if args.cluster:  # a site's report: written here, not a run of the report flow
        print(engine())
        return 0

    def flow() -> object:
        from gpufleet.flows.report import RecipientsRefused, report_flow

        try:
            return report_flow(
                data_dir=str(config.data_dir),
                config_path=config_source(config),
                week=args.week,
                send=args.send,
                per_team=args.per_team,
            )
        except RecipientsRefused as refused:  # the run failed; say what it did all the same
            return refused.result

    return run_engine_or_flow(engine=engine, flow=flow)


def add_serve(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "serve",
        help="run the Prefect deployments with their schedules",
        description=(
            "Serve the deployments: ingest every 15 minutes (building after each ingest that "
            "loaded something), the weekly report with --send every Monday 07:00 and the "
            "idle notices with --send every day at 08:00, in the configured time zone. "
            "Against the Prefect server that PREFECT_API_URL names, else a temporary one of "
            "its own that stops with it. SIGINT or SIGTERM stops it within 5 s."
        ),
        epilog=(
            "example:\n"
            "  PREFECT_API_URL=http://127.0.0.1:4200/api gpufleet serve --data-dir /srv/gpufleet"
        ),
    )
    parser.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.flows.serve import serve
    from gpufleet.flows.server import configured_server_answers

    with configured_server_answers("to let serve start a temporary one of its own"):
        status = serve(config)
    # What serve started has stopped: leave without the interpreter's teardown of Prefect's
    # modules, which takes seconds on a busy host and would make the 5 s stop late.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
