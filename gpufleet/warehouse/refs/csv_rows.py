"""Reading a reference file (ref/*.csv) or a raw CSV file (allocations, jobs) row by row: the
header checked against the file's columns, each row's cells, the parsers of one cell, and the
two ways a problem ends: a failed read naming the file and line (`_read_file`) or a line set
aside (`_read_lines`). `read.py` and `jobs.py` read the files through these.

Every file is validated completely before anything is written, so a bad reference file
fails the ingest with one line naming the file, the line and the problem, and changes
nothing. An allocation or job file is raw input, as a sample file is: a bad line of it is
set aside (`SetAside`, quarantined by the ingest) and its other lines load; a file no line
of which can be read (a bad header, not UTF-8) is set aside whole.
Rules (`docs/reference.md#reference-files`): a header row whose names are exactly the
file's columns (any order; names are case-sensitive, surrounding spaces ignored; the
optional columns, users.csv's `email`, teams.csv's `cc` and the `valid_from` of users.csv,
hosts.csv and prices.csv, may be left out); cells are
stripped and an empty cell is NULL; timestamps are ISO-8601 with an offset
(`2026-11-16T09:00:00+01:00`, `...Z`); addresses are plain `local@domain`
(gpufleet/addresses.py); a missing file is an empty table, as is a file with no content
at all.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from gpufleet.addresses import is_address
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.refs.records import SetAside

_MAX_GPU_INDEX = 65535
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# A GPU's UUID as NVML gives it (GPU-<uuid>), or a MIG device's: MIG-<uuid>, the older
# drivers' MIG-GPU-<uuid>/<gpu instance>/<compute instance>, or MIG-<GPU's UUID>/<gpu
# instance> as `gpufleet import prometheus` names a dcgm-exporter MIG device.
_GPU_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z-]{0,99}(/[0-9]{1,5}){0,2}")


class _Row(NamedTuple):
    line: int
    cells: dict[str, str | None]


class _RefError(Exception):
    """A problem on one line; turned into a GpufleetError naming the file."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


def _read_rows(
    path: Path,
    columns: Sequence[str],
    optional: Sequence[str] = (),
    skip: Callable[[_RefError], None] | None = None,
) -> Iterator[_Row]:
    """The data rows of a CSV file whose header must name exactly `columns`, and any of
    `optional` (a cell of an optional column the file lacks is NULL). A line that is not
    a row (malformed CSV, another number of fields) is passed to `skip` and left out
    (None: it raises, as a bad header always does)."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, strict=True)
        header: list[str] | None = None
        for record in _records(reader):
            if isinstance(record, _RefError):
                if skip is None or header is None:
                    raise record
                skip(record)
                continue
            if header is None:
                if not any(cell.strip() for cell in record):
                    continue  # leading blank lines before the header
                header = [cell.strip() for cell in record]
                _check_header(reader.line_num, header, columns, optional)
                continue
            if not any(cell.strip() for cell in record):
                continue  # blank line
            if len(record) != len(header):
                problem = _RefError(
                    reader.line_num,
                    f"expected {len(header)} fields ({','.join(header)}), got {len(record)}",
                )
                if skip is None:
                    raise problem
                skip(problem)
                continue
            cells: dict[str, str | None] = dict.fromkeys(optional)
            cells |= {
                name: (value.strip() or None) for name, value in zip(header, record, strict=True)
            }
            yield _Row(reader.line_num, cells)


def _records(reader: Any) -> Iterator[list[str] | _RefError]:
    """The reader's records, a CSV syntax error becoming a problem on its line (the reader
    goes on at the next line)."""
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield _RefError(reader.line_num, f"malformed CSV: {exc}")
            continue
        yield record


def _check_header(
    line: int, header: list[str], columns: Sequence[str], optional: Sequence[str] = ()
) -> None:
    expected = ",".join(columns) + "".join(f"[,{name}]" for name in optional)
    for name in header:
        if name not in columns and name not in optional:
            raise _RefError(line, f"unknown column '{name}' in header (expected {expected})")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise _RefError(line, f"column '{duplicates[0]}' appears twice in header")
    for name in columns:
        if name not in header:
            raise _RefError(line, f"missing column '{name}' in header (expected {expected})")


def _required(row: _Row, name: str) -> str:
    value = row.cells[name]
    if value is None:
        raise _RefError(row.line, f"'{name}' is empty")
    return value


def _address(row: _Row, name: str, text: str) -> str:
    if not is_address(text):
        raise _RefError(row.line, f"'{name}' is not an email address: {text!r}")
    return text


def _number(row: _Row, name: str) -> float:
    text = _required(row, name)
    try:
        value = float(text)
    except ValueError:
        raise _RefError(row.line, f"'{name}' is not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise _RefError(row.line, f"'{name}' must be a number >= 0, got {text!r}")
    return value


def _gpu_index(row: _Row, name: str) -> int:
    text = _required(row, name)
    try:
        value = int(text)
    except ValueError:
        raise _RefError(row.line, f"'{name}' is not a whole number: {text!r}") from None
    if not 0 <= value <= _MAX_GPU_INDEX:
        raise _RefError(row.line, f"'{name}' must be between 0 and {_MAX_GPU_INDEX}, got {value}")
    return value


def _gpu_uuid(row: _Row, name: str) -> str | None:
    """An optional GPU or MIG device UUID (`_GPU_UUID`); None when the cell is empty."""
    text = row.cells.get(name)
    if text is None:
        return None
    if not _GPU_UUID.fullmatch(text):
        raise _RefError(
            row.line, f"'{name}' is not a GPU or MIG device UUID (GPU-... or MIG-...): {text!r}"
        )
    return text


def _timestamp(row: _Row, name: str, *, required: bool) -> dt.datetime | None:
    text = row.cells[name]
    if text is None:
        if required:
            raise _RefError(row.line, f"'{name}' is empty")
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise _RefError(row.line, f"'{name}' is not an ISO-8601 timestamp: {text!r}") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise _RefError(
            row.line,
            f"'{name}' has no UTC offset: {text!r} (write e.g. {text}+00:00 or {text}Z)",
        )
    return value.astimezone(dt.UTC)


def _valid_from(row: _Row) -> dt.date | None:
    """The optional `valid_from` cell: an ISO date (YYYY-MM-DD), local to the site of the
    sample (its zone, docs/sites.md, else the configured one); None when the file has no
    such column or the cell is empty (all time)."""
    text = row.cells.get("valid_from")
    if text is None:
        return None
    try:
        if not _ISO_DATE.match(text):
            raise ValueError(text)
        return dt.date.fromisoformat(text)
    except ValueError:
        raise _RefError(
            row.line, f"'valid_from' is not an ISO date (YYYY-MM-DD): {text!r}"
        ) from None


def _read_file(
    path: Path,
    columns: Sequence[str],
    parse: Callable[[_Row], Any],
    display: str,
    optional: Sequence[str] = (),
) -> list[Any]:
    """Parse every row of `path`, turning a problem into a one-line GpufleetError."""
    try:
        return [parse(row) for row in _read_rows(path, columns, optional)]
    except _RefError as exc:
        raise GpufleetError(f"{display}: line {exc.line}: {exc.problem}") from exc
    except UnicodeDecodeError as exc:
        raise GpufleetError(f"{display}: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise GpufleetError(f"{display}: cannot read: {exc.strerror or exc}") from exc


def _read_lines(
    path: Path,
    columns: Sequence[str],
    parse: Callable[[_Row], Any],
    source: str,
    display: str,
    optional: Sequence[str],
    set_aside: list[SetAside] | None,
) -> list[Any]:
    """Parse every row of a raw file (allocations, jobs); with `set_aside`, a bad line is
    added to it and left out, and a file whose header or encoding is bad is added whole
    (no row of it read); without, a problem fails as `_read_file`'s."""
    if set_aside is None:
        return _read_file(path, columns, parse, display, optional)
    rows: list[Any] = []
    lines: list[SetAside] = []

    def skip(problem: _RefError) -> None:
        lines.append(SetAside(source, f"line {problem.line}: {problem.problem}"))

    try:
        for row in _read_rows(path, columns, optional, skip):
            try:
                rows.append(parse(row))
            except _RefError as exc:
                skip(exc)
    except _RefError as exc:  # the header: no line of the file can be read
        set_aside.append(SetAside(source, f"line {exc.line}: {exc.problem}", whole_file=True))
        return []
    except UnicodeDecodeError as exc:
        set_aside.append(SetAside(source, f"not UTF-8 text ({exc.reason})", whole_file=True))
        return []
    except OSError as exc:
        raise GpufleetError(f"{display}: cannot read: {exc.strerror or exc}") from exc
    set_aside.extend(lines)
    return rows
