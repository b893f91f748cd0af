"""`gpufleet query`: one read-only SQL statement on the warehouse, as a table or a file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

import polars as pl

from gpufleet.analyst import ReadOnlyWarehouse
from gpufleet.config import Config
from gpufleet.csv_cells import defuse_formulas
from gpufleet.errors import GpufleetError

FORMATS = ("csv", "parquet", "json")
_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".json": "json"}
# The days from 1970 that polars can print as a date (its calendar ends in year 262142;
# DuckDB's go further, and its 'infinity' is the largest value of the type): beyond them
# printing, CSV and JSON abort the process.
_SHOWN_DAYS = 95_000_000
_PER_DAY = {"ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}


def output_format(fmt: str | None, output: Path | None) -> str:
    """The format to write: the flag, else the output file's suffix, else a table."""
    if fmt is None and output is not None:
        fmt = _SUFFIXES.get(output.suffix.lower())
        if fmt is None:
            raise GpufleetError(
                f"{output}: cannot tell the format from the name; add --csv, --parquet or --json"
            )
    if fmt == "parquet" and output is None:
        raise GpufleetError("--parquet needs -o FILE")
    return fmt or "table"


def check_printable(frame: pl.DataFrame) -> None:
    """A GpufleetError naming the first date or time column holding a value polars cannot
    write as text (printing it would abort the process)."""
    for name, dtype in frame.schema.items():
        if not isinstance(dtype, pl.Date | pl.Datetime):
            continue
        days = frame.get_column(name).to_physical()
        if isinstance(dtype, pl.Datetime):
            days = days // _PER_DAY[dtype.time_unit]
        low, high = days.min(), days.max()
        if low is not None and not -_SHOWN_DAYS <= low <= high <= _SHOWN_DAYS:  # type: ignore[operator]
            raise GpufleetError(
                f"query: column {name!r} holds a time too far from today to write as text "
                f"(such as 'infinity'): select it as text ({name}::varchar), or write --parquet"
            )


def print_table(frame: pl.DataFrame, stream: TextIO) -> None:
    """Every row and column, aligned, untruncated, and the row count below."""
    with pl.Config(
        tbl_rows=-1,
        tbl_cols=-1,
        tbl_width_chars=65_535,  # the most polars takes
        fmt_str_lengths=10_000,
        fmt_table_cell_list_len=-1,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
        tbl_formatting="ASCII_FULL_CONDENSED",
        tbl_cell_numeric_alignment="RIGHT",
        float_precision=None,
    ):
        print(frame, file=stream)
    print(f"({frame.height:,} row{'' if frame.height == 1 else 's'})", file=stream)


def write_frame(frame: pl.DataFrame, fmt: str, output: Path | None) -> None:
    """Write CSV, Parquet or JSON (an array of row objects) to `output`, or to stdout.

    In CSV a text cell that a spreadsheet would run as a formula (`=...`, `+...`, `-...`,
    `@...`) gets a single quote in front (`gpufleet.csv_cells`); Parquet and JSON are exact.
    """
    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    if fmt == "csv" and nested:
        raise GpufleetError(
            f"CSV has no cell for a list or a struct (column{'s' * (len(nested) > 1)} "
            f"{', '.join(nested)}): write --json or --parquet, or select it as text "
            "(to_json(...)) or unnested"
        )
    try:
        if fmt == "parquet":
            assert output is not None  # output_format asks for -o with --parquet
            frame.write_parquet(output, compression="zstd")
        elif fmt == "csv" and output is not None:
            defuse_formulas(frame).write_csv(output)
        elif fmt == "csv":
            sys.stdout.write(defuse_formulas(frame).write_csv())
        elif output is not None:
            frame.write_json(output)
        else:
            sys.stdout.write(frame.write_json() + "\n")
    except OSError as exc:
        raise GpufleetError(f"{output}: cannot write: {exc.strerror or exc}") from exc


def run_query(
    config: Config, query: str, *, fmt: str | None = None, output: Path | None = None
) -> int:
    """The `query` command: run `query` read-only and print or write its result."""
    if query.strip() == "-":
        query = sys.stdin.read()
    chosen = output_format(fmt, output)
    if not config.warehouse_path.is_file():
        raise GpufleetError(
            f"{config.warehouse_path}: no warehouse yet; run 'gpufleet ingest' first"
        )
    frame = ReadOnlyWarehouse(config).sql(query)
    if chosen != "parquet":
        check_printable(frame)
    if chosen == "table":
        print_table(frame, sys.stdout)
        return 0
    write_frame(frame, chosen, output)
    if output is not None:
        print(f"{frame.height:,} rows written to {output}", file=sys.stderr)
    return 0
