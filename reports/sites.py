"""The report over several sites (docs/sites.md): each team's figures summed over its sites,
or one site's figures only (`gpufleet report --cluster NAME`), and the per-site table.

`site_views` shadows the marts the report reads with temporary views of the same names on
its read-only connection, so that every query of `gpufleet.reports.queries` reads them as
it always has: `team_daily` and `team_weekly` with one row per team (their measures added
up over the team's sites, as `team_measures` adds up a site's), the other marts filtered to
the site asked for. The site is a variable, never SQL text.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpufleet.reports.queries import read

# The rows of the site asked for (every site when none is).
_ONE_SITE = "(getvariable('report_cluster') is null or cluster = getvariable('report_cluster'))"
# team_daily's and team_weekly's measures over a team's sites: a team at one site keeps its
# row's figures exactly (a ratio computed again could differ in its last digit).
_MEASURES = """
    sum(gpu_hours) as gpu_hours,
    sum(busy_gpu_hours) as busy_gpu_hours,
    case
        when count(*) = 1 then any_value(avg_util_pct)
        else 100 * sum(busy_gpu_hours) / nullif(sum(measured_gpu_hours), 0)
    end as avg_util_pct,
    sum(idle_gpu_hours) as idle_gpu_hours,
    sum(waste_gpu_hours) as waste_gpu_hours,
    sum(waste_usd) as waste_usd,
    sum(energy_kwh) as energy_kwh,
    sum(gpus)::bigint as gpus,
    sum(measured_gpu_hours) as measured_gpu_hours,
    sum(cost_usd) as cost_usd,
"""
# marts filtered to the site asked for
_FILTERED = (
    "idle_episodes",
    "thermal_events",
    "gpu_daily",
    "host_daily",
    "gpu_hourly",
    "run_pieces",
    "gpu_team_daily",
    "job_efficiency",
)


def _own(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """The warehouse's own `table`, whatever temporary view shadows its name."""
    database = con.execute("select current_database()").fetchall()[0][0]
    return '"' + str(database).replace('"', '""') + f'".main.{table}'


def _rows(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """The warehouse's own team_daily or team_weekly, with a null `cost_usd` where it was
    built before that column."""
    own = _own(con, table)
    return f"(from {own} union all by name select null::double as cost_usd where false)"


def _with_cluster(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The warehouse's tables and views that have a `cluster` column (a warehouse built
    before sites has none: it is read as it is)."""
    rows = con.execute(
        "select distinct table_name from duckdb_columns() where database_name = "
        "current_database() and schema_name = 'main' and column_name = 'cluster'"
    ).fetchall()
    return {name for (name,) in rows}


def site_views(con: duckdb.DuckDBPyConnection, cluster: str | None) -> None:
    """Shadow the marts on `con` for a report of every site (None) or of `cluster` only."""
    con.execute("set variable report_cluster = ?::varchar", [cluster])
    present = _with_cluster(con)
    for table, keys in (("team_daily", "day"), ("team_weekly", "iso_week, week_start")):
        if table not in present:
            continue
        con.execute(
            f"""
            create or replace temp view {table} as
            select {keys}, team, {_MEASURES}
            from {_rows(con, table)}
            where {_ONE_SITE}
            group by {keys}, team
            """
        )
    if cluster is None:
        return
    for table in _FILTERED:
        if table in present:
            con.execute(
                f"create or replace temp view {table} as"
                f" select * from {_own(con, table)} where {_ONE_SITE}"
            )


def site_weeks(con: duckdb.DuckDBPyConnection, week: str) -> pl.DataFrame | None:
    """Each site's week (team_weekly's measures over its teams), the site asked for only
    when one is; None when no row names a site (a fleet of one site)."""
    if not {"team_weekly", "gpu_daily"} <= _with_cluster(con):
        return None
    frame = read(
        con,
        f"""
        with sites as (
            select
                cluster,
                any_value(week_start) as week_start,
                {_MEASURES.replace("count(*) = 1", "false")}
            from {_rows(con, "team_weekly")}
            where iso_week = $week and {_ONE_SITE}
            group by cluster
        ),

        site_gpus as (
            -- distinct GPUs of the site's week (a GPU two teams used counts once; a MIG
            -- device, one with a parent GPU, is a slice of its GPU)
            select
                cluster,
                count(distinct gpu_uuid) filter (where parent_gpu_uuid is null) as gpus,
            from (
                from {_own(con, "gpu_daily")}
                union all by name select null::varchar as parent_gpu_uuid where false
            )
            where day >= (select min(week_start) from sites)
                and day < (select min(week_start) from sites) + 7
            group by cluster
        )

        select sites.* exclude (week_start, gpus), coalesce(site_gpus.gpus, 0) as gpus,
        from sites
        left join site_gpus on site_gpus.cluster is not distinct from sites.cluster
        order by sites.cluster nulls last
        """,
        {"week": week},
    )
    return frame if frame["cluster"].is_not_null().any() else None
