"""Teams from Slurm accounts: `[slurm] team_from = "account"` and `ref/accounts.csv`.

A job's team is its account, unless ref/accounts.csv (`account,team[,valid_from]`, all
optional) names the account: then the row for it that applies on the job's start date
(local to the zone of the job's cluster as a site, `[clusters.<site>] timezone`, else the
configured time zone) gives the team. A row with a `valid_from` date applies
from that date on and wins over one without, which applies to all time. With `team_from =
"user"` no team is written, so that ingest looks the job's user up in ref/users.csv.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from pathlib import Path
from typing import NamedTuple

from gpufleet.errors import GpufleetError
from gpufleet.integrations.refmap import read_team_rows, team_on

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
        self,
        rows: tuple[AccountTeam, ...] = (),
        *,
        team_from: str,
        timezone: str = "UTC",
        sites: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.team_from = team_from
        self.zone = zoneinfo.ZoneInfo(timezone)
        self.site_zones = {site: zoneinfo.ZoneInfo(zone) for site, zone in sites}
        self.rows: dict[str, list[AccountTeam]] = {}
        for row in rows:
            self.rows.setdefault(row.account, []).append(row)
        for listed in self.rows.values():
            listed.sort(key=lambda row: row.valid_from or dt.date.min)

    def team(
        self, account: str | None, start_ts: dt.datetime, cluster: str | None = None
    ) -> str | None:
        """The team to write (None: empty, ingest then maps the user through users.csv), by
        the job's start date at its cluster (site)."""
        if self.team_from != "account" or not account:
            return None
        day = start_ts.astimezone(self.site_zones.get(cluster or "", self.zone)).date()
        listed = ((row.team, row.valid_from) for row in self.rows.get(account, ()))
        return team_on(listed, day) or account


def read_accounts(path: Path, display: str | None = None) -> tuple[AccountTeam, ...]:
    """ref/accounts.csv; a missing file is no rows. Bad content: one line naming the file,
    the line and the problem."""
    where = display or str(path)
    rows = read_team_rows(
        path,
        key="account",
        where=where,
        check_header=lambda line, header: _check_header(where, line, header),
    )
    return tuple(AccountTeam(*row) for row in rows)


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
