"""Reference maps the importers share: a CSV of `<key>,team[,valid_from]` rows (ref/
accounts.csv, ref/namespaces.csv) and the team a key has on a local date.

A key may be listed once per `valid_from` (and once without). A row with a `valid_from`
applies from that date on and wins over one without, which applies to all time.
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from gpufleet.errors import GpufleetError


class TeamRow(NamedTuple):
    key: str  # the account, the namespace
    team: str
    valid_from: dt.date | None  # the row applies from this local date on; None: always


def read_team_rows(
    path: Path,
    *,
    key: str,
    where: str,
    check_header: Callable[[int, list[str]], None],
) -> tuple[TeamRow, ...]:
    """The rows of the CSV at `path` (named `where` in errors), keyed by column `key`; a
    missing file is no rows. `check_header(line, header)` raises on a bad header. Bad
    content: one line naming the file, the line and the problem."""
    if not path.is_file():
        return ()
    rows: list[TeamRow] = []
    seen: dict[tuple[str, dt.date | None], int] = {}
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle, strict=True)
            header: list[str] | None = None
            for record in reader:
                cells = [cell.strip() for cell in record]
                if not any(cells):
                    continue
                line = reader.line_num
                if header is None:
                    header = cells
                    check_header(line, header)
                    continue
                if len(cells) != len(header):
                    raise GpufleetError(
                        f"{where}: line {line}: expected {len(header)} fields, got {len(cells)}"
                    )
                row = _row(where, line, key, dict(zip(header, cells, strict=True)))
                if (row.key, row.valid_from) in seen:
                    raise GpufleetError(
                        f"{where}: line {line}: {key} '{row.key}' is listed twice "
                        f"(first on line {seen[row.key, row.valid_from]})"
                    )
                seen[row.key, row.valid_from] = line
                rows.append(row)
    except csv.Error as exc:
        raise GpufleetError(f"{where}: malformed CSV: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise GpufleetError(f"{where}: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise GpufleetError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    return tuple(rows)


def _row(where: str, line: int, key: str, cells: dict[str, str]) -> TeamRow:
    for name in (key, "team"):
        if not cells[name]:
            raise GpufleetError(f"{where}: line {line}: '{name}' is empty")
    valid_from = None
    if cells.get("valid_from"):
        try:
            valid_from = dt.date.fromisoformat(cells["valid_from"])
        except ValueError:
            raise GpufleetError(
                f"{where}: line {line}: 'valid_from' is not a date like 2026-11-01: "
                f"{cells['valid_from']!r}"
            ) from None
    return TeamRow(cells[key], cells["team"], valid_from)


def team_on(rows: Iterable[tuple[str, dt.date | None]], day: dt.date) -> str | None:
    """Of one key's (team, valid_from) rows, the team on local date `day`: the row with the
    latest `valid_from` on or before it, else the row without one, else None."""
    dated = [(since, team) for team, since in rows if since is None or since <= day]
    dated.sort(key=lambda pair: pair[0] or dt.date.min)
    return dated[-1][1] if dated else None
