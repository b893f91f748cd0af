"""What the command modules share: argparse types, the global options, the output options,
the help's layout, progress lines."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from gpufleet.config import Config
from gpufleet.console import printable_lines
from gpufleet.weeks import week_monday

# A command's handler: the parsed arguments and the loaded configuration in, the exit status out.
Handler = Callable[[argparse.Namespace, Config], int]

# (flag, metavar, help) of the options every command takes, before or after its name.
GLOBAL_OPTIONS = (
    (
        "--config",
        "FILE",
        "TOML configuration file (default: $GPUFLEET_CONFIG, else <data-dir>/gpufleet.toml)",
    ),
    (
        "--data-dir",
        "DIR",
        "data directory (default: $GPUFLEET_DATA_DIR, else data_dir in config, else ./data)",
    ),
)


def add_global_options(container: argparse._ActionsContainer, *, default: object = None) -> None:
    """`--config` and `--data-dir`: on the top-level parser with `default=None`, on each
    command's parser with `argparse.SUPPRESS`, so that an option absent after the command
    keeps the value given before it, and one given after it wins."""
    for flag, metavar, help_text in GLOBAL_OPTIONS:
        container.add_argument(flag, metavar=metavar, default=default, help=help_text)


# The formats a command that writes rows may offer (`add_output_options`), as --help names them.
OUTPUT_FORMATS = {"csv": "CSV", "parquet": "Parquet", "json": "JSON (an array of row objects)"}


def add_output_options(parser: argparse.ArgumentParser, *formats: str) -> None:
    """`--csv`/`--parquet`/`--json` (those of `formats`, one at most) into `format`, and
    `-o/--output FILE`: the options of every command that writes rows, defined once (as
    sqlite-utils' `output_options`). Without a format flag the file's suffix says which;
    without a file the text formats go to stdout and Parquet is refused."""
    flags = parser.add_mutually_exclusive_group()
    for name in formats:
        flags.add_argument(
            f"--{name}",
            dest="format",
            action="store_const",
            const=name,
            help=f"write {OUTPUT_FORMATS[name]}",
        )
    text = " and ".join(name.upper() for name in formats if name != "parquet")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help=f"write to FILE (the format from {'/'.join(f'--{name}' for name in formats)}, "
        f"else from its suffix); without it {text} go{'es' * (' ' not in text)} to stdout",
    )


class HelpFormatter(argparse.HelpFormatter):
    """The layout of every command's --help: a text written in lines (a description laid out
    by hand, the examples that end it) is kept as written, as RawDescriptionHelpFormatter
    keeps it; a one-line paragraph is wrapped to the terminal's width."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def command_parsers(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command's parser under `parser`, depth first, with its name ("notify idle")."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield name, command
                for subname, subcommand in command_parsers(command):
                    yield f"{name} {subname}", subcommand


def progress(message: str) -> None:
    """A progress line on stderr, so that stdout holds the command's result alone; names in
    it are escaped (`gpufleet.console`)."""
    print(printable_lines(message), file=sys.stderr, flush=True)


def config_source(config: Config) -> str | None:
    """The configuration file, as a flow takes it (None: the defaults and the environment)."""
    return str(config.source) if config.source else None


def iso_week(value: str) -> str:
    """argparse type for `YYYY-Www`."""
    try:
        week_monday(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def iso_month(value: str) -> str:
    """argparse type for `YYYY-MM`."""
    match = re.fullmatch(r"([0-9]{4})-([0-9]{2})", value)  # ASCII digits, no newline
    if not match:
        raise argparse.ArgumentTypeError(f"'{value}' is not a month like 2026-11")
    if not 1 <= int(match.group(2)) <= 12:
        raise argparse.ArgumentTypeError(f"'{value}' is not a valid month")
    return value


def iso_date(value: str) -> dt.date:
    """argparse type for `YYYY-MM-DD`."""
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"'{value}' is not a date like 2026-11-16") from exc


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
