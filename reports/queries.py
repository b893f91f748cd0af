"""The report's reads: one parameterized query per thing it shows, each a polars DataFrame.

Rows come over from DuckDB through Arrow (`.pl()`), as the marts typed them, with every name
made printable (`gpufleet.reports.names`); timestamps stay in UTC here
(`gpufleet.reports.data` shows them in the configured zone). `start` and `end` are the
week's bounds, local midnights; the marts' `day` columns are local days already.

Ratios are computed here, in SQL, and not in polars: polars divides a column by a value
(or by a column it holds as one repeated value) as a multiplication by its reciprocal, which
can differ from the quotient in the last digit; DuckDB divides as Python does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

import duckdb
import polars as pl

from gpufleet.reports.names import printable_names
from gpufleet.reports.records import FleetTotals
from gpufleet.weeks import previous_week, week_monday

TREND_WEEKS = 8  # weeks of waste trend, this one included
TOP_WASTE_JOBS = 15
TOP_GPUS = 10
MAX_THERMAL_HOSTS = 40  # the rows of the throttling heatmap; the counts cover every host
MAX_QUARANTINED = 50
MAX_WEEKS_LISTED = 8  # the weeks with data that a page without data names


def read(
    con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, object] | None = None
) -> pl.DataFrame:
    """The rows of one query, its values passed as `$name` parameters, its names printable."""
    return printable_names(con.sql(sql, params=dict(params) if params else None).pl())


def _days(start: dt.datetime, end: dt.datetime) -> dict[str, object]:
    return {"first_day": start.date(), "next_monday": end.date()}


def _hours(start: dt.datetime, end: dt.datetime) -> float:
    """Elapsed hours between aware datetimes (167 or 169 in a week with a daylight-saving day)."""
    return (end.astimezone(dt.UTC) - start.astimezone(dt.UTC)).total_seconds() / 3600


FLEET_SUMS = """
with teams as (
    select
        coalesce(sum(gpu_hours), 0) as gpu_hours,
        coalesce(sum(idle_gpu_hours), 0) as idle_gpu_hours,
        coalesce(sum(waste_gpu_hours), 0) as waste_gpu_hours,
        coalesce(sum(waste_usd), 0) as waste_usd,
        coalesce(sum(energy_kwh), 0) as energy_kwh
    from team_weekly
    where iso_week = $week
),
gpus as (
    select
        -- physical GPUs: a MIG device (one with a parent GPU) is a slice of its GPU, counted
        -- by slice (a warehouse built before parent_gpu_uuid: every row a GPU)
        count(distinct gpu_uuid) filter (where parent_gpu_uuid is null) as gpus_seen,
        coalesce(sum(hours_observed), 0) as observed_gpu_hours
    from (from gpu_daily union all by name select null::varchar as parent_gpu_uuid where false)
    where day >= $first_day and day < $next_monday
),
-- The fleet's mean utilization is utilization-weighted over samples, as avg_util_pct is
-- per team: the teams' busy and measured hours add up to it, their averages do not.
utilization as (
    select
        sum(busy_gpu_hours) as busy_gpu_hours,
        sum(measured_gpu_hours) as measured_gpu_hours
    from team_daily
    where day >= $first_day and day < $next_monday
),
thermal as (
    select
        count(*) as thermal_events,
        coalesce(sum(duration_s), 0) / 60 as throttled_minutes
    from thermal_events
    where start_ts >= $start and start_ts < $end
),
-- The idle capacity: the GPU-hours no allocation, process or hosts.csv row accounts for (the
-- team `(unallocated)`), at their GPUs' prices (OpenCost's idle bucket): no team's waste.
capacity as (
    select
        coalesce(sum(gpu_hours), 0) as idle_capacity_gpu_hours,
        coalesce(sum(cost_usd), 0) as idle_capacity_usd
    from (
        -- a warehouse built before cost_usd has none: 0 there
        from team_weekly union all by name select null::double as cost_usd where false
    )
    where iso_week = $week and team = $unallocated
)
select * from teams, gpus, utilization, thermal, capacity
"""

UNALLOCATED = "(unallocated)"  # the team of GPUs no rule attributes (docs/reference.md)


def fleet_totals(
    con: duckdb.DuckDBPyConnection, week: str, start: dt.datetime, end: dt.datetime
) -> FleetTotals:
    params = {"week": week, "start": start, "end": end, "unallocated": UNALLOCATED}
    sums = read(con, FLEET_SUMS, {**params, **_days(start, end)})
    return FleetTotals.from_sums(sums.row(0, named=True), week_hours=_hours(start, end))


def teams(con: duckdb.DuckDBPyConnection, week: str, covered_hours: float) -> pl.DataFrame:
    """Each team's week from team_weekly, with last week's figures; the costliest first.
    `gpus` are the GPUs it used at any time, `avg_gpus` those it held on average: its
    GPU-hours over the `covered_hours` of the week that have samples."""
    return read(
        con,
        """
        with this_week as (
            select * from team_weekly where iso_week = $week
        ),
        last_week as (
            select * from team_weekly where iso_week = $previous_week
        )
        select
            this_week.team,
            this_week.gpus,
            this_week.gpu_hours / $covered_hours as avg_gpus,
            this_week.gpu_hours,
            this_week.busy_gpu_hours,
            this_week.avg_util_pct,
            this_week.idle_gpu_hours,
            this_week.waste_gpu_hours,
            this_week.waste_usd,
            this_week.energy_kwh,
            last_week.gpu_hours as prev_gpu_hours,
            last_week.avg_util_pct as prev_avg_util_pct,
            last_week.waste_gpu_hours as prev_waste_gpu_hours,
            last_week.waste_usd as prev_waste_usd
        from this_week
        left join last_week on last_week.team = this_week.team
        order by this_week.waste_usd desc, this_week.waste_gpu_hours desc, this_week.team
        """,
        {"week": week, "previous_week": previous_week(week), "covered_hours": covered_hours},
    )


def heatmap(con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """GPU-hours and utilization by local day, hour and team."""
    return read(
        con,
        """
        select
            day,
            hour,
            team,
            sum(observed_s) / 3600 as gpu_hours,
            sum(busy_s) / 3600 as busy_gpu_hours,
            sum(utilization_s) / 3600 as util_hours
        from gpu_hourly
        where day >= $first_day and day < $next_monday
        group by all
        order by day, hour, team
        """,
        _days(start, end),
    )


def waste_trend(con: duckdb.DuckDBPyConnection, week: str) -> pl.DataFrame:
    """Each team's waste in the TREND_WEEKS weeks up to this one."""
    monday = week_monday(week)
    return read(
        con,
        """
        select iso_week, week_start, team, waste_gpu_hours, waste_usd, gpu_hours
        from team_weekly
        where week_start > $first_monday and week_start <= $monday
        order by week_start, team
        """,
        {"first_monday": monday - dt.timedelta(weeks=TREND_WEEKS), "monday": monday},
    )


def thermal_hours(
    con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime
) -> pl.DataFrame:
    """Throttled minutes per host and local hour of the week, from gpu_hourly: the hours with
    throttling of the MAX_THERMAL_HOSTS hosts that throttled most, the most throttled host
    first. A host is a host of a site (`cluster`), `host` its label: `node01@siteA`, or the
    name alone without a site. `hour_start` is the hour's local wall-clock time;
    `hosts_throttled` counts every host that throttled, shown or not."""
    return read(
        con,
        """
        with gpu_hours as (
            -- a warehouse built before sites has no cluster column: null there
            from gpu_hourly union all by name select null::varchar as cluster where false
        ),
        hours as (
            select
                cluster,
                host,
                day,
                hour,
                sum(thermal_s) as thermal_s,
                count(distinct gpu_uuid) filter (where thermal_s > 0) as gpus_throttled,
            from gpu_hours
            where day >= $first_day and day < $next_monday
            group by cluster, host, day, hour
            having sum(thermal_s) > 0
        ),
        hosts as (
            select
                cluster,
                host,
                row_number() over (
                    order by sum(thermal_s) desc, host, cluster nulls first
                ) as host_rank,
                count(*) over () as hosts_throttled,
            from hours
            group by cluster, host
        )
        select
            coalesce(hours.host || '@' || hours.cluster, hours.host) as host,
            hours.cluster,
            hours.day::timestamp + to_hours(hours.hour) as hour_start,
            hours.thermal_s / 60 as throttled_minutes,
            hours.gpus_throttled,
            hosts.host_rank,
            hosts.hosts_throttled,
        from hours
        inner join hosts
            on hosts.host = hours.host and hosts.cluster is not distinct from hours.cluster
        where hosts.host_rank <= $top_hosts
        order by hosts.host_rank, hour_start
        """,
        {**_days(start, end), "top_hosts": MAX_THERMAL_HOSTS},
    )


def throttled_gpus(
    con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime
) -> pl.DataFrame:
    """The TOP_GPUS GPUs that throttled longest in the week's thermal events (and how long
    in events with a HW slowdown), with their peak temperature and lowest SM clock during
    them."""
    return read(
        con,
        """
        select
            gpu_uuid,
            any_value(host order by start_ts desc) as host,
            any_value(gpu_index order by start_ts desc) as gpu_index,
            count(*) as events,
            count(*) filter (where is_hw) as hw_events,
            coalesce(sum(duration_s), 0) / 60 as throttled_minutes,
            coalesce(sum(duration_s) filter (where is_hw), 0) / 60 as hw_throttled_minutes,
            max(max_temp_gpu_c) as max_temp_gpu_c,
            min(min_sm_clock_mhz) as min_sm_clock_mhz
        from thermal_events
        where start_ts >= $start and start_ts < $end
        group by gpu_uuid
        order by throttled_minutes desc, events desc, gpu_uuid
        limit $top
        """,
        {"start": start, "end": end, "top": TOP_GPUS},
    )


def throttled_hosts(
    con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime
) -> pl.DataFrame:
    """Every host (of its site, `cluster`) with thermal events in the week, and how many of
    its GPUs throttled."""
    return read(
        con,
        """
        with events as (
            -- a warehouse built before sites has no cluster column: null there
            from thermal_events union all by name select null::varchar as cluster where false
        )
        select cluster, host, count(distinct gpu_uuid) as gpus_throttled
        from events
        where start_ts >= $start and start_ts < $end
        group by cluster, host
        order by host, cluster nulls first
        """,
        {"start": start, "end": end},
    )


def host_days(con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Each host's days of the week from host_daily, in host, site (`cluster`, null without
    one) and day order, with the day's coverage: its observed GPU-hours over its GPUs x the
    span from its first sample to its last (null without GPUs or span). A gap inside the
    day, or a GPU that stopped reporting, lowers it below 100%."""
    return read(
        con,
        """
        with host_days as (
            -- a warehouse built before sites has no cluster column: null there
            from host_daily union all by name select null::varchar as cluster where false
        ),
        days as (
            select
                day, cluster, host, gpus, samples, hours_observed, first_ts, last_ts,
                (epoch_us(last_ts) - epoch_us(first_ts)) / 1000000 / 3600 as span_hours
            from host_days
            where day >= $first_day and day < $next_monday
        )
        select
            day, cluster, host, gpus, samples, hours_observed, first_ts, last_ts,
            case
                when coalesce(gpus, 0) <> 0 and span_hours > 0
                then least(100.0::double, 100 * coalesce(hours_observed, 0) / (gpus * span_hours))
            end as coverage_pct
        from days
        order by host, cluster nulls first, day
        """,
        _days(start, end),
    )


def quarantined(con: duckdb.DuckDBPyConnection) -> tuple[pl.DataFrame, int]:
    """The latest quarantined files, and how many there are in all."""
    files = read(
        con,
        """
        select path, reason, quarantined_at
        from quarantined_files
        order by quarantined_at desc, path
        limit $cap
        """,
        {"cap": MAX_QUARANTINED},
    )
    total = read(con, "select count(*) as files from quarantined_files").item()
    return files, int(total or 0)


def weeks_with_data(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The latest weeks that team_weekly has rows for, the newest first."""
    weeks = read(
        con,
        """
        select iso_week
        from team_weekly
        group by iso_week
        order by iso_week desc
        limit $cap
        """,
        {"cap": MAX_WEEKS_LISTED},
    )
    return [str(week) for week in weeks["iso_week"]]


# --- one team's week (the weekly email to its lead) ------------------------------------------


def team_weeks(con: duckdb.DuckDBPyConnection, week: str) -> pl.DataFrame:
    """Every team's row of team_weekly for `week` and the week before."""
    return read(
        con,
        """
        select *
        from team_weekly
        where iso_week in ($week, $previous_week)
        order by team, iso_week
        """,
        {"week": week, "previous_week": previous_week(week)},
    )


def waste_episodes(
    con: duckdb.DuckDBPyConnection,
    start: dt.datetime,
    end: dt.datetime,
    *,
    top: int | None = None,
) -> pl.DataFrame:
    """The waste episodes that overlap the week, the costliest first (the `top` of them, or
    all)."""
    return read(
        con,
        """
        select
            team, "user", job_id, host, gpu_index, gpu_name, gpu_uuid, attributed_by,
            start_ts, end_ts, idle_seconds, held_memory, waste_usd
        from idle_episodes
        where is_waste and start_ts < $end and end_ts > $start
        order by waste_usd desc, idle_seconds desc, start_ts, gpu_uuid
        limit $top
        """,
        {"start": start, "end": end, "top": top},
    )


# The week's part of each waste episode, as team_weekly counts it: the hours of its samples
# on the week's local days (an episode crossing into another week counts only its part in
# this one) and that share of its cost. An episode is keyed by its GPU and the hash of its
# run's first sample time (sql/intermediate/int_idle_episode_days.sql).
WEEK_WASTE = """
with pieces as (
    select
        gpu_uuid,
        (hash(gpu_uuid, idle_run_start_ts) >> 1)::bigint as episode_id,
        sum(seconds) as seconds
    from run_pieces
    where idle_run_start_ts is not null and day between $monday and $sunday
    group by all
),
waste as (
    select
        episodes.*,
        pieces.seconds as week_seconds,
        episodes.waste_usd * pieces.seconds / episodes.idle_seconds as week_waste_usd
    from pieces
    inner join idle_episodes as episodes
        on episodes.gpu_uuid = pieces.gpu_uuid
        and episodes.episode_id = pieces.episode_id
    where episodes.is_waste
)
"""


def _week_days(week: str) -> dict[str, object]:
    monday = week_monday(week)
    return {"monday": monday, "sunday": monday + dt.timedelta(days=6)}


def waste_jobs(
    con: duckdb.DuckDBPyConnection, week: str, *, top: int | None = None
) -> pl.DataFrame:
    """The week's idle waste per job, the costliest first (the `top` rows, or all): one row
    for a job's waste episodes on all its GPUs; without a job, one for a user's (or, with no
    user either, a team's) episodes on one host. `waste_gpu_hours` and `waste_usd` are the
    week's part (see WEEK_WASTE); `start_ts` and `end_ts` span the whole episodes; `gpu_list`
    holds each GPU's host and index; `is_host_owned`: the team has those GPUs through a
    hosts.csv row (attributed by `host`), with no user or job."""
    return read(
        con,
        WEEK_WASTE
        + """,
        jobs as (
            select
                team,
                "user",
                job_id,
                case when job_id is null then host end as job_host,
                count(*) as episodes,
                count(distinct gpu_uuid) as gpus,
                list_sort(list(distinct {'host': host, 'gpu_index': gpu_index})) as gpu_list,
                sum(week_seconds) / 3600 as waste_gpu_hours,
                sum(week_waste_usd) as waste_usd,
                min(start_ts) as start_ts,
                max(end_ts) as end_ts,
                bool_or(held_memory) as held_memory,
                -- no user or job: a host that hosts.csv gives the team
                bool_and(attributed_by = 'host') as is_host_owned
            from waste
            group by all
        )
        select * exclude (job_host)
        from jobs
        order by waste_usd desc, waste_gpu_hours desc, team, "user" nulls last, job_id, job_host
        limit $top
        """,
        {**_week_days(week), "top": top},
    )


def waste_by_user_and_job(con: duckdb.DuckDBPyConnection, week: str) -> pl.DataFrame:
    """Per team, user and job: the waste of the week, as team_weekly counts it (see
    WEEK_WASTE)."""
    return read(
        con,
        WEEK_WASTE
        + """
        select
            team,
            "user",
            job_id,
            count(*) as episodes,
            count(distinct gpu_uuid) as gpus,
            sum(week_seconds) / 3600 as waste_gpu_hours,
            sum(week_waste_usd) as waste_usd
        from waste
        group by all
        order by team, waste_usd desc, waste_gpu_hours desc, "user" nulls last, job_id
        """,
        _week_days(week),
    )


def team_contacts(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """ref/teams.csv as loaded: each team's lead and who is copied (empty before any)."""
    present = read(
        con,
        "select count(*) as n from information_schema.tables where table_name = 'ref_teams' "
        "and table_schema = 'main' and table_catalog = current_database()",
    )["n"][0]
    if not present:  # a warehouse from before teams.csv
        return pl.DataFrame(
            schema={"team": pl.String, "lead_email": pl.String, "cc": pl.List(pl.String)}
        )
    return read(con, "select team, lead_email, cc from ref_teams order by team")
