"""`gpufleet close` and `reopen`: a month's marts and showback stay as they are, or not.

Closing a month copies its marts' rows (the local days of the month; a run by the day its
start_ts falls on) into `build_state.kept_*` and its showback rows into
`build_state.closed_showback`, and lists it in `closed_periods`, in one published
transaction. Builds then give those days their kept rows back and report, not apply, what
they computed differently there (`gpufleet/warehouse/build/kept.py`); `export showback`
writes the kept rows.
Reopening forgets them and has the next build recompute the month.
It sits above the engine, beside the showback it keeps: the warehouse honours kept rows
and imports neither. docs/operations.md#closing-a-month.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass

import duckdb

from gpufleet.carbon import use_grid
from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.kept_showback import ADDED_COLUMNS
from gpufleet.kept_showback import CLOSED_SHOWBACK as SHOWBACK_TABLE
from gpufleet.showback import SHOWBACK_SQL, month_days, showback_params
from gpufleet.site_names import check_cluster
from gpufleet.warehouse.base.catalog import has_table
from gpufleet.warehouse.build.kept import CLOSED_ROW, ensure_kept_tables, forget_days, keep_days
from gpufleet.warehouse.build.models import MACROS_FILE_NAME, SQL_DIR, set_variables
from gpufleet.warehouse.publish.slots import DEFAULT_LOCK_TIMEOUT_S, write_transaction

# The local days of the month (from $first to $next) that retention has not kept already.
_MONTH_DAYS = (
    "{day} >= greatest($first, (select coalesce(max(retained_from), date '0001-01-01')"
    " from build_state.retention)) and {day} < $next"
)

# A showback row of a site closed in its month already (sites hold no '/').
_CLOSED_SHOWBACK_ROW = """coalesce(
    x_month || '/' || x_cluster in (
        select month || '/' || cluster from main.closed_periods where cluster is not null),
    false
)"""


@dataclass(frozen=True, kw_only=True)
class Closing:
    """What `close` or `reopen` did."""

    month: str
    cluster: str | None = None  # the site; None: every site
    closed: bool  # True: closed; False: reopened
    rows: int = 0  # mart rows kept (close)
    recompute_from: dt.date | None = None  # the next build recomputes from here (reopen)

    def __str__(self) -> str:
        month = f"{self.month}{_site(self.cluster)}"
        if self.closed:
            return (
                f"closed {month}: {self.rows:,} mart rows and its showback kept as they "
                "are; builds report what they would change there instead of applying it"
            )
        if self.recompute_from is None:
            return f"reopened {month}: its days are past retention and stay as they are"
        return (
            f"reopened {month}: the next build recomputes every GPU from {self.recompute_from} on"
        )


def _checked_month(
    month: str, today: dt.date | dt.datetime | None, zones: list[str], *, closing: bool
) -> tuple[dt.date, dt.date]:
    """The month's first day and the next month's; one-line errors for a month that is not
    one, one in the future in every zone of `zones` and (`closing`) one not over yet in one
    of them. `today` is a local date of every zone, or an instant (default: now) that each
    zone has its own date of."""
    try:
        first, next_first = month_days(month)
    except ValueError as exc:
        raise GpufleetError(str(exc)) from exc
    days = {zone: _local_date(today, zone) for zone in zones}
    if all(first > day for day in days.values()):
        raise GpufleetError(f"{month} is in the future ({', '.join(days)})")
    not_over = [zone for zone, day in days.items() if next_first > day]
    if closing and not_over:
        raise GpufleetError(
            f"{month} is not over yet: it ends {next_first} 00:00 {not_over[0]}; close it "
            "after that, once its samples are in and built"
        )
    return first, next_first


def _local_date(today: dt.date | dt.datetime | None, zone: str) -> dt.date:
    if isinstance(today, dt.datetime):
        return today.astimezone(zoneinfo.ZoneInfo(zone)).date()
    return today or dt.datetime.now(zoneinfo.ZoneInfo(zone)).date()


def _site_zones(con: duckdb.DuckDBPyConnection, config: Config, cluster: str | None) -> list[str]:
    """The time zones of the days closed: site `cluster`'s, or (None) those of every site
    the marts hold ([clusters.<site>] timezone, else the configured one), sorted."""
    if cluster is not None:
        return [config.site_timezone(cluster)]
    sites = (
        con.execute("select distinct cluster from main.team_daily").fetchall()
        if has_table(con, "team_daily")
        else []
    )
    return sorted({config.site_timezone(site) for (site,) in sites}) or [config.timezone]


def _closed(con: duckdb.DuckDBPyConnection, month: str) -> dict[str | None, dt.datetime]:
    """The sites `month` is closed for (None: every site), with when."""
    rows = con.execute(
        "select cluster, closed_at from main.closed_periods where month = ?", [month]
    ).fetchall()
    return dict(rows)


def _site(cluster: str | None) -> str:
    return f" for site {cluster}" if cluster is not None else ""


def _check_site(cluster: str | None) -> None:
    """A site name given to close or reopen: one line when it cannot be one."""
    if cluster is not None:
        try:
            check_cluster(cluster)
        except ValueError as exc:
            raise GpufleetError(str(exc)) from None


def close_month(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    month: str,
    *,
    cluster: str | None = None,
    today: dt.date | dt.datetime | None = None,
) -> Closing:
    """Close `month` (YYYY-MM, local dates of each site's zone) for every site, or for site
    `cluster`, on a writer's connection: once it is over in the zone of every site closed
    (`today`: see _checked_month)."""
    _check_site(cluster)
    zones = _site_zones(con, config, cluster)
    first, next_first = _checked_month(month, today, zones, closing=True)
    ensure_kept_tables(con)
    closed = _closed(con, month)
    for site in (None, cluster):
        if site in closed:
            raise GpufleetError(
                f"{month} is closed already{_site(site) or (' for every site' if cluster else '')}"
                f" (since {closed[site]:%Y-%m-%d %H:%M %Z})"
            )
    built = has_table(con, "build_state.watermark") and con.execute(
        "select count(*) from build_state.watermark"
    ).fetchone() != (0,)
    if not built:
        raise GpufleetError("the warehouse has no marts yet; run 'gpufleet build' first")
    if cluster is not None and con.execute(
        "select count(*) from main.team_daily where cluster = ?", [cluster]
    ).fetchall() == [(0,)]:
        sites = con.execute(
            "select string_agg(distinct cluster, ', ' order by cluster) from main.team_daily"
        ).fetchall()[0][0]
        raise GpufleetError(
            f"no samples of site {cluster!r} in the warehouse (its sites: {sites or 'none'})"
        )
    set_variables(con, config)
    con.execute((SQL_DIR / MACROS_FILE_NAME).read_text(encoding="utf-8"))
    use_grid(con, config)  # the showback's x_co2_kg
    params = {"first": first, "next": next_first}
    if cluster is None:  # the sites closed before keep what they kept
        rows = keep_days(con, f"{_MONTH_DAYS} and not {CLOSED_ROW}", params)
    else:
        rows = keep_days(
            con, f"{_MONTH_DAYS} and cluster = $cluster", {**params, "cluster": cluster}
        )
    _keep_showback(con, month, cluster)
    con.execute("insert into main.closed_periods values (?, ?, now())", [month, cluster])
    return Closing(month=month, cluster=cluster, closed=True, rows=rows)


def _keep_showback(con: duckdb.DuckDBPyConnection, month: str, cluster: str | None) -> None:
    """The month's showback rows as `export showback` computes them now: of site `cluster`,
    or (None) of every site not closed before."""
    params = showback_params(month)
    con.execute(
        f"create table if not exists {SHOWBACK_TABLE} as from ({SHOWBACK_SQL}) limit 0", params
    )
    for column, data_type in ADDED_COLUMNS.items():  # a table made before they were added
        con.execute(f"alter table {SHOWBACK_TABLE} add column if not exists {column} {data_type}")
    rows = "x_cluster = $cluster" if cluster is not None else f"not ({_CLOSED_SHOWBACK_ROW})"
    con.execute(
        f"insert into {SHOWBACK_TABLE} by name from ({SHOWBACK_SQL}) where {rows}",
        {**params, "cluster": cluster} if cluster is not None else params,
    )


def reopen_month(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    month: str,
    *,
    cluster: str | None = None,
    today: dt.date | dt.datetime | None = None,
) -> Closing:
    """Reopen `month` (every site closed in it, or site `cluster`) on a writer's
    connection: the next build recomputes it."""
    _check_site(cluster)
    zones = _site_zones(con, config, cluster)
    first, next_first = _checked_month(month, today, zones, closing=False)
    ensure_kept_tables(con)
    closed = _closed(con, month)
    if cluster is not None and None in closed:
        raise GpufleetError(f"{month} is closed for every site: reopen it without --cluster")
    if not closed or (cluster is not None and cluster not in closed):
        raise GpufleetError(f"{month} is not closed{_site(cluster)}")
    set_variables(con, config)
    con.execute((SQL_DIR / MACROS_FILE_NAME).read_text(encoding="utf-8"))  # RUN_DAY's zones
    params: dict[str, object] = {"first": first, "next": next_first}
    if cluster is None:
        forget_days(con, _MONTH_DAYS, params)
        con.execute(f"delete from {SHOWBACK_TABLE} where x_month = ?", [month])
        con.execute("delete from main.closed_periods where month = ?", [month])
    else:
        forget_days(con, f"{_MONTH_DAYS} and cluster = $cluster", {**params, "cluster": cluster})
        con.execute(
            f"delete from {SHOWBACK_TABLE} where x_month = ? and x_cluster = ?", [month, cluster]
        )
        con.execute(
            "delete from main.closed_periods where month = ? and cluster = ?", [month, cluster]
        )
    row = con.execute("select max(retained_from) from build_state.retention").fetchone()
    since = max(first, row[0]) if row and row[0] is not None else first
    if since >= next_first:
        return Closing(month=month, cluster=cluster, closed=False)
    con.execute("insert into build_state.recompute_from values (?)", [since])
    return Closing(month=month, cluster=cluster, closed=False, recompute_from=since)


def close(
    config: Config,
    month: str,
    *,
    cluster: str | None = None,
    today: dt.date | dt.datetime | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Closing:
    """`gpufleet close --month`: one published transaction (no Prefect)."""
    with write_transaction(config, lock_timeout_s=lock_timeout_s) as con:
        return close_month(con, config, month, cluster=cluster, today=today)


def reopen(
    config: Config,
    month: str,
    *,
    cluster: str | None = None,
    today: dt.date | dt.datetime | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> Closing:
    """`gpufleet reopen --month`: one published transaction (no Prefect)."""
    with write_transaction(config, lock_timeout_s=lock_timeout_s) as con:
        return reopen_month(con, config, month, cluster=cluster, today=today)
