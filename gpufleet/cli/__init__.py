"""The `gpufleet` command line.

Each command is one module's (arguments, handler) pair: `add_<command>` adds its parser and
sets `handler`; `main` parses, loads the configuration and calls the handler. A handler
imports its implementation when it runs, so that `gpufleet collect` on a GPU host needs only
nvidia-ml-py and pyarrow, never the pipeline's packages.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from gpufleet import __version__
from gpufleet.cli.close import add_close, add_reopen
from gpufleet.cli.collect import add_collect
from gpufleet.cli.common import Handler, HelpFormatter, add_global_options, command_parsers
from gpufleet.cli.completion import add_completion
from gpufleet.cli.export import add_export
from gpufleet.cli.imports import add_import
from gpufleet.cli.job import add_job
from gpufleet.cli.notify import add_notify
from gpufleet.cli.pipeline import add_build, add_ingest, add_report, add_serve
from gpufleet.cli.query import add_query
from gpufleet.cli.simulate import add_demo, add_simulate
from gpufleet.cli.status import add_status
from gpufleet.config import Config, load_config
from gpufleet.console import printable
from gpufleet.errors import GpufleetError, disk_full_path

__all__ = ["build_parser", "main"]

# The top-level packages of `pip install 'gpufleet[pipeline]'`, by their import names.
PIPELINE_PACKAGES = frozenset(
    {"prefect", "duckdb", "altair", "numpy", "jinja2", "vl_convert", "polars"}
)


# The exit status when the reader of stdout has gone (`gpufleet query ... | head`): a shell's
# for a command killed by SIGPIPE (128 + 13).
READER_GONE = 141

# A write that failed for want of space outside the warehouse's (whose own error says more).
DISK_FULL = "no space left on the device; free space on its file system and run the command again"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description=(
            "Who is using our GPUs, how well, and what is the idle time costing us? "
            "Collect NVML samples on GPU hosts, load them into a DuckDB warehouse, "
            "build per-team utilization and idle-waste models, and report weekly."
        ),
        epilog=(
            "Data directory layout, tables and definitions: see README.md.\n"
            "\n"
            "examples:\n"
            "  gpufleet demo\n"
            "  gpufleet --data-dir /srv/gpufleet query 'show tables'\n"
            "  gpufleet report --week 2026-W47"
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    add_global_options(parser)
    parser.set_defaults(needs_pipeline=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_command in (
        add_collect,
        add_simulate,
        add_ingest,
        add_build,
        add_report,
        add_demo,
        add_query,
        add_job,
        add_notify,
        add_export,
        add_import,
        add_status,
        add_close,
        add_reopen,
        add_serve,
        add_completion,
    ):
        add_command(commands)
    # Every command, nested ones too, also takes the global options after its name, and lays
    # out its help alike (its examples at the end as written).
    for _, command in command_parsers(parser):
        add_global_options(command.add_argument_group("global options"), default=argparse.SUPPRESS)
        command.formatter_class = HelpFormatter
    return parser


def run(args: argparse.Namespace, config: Config) -> int:
    """Run one parsed command's handler; returns the exit status."""
    handler: Handler = args.handler
    if not args.needs_pipeline:
        return handler(args, config)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # Without PREFECT_API_URL a flow starts a temporary server; on a busy small host its
    # start can take longer than Prefect's default 20 s.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    try:
        return handler(args, config)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in PIPELINE_PACKAGES:
            raise GpufleetError(
                f"'gpufleet {args.command}' needs the pipeline packages "
                f"(missing '{exc.name}'): pip install 'gpufleet[pipeline]'"
            ) from exc
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. A reader of stdout that stops early
    (`gpufleet query ... | head`) ends the command quietly, with the status a shell gives a
    command killed by SIGPIPE, as gpustat's `signal(SIGPIPE, SIG_DFL)` does; but a write to
    a closed socket (SMTP, S3, the Prefect server) stays an error, not a silent death."""
    try:
        try:
            args = build_parser().parse_args(argv)
            config = load_config(config_path=args.config, data_dir=args.data_dir)
            return run(args, config)
        finally:
            sys.stdout.flush()  # what is left in the buffer meets a closed pipe here
    except BrokenPipeError:
        return _reader_gone()
    except GpufleetError as exc:
        if isinstance(exc.__cause__, BrokenPipeError):  # a writer that names its output
            return _reader_gone()
        print(f"gpufleet: error: {printable(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:
        full = disk_full_path(exc)
        if full is None:
            raise
        print(f"gpufleet: error: {printable(full or exc)}: {DISK_FULL}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("gpufleet: interrupted", file=sys.stderr)
        return 130


def _reader_gone() -> int:
    """Point stdout at /dev/null, so that the interpreter's last flush of what is left in
    its buffer meets no closed pipe (Python's "Note on SIGPIPE"); READER_GONE."""
    with contextlib.suppress(OSError, ValueError):  # a stdout without a file (in-process)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return READER_GONE
