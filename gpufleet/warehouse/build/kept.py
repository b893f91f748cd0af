"""Mart rows that builds keep as they are: closed months and the days retention expired.

The rows of a closed month (`closed_periods`: every site's, or one `cluster`'s) and of the
local days before the oldest one whose samples are retained (`build_state.retention`) are
copied into `build_state.kept_*` when they become kept (`keep_days`). Builds compute as
ever, full or incremental; at the end (`restore_kept`), each kept day a build changed gets
its kept rows back, `team_weekly` is summed again for the weeks of those days, and what the
build computed differently in a closed month is returned as one line per month: reported,
not applied. Reopening a month (`gpufleet/close.py`) forgets its kept rows and has
the next build recompute it (`reopened_since`). docs/operations.md#closing-a-month.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

import duckdb

from gpufleet.warehouse.base.catalog import has_table
from gpufleet.warehouse.base.table_docs import TableDoc, document
from gpufleet.warehouse.build.incremental.marts import log_replaced, replace_period_rows
from gpufleet.warehouse.build.models import Model
from gpufleet.warehouse.publish.log import current_generation

KEPT_DDL = """
create schema if not exists build_state;
create table if not exists main.closed_periods (
    month varchar not null,          -- YYYY-MM, of local dates
    cluster varchar,                 -- NULL: every site
    closed_at timestamptz not null
);
-- Samples of local days before retained_from were deleted (expired_before: the first UTC
-- date partition kept); the marts keep those days' rows.
create table if not exists build_state.retention (
    retained_from date not null,
    expired_before date not null
);
-- A month reopened: the next build recomputes every GPU from this local day on.
create table if not exists build_state.recompute_from (day date not null);
"""

# The marts kept per local day, and those kept per run (by the local day of its start_ts at
# its site, in the site's zone: a run that crosses into the next month belongs to the month
# it began in). RUN_DAY needs the macros (sql/_macros.sql site_timezone) and variables.
DAY_MARTS = (
    "gpu_hourly",
    "run_pieces",
    "gpu_team_daily",
    "alloc_only_daily",
    "team_daily",
    "gpu_daily",
    "host_daily",
)
RUN_MARTS = {
    "idle_episodes": ("episode_id", "gpu_episode"),
    "thermal_events": ("event_id", "gpu_event"),
}
WEEK_MART = "team_weekly"  # summed again from gpu_team_daily for the weeks of kept days
RUN_DAY = "timezone(site_timezone(cluster), start_ts)::date"

# Whether a row of local day `{day}` and site `cluster` is in a closed month: closed for
# every site, or for its own (site names hold no '/').
CLOSED_ROW = """(
    strftime({day}, '%Y-%m') in (select month from main.closed_periods where cluster is null)
    or strftime({day}, '%Y-%m') || '/' || cluster in (
        select month || '/' || cluster from main.closed_periods where cluster is not null)
)"""
_RETAINED_FROM = (
    "(select coalesce(max(retained_from), date '0001-01-01') from build_state.retention)"
)
# Whether a row is kept: of a day retention expired, or closed.
_KEPT = f"({{day}} < {_RETAINED_FROM} or {CLOSED_ROW})"
_CLOSED = f"({{day}} >= {_RETAINED_FROM} and {CLOSED_ROW})"


def kept_table(mart: str) -> str:
    return f"build_state.kept_{mart}"


CLOSED_PERIODS_DOCS: list[TableDoc] = [
    (
        "closed_periods",
        None,
        "Closed months (gpufleet close): their marts and showback stay as they were at close",
    ),
    ("closed_periods", "month", "YYYY-MM, of local dates in each site's time zone"),
    ("closed_periods", "cluster", "The site closed; NULL: every site"),
    ("closed_periods", "closed_at", "When the month was closed"),
]


def ensure_kept_tables(con: duckdb.DuckDBPyConnection) -> None:
    if not has_table(con, "closed_periods"):
        con.execute(KEPT_DDL)
        document(con, CLOSED_PERIODS_DOCS)
    con.execute(KEPT_DDL)


def _has_marts(con: duckdb.DuckDBPyConnection) -> bool:
    names = [*DAY_MARTS, *RUN_MARTS, WEEK_MART]
    rows = con.execute(
        "select count(*) from duckdb_tables() where database_name = current_database()"
        " and schema_name = 'main' and list_contains(?, table_name)",
        [names],
    ).fetchall()
    return rows[0][0] == len(names)


def _columns(con: duckdb.DuckDBPyConnection, mart: str, *, rounded: bool = False) -> str:
    """The kept table's columns (a mart may have gained some since it was made); `rounded`:
    floats to 6 decimals, so that sums added up in another order compare equal."""
    rows = con.execute(
        "select column_name, data_type from duckdb_columns()"
        " where database_name = current_database()"
        " and schema_name = 'build_state' and table_name = ? order by column_index",
        [f"kept_{mart}"],
    ).fetchall()
    names = []
    for name, data_type in rows:
        quoted = '"' + name.replace('"', '""') + '"'
        rounding = rounded and data_type in ("DOUBLE", "FLOAT")
        names.append(f"round({quoted}, 6) as {quoted}" if rounding else quoted)
    return ", ".join(names)


def keep_days(con: duckdb.DuckDBPyConnection, day_sql: str, params: Mapping[str, object]) -> int:
    """Copy the marts' rows of the local days `day_sql` selects (a condition on `{day}`, with
    `params`) into the kept tables; the rows copied (0 before the first build). The caller
    has made sure those days are not kept already."""
    if not _has_marts(con):
        return 0
    copied = 0
    for mart, day in [*((m, "day") for m in DAY_MARTS), *((m, RUN_DAY) for m in RUN_MARTS)]:
        con.execute(f"create table if not exists {kept_table(mart)} as from {mart} limit 0")
        columns = _columns(con, mart)
        row = con.execute(
            f"""
            insert into {kept_table(mart)} ({columns})
            select {columns} from {mart} where {day_sql.format(day=day)}
            """,
            dict(params),
        ).fetchone()
        copied += int(row[0]) if row else 0
    _copy_other_slot(con)
    return copied


def _copy_other_slot(con: duckdb.DuckDBPyConnection) -> None:
    """The kept tables changed: the other slot copies this publish's file rather than
    compare them row by row on every catch-up (publish/catch_up.py skips them)."""
    con.execute("insert into build_state.full_builds values (?)", [current_generation(con)])


def forget_days(con: duckdb.DuckDBPyConnection, day_sql: str, params: Mapping[str, object]) -> None:
    """Drop the kept rows of the local days `day_sql` selects (a month reopened)."""
    for mart, day in [*((m, "day") for m in DAY_MARTS), *((m, RUN_DAY) for m in RUN_MARTS)]:
        if _columns(con, mart):
            con.execute(
                f"delete from {kept_table(mart)} where {day_sql.format(day=day)}", dict(params)
            )
    _copy_other_slot(con)


def reopened_since(con: duckdb.DuckDBPyConnection) -> dt.date | None:
    """The local day a reopened month asks the next build to recompute from (None: none)."""
    row = con.execute("select min(day) from build_state.recompute_from").fetchone()
    return None if row is None else row[0]


def _anything_kept(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute(
        "select (select count(*) from main.closed_periods)"
        " + (select count(*) from build_state.retention)"
    ).fetchone()
    return bool(row and row[0])


def restore_kept(
    con: duckdb.DuckDBPyConnection, models: Mapping[str, Model], *, full: bool
) -> list[str]:
    """After a build: give the kept days the rows they had (only those the build touched,
    unless `full`), sum their weeks again; one line per closed month the build computed
    differently. The recompute a reopened month asked for is done."""
    con.execute("delete from build_state.recompute_from")
    if not _anything_kept(con) or not _has_marts(con):
        return []
    since = None if full else _touched_since(con)
    if not full and since is None:
        return []
    from_day = f"day >= date '{since}'" if since else "true"
    lines = _closed_month_lines(con, from_day)
    con.execute("create or replace temp table _kept_days (day date)")
    for mart in DAY_MARTS:
        _restore_days(con, mart, from_day)
    for mart, (id_column, key) in RUN_MARTS.items():
        _restore_runs(con, mart, id_column, key, full=full)
    con.execute(
        "create or replace temp table _inc_weeks as"
        " select distinct iso_week(day) as iso_week from _kept_days"
    )
    if con.execute("select count(*) from _inc_weeks").fetchone() != (0,):
        replace_period_rows(con, models[WEEK_MART], {}, per_week=True)
    con.execute("drop view if exists temp._inc_gpu_team_daily")
    con.execute("drop table temp._inc_weeks")
    con.execute("drop table temp._kept_days")
    return lines


def _touched_since(con: duckdb.DuckDBPyConnection) -> dt.date | None:
    """The earliest local day of a kept mart's rows that this publish's incremental build
    replaced (from its log, `build_state.replaced`), or None if it replaced none."""
    row = con.execute(
        """
        select min(day) from build_state.replaced
        where generation = ? and list_contains(?, table_name)
        """,
        [current_generation(con), [*DAY_MARTS, *RUN_MARTS]],
    ).fetchone()
    runs = con.execute(
        "select count(*) from build_state.replaced"
        " where generation = ? and list_contains(?, table_name)",
        [current_generation(con), list(RUN_MARTS)],
    ).fetchone()
    if row is None or row[0] is None:
        return dt.date(1, 1, 1) if runs and runs[0] else None
    return row[0]


def _restore_days(con: duckdb.DuckDBPyConnection, mart: str, from_day: str) -> None:
    """The mart's kept days and sites (from `from_day`) that differ from their kept rows get
    them back."""
    columns = _columns(con, mart)
    kept = kept_table(mart)
    scope = f"{_KEPT.format(day='day')} and {from_day}"
    con.execute(
        f"""
        create or replace temp table _kept_changed as
        select distinct day, cluster, from (
            (select {columns} from {mart} where {scope}
             except all select {columns} from {kept} where {scope})
            union all
            (select {columns} from {kept} where {scope}
             except all select {columns} from {mart} where {scope})
        )
        """
    )
    match = "rows.day = keys.day and rows.cluster is not distinct from keys.cluster"
    con.execute(f"delete from {mart} as rows using _kept_changed as keys where {match}")
    con.execute(
        f"insert into {mart} by name select rows.* from {kept} as rows"
        f" semi join _kept_changed as keys on {match}"
    )
    log_replaced(con, mart, "day", "select distinct day from _kept_changed")
    con.execute("insert into _kept_days select day from _kept_changed")
    con.execute("drop table temp._kept_changed")


def _restore_runs(
    con: duckdb.DuckDBPyConnection, mart: str, id_column: str, key: str, *, full: bool
) -> None:
    """The kept runs (of kept start days) that this build replaced (all, if `full`) get
    their kept rows back; a run it made that starts on a kept day goes. After an incremental
    build the runs it replaced (from its log) are looked up first, and only their rows are
    compared: the marts and kept tables grow with every day kept."""
    columns = _columns(con, mart)
    kept = kept_table(mart)
    built, kept_rows = mart, kept
    if not full:
        # each run's bound on its end as the build logged it (publish/log.py REPLAY_BOUNDS):
        # the row groups of runs that ended before are skipped, the mart's and the kept
        # table's (a kept row of a touched run ends at or after it too: the build holds the
        # bound to the kept row's end, incremental/pieces.py `_kept_ends`)
        con.execute(
            """
            create or replace temp table _kept_runs as
            select gpu_uuid, run_id,
                min(coalesce(since_ts, '-infinity'::timestamptz)) as since_ts,
            from build_state.replaced
            where generation = ? and table_name = ?
            group by all
            """,
            [current_generation(con), mart],
        )
        if con.execute("select count(*) from _kept_runs").fetchone() == (0,):
            con.execute("drop table temp._kept_runs")
            return
        built, kept_rows = "_kept_built", "_kept_rows"
        for source, target in ((mart, built), (kept, kept_rows)):
            con.execute(
                f"""
                create or replace temp table {target} as
                select {columns} from {source} as rows
                semi join _kept_runs as runs
                    on runs.gpu_uuid = rows.gpu_uuid and runs.run_id = rows.{id_column}
                    and rows.end_ts >= runs.since_ts
                where rows.end_ts >= (select min(since_ts) from _kept_runs)
                """
            )
    scope = _KEPT.format(day=RUN_DAY)
    # since_ts: the earliest end of the run's rows compared, built and kept (those replaced)
    con.execute(
        f"""
        create or replace temp table _kept_changed as
        select gpu_uuid, {id_column} as run_id, min(end_ts) as since_ts, from (
            (select {columns} from {built} where {scope}
             except all select {columns} from {kept_rows} where {scope})
            union all
            (select {columns} from {kept_rows} where {scope}
             except all select {columns} from {built} where {scope})
        )
        group by all
        """
    )
    if not full:
        for table in ("_kept_runs", built, kept_rows):
            con.execute(f"drop table temp.{table}")
    if con.execute("select count(*) from _kept_changed").fetchone() != (0,):
        match = f"(gpu_uuid, {id_column}) in (select (gpu_uuid, run_id) from _kept_changed)"
        ended = "end_ts >= (select min(since_ts) from _kept_changed)"
        con.execute(f"delete from {mart} where {match} and {ended}")
        con.execute(f"insert into {mart} by name select * from {kept} where {match}")
        log_replaced(con, mart, key, "select gpu_uuid, run_id, since_ts from _kept_changed")
    con.execute("drop table temp._kept_changed")


def _closed_month_lines(con: duckdb.DuckDBPyConnection, from_day: str) -> list[str]:
    """Per closed month (and site, when it is closed for some only): what the build computed
    there beyond its kept team_daily rows."""
    columns = _columns(con, "team_daily", rounded=True)
    scope = f"{_CLOSED.format(day='day')} and {from_day}"
    rows = con.execute(
        f"""
        with computed as (select {columns} from team_daily where {scope}),
        kept as (select {columns} from {kept_table("team_daily")} where {scope}),
        changed as (
            select day, cluster, team, gpu_hours, waste_usd, 1 as sign from (
                from computed except all from kept)
            union all
            select day, cluster, team, gpu_hours, waste_usd, -1 from (
                from kept except all from computed)
        )
        select
            strftime(day, '%Y-%m') as month,
            -- the site named when the month is closed for some sites only
            case when strftime(day, '%Y-%m') not in (
                select month from main.closed_periods where cluster is null) then cluster
            end as site,
            count(distinct (day, cluster, team)),
            sum(sign * gpu_hours),
            sum(sign * waste_usd),
        from changed
        group by all
        order by all
        """
    ).fetchall()
    return [
        f"closed {month}{f' (site {site})' if site else ''}: kept as closed; this build "
        f"computed {rows_changed:,} team-days differently there ({hours:+,.2f} GPU-hours, "
        f"{usd:+,.2f} USD waste); 'gpufleet reopen --month {month}"
        f"{f' --cluster {site}' if site else ''}' lets the next build apply them"
        for month, site, rows_changed, hours, usd in rows
    ]
