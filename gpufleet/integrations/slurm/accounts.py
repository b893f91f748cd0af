"""Teams from Slurm accounts: `[slurm] team_from = "account"` and `ref/accounts.csv`.

A job's team is its account, unless ref/accounts.csv (`account,team[,valid_from]`, all
optional) names the account: then the row for it that applies on the job's start date
(local to the configured time zone) gives the team. A row with a `valid_from` date applies
from that date on and wins over one without, which applies to all time. With `team_from =
"user"` no team is written, so that ingest looks the job's user up in ref/users.csv.
"""

from __future__ import annotations

import csv
import datetime as dt
import zoneinfo
from pathlib import Path
from typing import NamedTuple

from gpufleet.errors import GpufleetError

ACCOUNTS_FILE = "accounts.csv"
COLUMNS = ("account", "team")
OPTIONAL = ("valid_from",)


class AccountTeam(NamedTuple):
    account: str
    team: str
    valid_from: dt.date | None  # None: all time


class Teams:
    """The team of a job's account, on the local date the job started."""

    def __init__(
        self, rows: tuple[AccountTeam, ...] = (), *, team_from: str, timezone: str = "UTC"
    ) -> None:
        self.team_from = team_from
        self.zone = zoneinfo.ZoneInfo(timezone)
        self.rows: dict[str, list[AccountTeam]] = {}
        for row in rows:
            self.rows.setdefault(row.account, []).append(row)
        for listed in self.rows.values():
            listed.sort(key=lambda row: row.valid_from or dt.date.min)

    def team(self, account: str | None, start_ts: dt.datetime) -> str | None:
        """The team to write (None: empty, ingest then maps the user through users.csv)."""
        if self.team_from != "account" or not account:
            return None
        day = start_ts.astimezone(self.zone).date()
        team = account
        for row in self.rows.get(account, ()):
            if row.valid_from is None or row.valid_from <= day:
                team = row.team
        return team


def read_accounts(path: Path, display: str | None = None) -> tuple[AccountTeam, ...]:
    """ref/accounts.csv; a missing file is no rows. Bad content: one line naming the file,
    the line and the problem."""
    where = display or str(path)
    if not path.is_file():
        return ()
    rows: list[AccountTeam] = []
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
                    _check_header(where, line, header)
                    continue
                if len(cells) != len(header):
                    raise GpufleetError(
                        f"{where}: line {line}: expected {len(header)} fields "
                        f"({','.join(header)}), got {len(cells)}"
                    )
                row = _row(where, line, dict(zip(header, cells, strict=True)))
                key = (row.account, row.valid_from)
                if key in seen:
                    raise GpufleetError(
                        f"{where}: line {line}: account '{row.account}' is listed twice "
                        f"for the same valid_from (first on line {seen[key]})"
                    )
                seen[key] = line
                rows.append(row)
    except csv.Error as exc:
        raise GpufleetError(f"{where}: malformed CSV: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise GpufleetError(f"{where}: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise GpufleetError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    return tuple(rows)


def _check_header(where: str, line: int, header: list[str]) -> None:
    expected = "account,team[,valid_from]"
    for name in header:
        if name not in COLUMNS + OPTIONAL:
            raise GpufleetError(
                f"{where}: line {line}: unknown column '{name}' in header (expected {expected})"
            )
        if header.count(name) > 1:
            raise GpufleetError(f"{where}: line {line}: column '{name}' appears twice in header")
    for name in COLUMNS:
        if name not in header:
            raise GpufleetError(
                f"{where}: line {line}: missing column '{name}' in header (expected {expected})"
            )


def _row(where: str, line: int, cells: dict[str, str]) -> AccountTeam:
    for name in COLUMNS:
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
    return AccountTeam(cells["account"], cells["team"], valid_from)
