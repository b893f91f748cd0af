"""Reading and validating one reference file (ref/*.csv) or allocation file; the Slurm job
records are read in `jobs.py`, and `listing.py` lists the files and reads what changed.
The rows and cells are read and checked by `csv_rows.py`, whose docstring gives the rules: a
bad reference file fails with one line naming the file, the line and the problem; a bad line
of an allocation or job file is set aside.

An allocation or job file is read again only when its size or modification time differs
from those it had when the warehouse last read it (`build_state.allocation_files`, as
`loaded_files` does for the sample files, `listing.py`): a scheduler writes a file a day,
and the 15-minute cycle would otherwise parse weeks of them each time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from pathlib import Path

from gpufleet.addresses import same_address, split_addresses
from gpufleet.collectors.schema import folder_host
from gpufleet.warehouse.refs.csv_rows import (
    _address,
    _gpu_index,
    _gpu_uuid,
    _number,
    _read_file,
    _read_lines,
    _RefError,
    _required,
    _Row,
    _timestamp,
    _valid_from,
)
from gpufleet.warehouse.refs.records import (
    ALLOCATIONS_COLUMNS,
    ALLOCATIONS_OPTIONAL,
    HOSTS_COLUMNS,
    HOSTS_OPTIONAL,
    PRICES_COLUMNS,
    PRICES_OPTIONAL,
    TEAMS_COLUMNS,
    TEAMS_OPTIONAL,
    USERS_COLUMNS,
    USERS_OPTIONAL,
    Allocation,
    HostRule,
    PriceRule,
    References,
    SetAside,
    TeamContact,
    UserTeam,
)


def read_users(path: Path, display: str | None = None) -> tuple[UserTeam, ...]:
    """ref/users.csv: one team per user and `valid_from` (none: all time), and at most one
    address per user (kept on the user's first row); a user listed twice with the same
    `valid_from` must name the same team, and the same address where both lines give one."""
    where = display or str(path)
    seen: dict[tuple[str, dt.date | None], int] = {}  # (user, valid_from) -> position
    lines: dict[tuple[str, dt.date | None], int] = {}  # ... -> the line that gave its team
    first: dict[str, int] = {}  # user -> position of its first row (holds the address)
    users: list[UserTeam] = []

    def parse(row: _Row) -> None:
        user, team = _required(row, "user"), _required(row, "team")
        valid_from = _valid_from(row)
        email = row.cells["email"]
        if email is not None:
            _address(row, "email", email)
        key = (user, valid_from)
        if key in seen and users[seen[key]].team != team:
            since = "" if valid_from is None else f" from {valid_from.isoformat()}"
            raise _RefError(
                row.line,
                f"user '{user}' is mapped to team '{team}'{since} but line {lines[key]} "
                f"maps it to '{users[seen[key]].team}'",
            )
        if key not in seen:
            seen[key], lines[key] = len(users), row.line
            users.append(UserTeam(user, team, None, valid_from))
        if user not in first:
            first[user] = seen[key]
        earlier = users[first[user]]
        if email is not None and earlier.email is not None:
            if not same_address(email, earlier.email):
                raise _RefError(
                    row.line,
                    f"user '{user}' has address '{email}' but an earlier line gives "
                    f"'{earlier.email}'",
                )
        elif email is not None:
            users[first[user]] = earlier._replace(email=email)

    _read_file(path, USERS_COLUMNS, parse, where, USERS_OPTIONAL)
    return tuple(users)


def read_teams(path: Path, display: str | None = None) -> tuple[TeamContact, ...]:
    """ref/teams.csv: each team's lead (required) and the addresses copied (`cc`: separated
    by `;` or spaces, or `,` inside a quoted cell); a team may be listed once."""
    seen: dict[str, int] = {}

    def parse(row: _Row) -> TeamContact:
        team = _required(row, "team")
        if team in seen:
            raise _RefError(row.line, f"team '{team}' is listed twice (first on line {seen[team]})")
        seen[team] = row.line
        lead = _address(row, "lead_email", _required(row, "lead_email"))
        cc = tuple(_address(row, "cc", part) for part in split_addresses(row.cells["cc"] or ""))
        return TeamContact(team, lead, cc)

    return tuple(_read_file(path, TEAMS_COLUMNS, parse, display or str(path), TEAMS_OPTIONAL))


def read_hosts(path: Path, display: str | None = None) -> tuple[HostRule, ...]:
    """ref/hosts.csv: host globs in file order, each with its optional `valid_from` and
    `cluster` (the site whose hosts the row applies to; empty: every site)."""
    rows = _read_file(
        path,
        HOSTS_COLUMNS,
        lambda row: (
            _required(row, "host_glob"),
            _required(row, "team"),
            row.line,
            _valid_from(row),
            (row.cells.get("cluster") or "").strip() or None,
        ),
        display or str(path),
        HOSTS_OPTIONAL,
    )
    return tuple(
        HostRule(order, glob, team, line, valid_from, cluster)
        for order, (glob, team, line, valid_from, cluster) in enumerate(rows, 1)
    )


def stray_host_teams(
    references: References, allocation_teams: Iterable[str], display: str
) -> tuple[str, ...]:
    """A warning line for each team of hosts.csv (`display`) that neither users.csv,
    teams.csv nor any allocation names: most likely a typo, which would put the hosts'
    GPUs in a team of their own."""
    known = {user.team for user in references.users} | {team.team for team in references.teams}
    known.update(allocation_teams)
    stray: dict[str, int] = {}
    for rule in references.hosts:
        if rule.team not in known:
            stray.setdefault(rule.team, rule.line)
    return tuple(
        f"{display}: line {line}: team '{team}' is in neither users.csv, teams.csv nor any "
        "allocation (a typo?)"
        for team, line in stray.items()
    )


def read_prices(path: Path, display: str | None = None) -> tuple[PriceRule, ...]:
    """ref/prices.csv: GPU name globs and their price per GPU-hour in file order, each with
    its optional `valid_from` and `cluster` (the site it prices; empty: every site)."""
    rows = _read_file(
        path,
        PRICES_COLUMNS,
        lambda row: (
            _required(row, "gpu_glob"),
            _number(row, "usd_per_gpu_hour"),
            _valid_from(row),
            (row.cells.get("cluster") or "").strip() or None,
        ),
        display or str(path),
        PRICES_OPTIONAL,
    )
    return tuple(
        PriceRule(order, glob, price, valid_from, cluster)
        for order, (glob, price, valid_from, cluster) in enumerate(rows, 1)
    )


def read_allocations(
    path: Path,
    source_file: str,
    display: str | None = None,
    *,
    set_aside: list[SetAside] | None = None,
) -> tuple[Allocation, ...]:
    """One raw/allocations/*.csv file; its optional `cluster` column names the site whose
    host a row covers (empty: the site of a file named `<name>@<site>.csv`, as the mirror
    of a site's raw_location names its files, else the host of that name at every site).
    Its optional `gpu_uuid` column names the MIG device or GPU a row holds (its gpu_index
    may then be empty). Its bad lines go to `set_aside` (`_read_lines`; None: the first
    fails the read)."""
    file_site = folder_host(path.name.rpartition(".")[0])[1]  # the mirror's `<name>@<site>`

    def parse(row: _Row) -> Allocation:
        start = _timestamp(row, "start_ts", required=True)
        end = _timestamp(row, "end_ts", required=False)
        assert start is not None
        if end is not None and end < start:
            raise _RefError(row.line, "'end_ts' is before 'start_ts'")
        gpu_uuid = _gpu_uuid(row, "gpu_uuid")
        by_uuid = gpu_uuid is not None and row.cells["gpu_index"] is None
        return Allocation(
            job_id=row.cells["job_id"],
            user=row.cells["user"],
            team=row.cells["team"],
            host=_required(row, "host"),
            gpu_index=None if by_uuid else _gpu_index(row, "gpu_index"),
            start_ts=start,
            end_ts=end,
            source_file=source_file,
            cluster=row.cells["cluster"] or file_site,
            gpu_uuid=gpu_uuid,
        )

    return tuple(
        _read_lines(
            path,
            ALLOCATIONS_COLUMNS,
            parse,
            source_file,
            display or str(path),
            ALLOCATIONS_OPTIONAL,
            set_aside,
        )
    )
