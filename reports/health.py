"""The report's "how healthy" and "how well" reads (docs/reports.md#gpus-to-drain,
#how-well): the GPUs to drain, each team's utilization beside its SM and tensor activity,
and the jobs whose GPUs were busy while their SMs were mostly not.

Activity (`sm_active_pct` and the rest) comes from NVML GPM (Hopper and newer) or DCGM's
profiling fields; a fleet without either has no activity, and every figure of it here is
null ("not measured"), never 0. A warehouse built before these columns and views has none
of them: each read is then None, and the report leaves its block out.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from gpufleet.reports.queries import read
from gpufleet.warehouse.base.catalog import has_table
from gpufleet.weeks import week_monday

TOP_JOBS = 10
HIGH_UTIL_PCT = 80.0  # a job this busy (a kernel ran this much of the time) ...
LOW_SM_ACTIVE_PCT = 30.0  # ... whose SMs were active less than this is listed
MIN_ACTIVITY_GPU_HOURS = 1.0  # its GPU-hours with activity, so one-minute jobs cannot fill it

# The site asked for (sites.site_views sets report_cluster; null: every site).
_ONE_SITE = "(getvariable('report_cluster') is null or cluster = getvariable('report_cluster'))"

TO_DRAIN = f"""
select host, gpu_uuid, gpu_name, cluster, drain_reasons, since_day, latest_day,
from gpus_to_drain
where {_ONE_SITE}
order by since_day, cluster nulls first, host, gpu_uuid
"""

# Per team over the week's hours: utilization as team_weekly has it (busy over measured
# seconds), the share of its GPU-seconds whose samples carry activity, and the mean SM and
# tensor activity over those.
HOW_WELL = """
with week_hours as (
    select * from gpu_hourly
    where day >= $monday and day < $next_monday
),

team_sums as (
    select
        team,
        sum(observed_s) as observed_s,
        sum(utilization_s) as utilization_s,
        sum(busy_s) as busy_s,
        sum(activity_s) as activity_s,
        sum(sm_active_s) as sm_active_s,
        sum(tensor_active_s) as tensor_active_s,
    from week_hours
    group by team
),

final as (
    select
        team,
        observed_s / 3600 as gpu_hours,
        100 * busy_s / nullif(utilization_s, 0) as avg_util_pct,
        100 * activity_s / nullif(observed_s, 0) as measured_pct,
        100 * sm_active_s / nullif(activity_s, 0) as sm_active_pct,
        100 * tensor_active_s / nullif(activity_s, 0) as tensor_active_pct,
    from team_sums
)

select * from final
order by gpu_hours desc, team
"""

BUSY_LOW_SM_JOBS = """
select
    job_id, gpu_name, cluster, "user", team, gpus, gpu_hours, avg_util_pct,
    avg_sm_active_pct, avg_tensor_active_pct, activity_gpu_hours,
from job_efficiency
where start_ts < $end
    and (end_ts is null or end_ts > $start)
    and activity_gpu_hours >= $min_activity_gpu_hours
    and avg_util_pct >= $high_util_pct
    and avg_sm_active_pct < $low_sm_active_pct
order by gpu_hours desc, job_id, gpu_name nulls last, cluster nulls last
limit $top
"""

# A job's mean SM activity over all its GPU models and sites' rows of job_efficiency.
JOB_SM_ACTIVITY = """
select
    job_id,
    100 * sum(sm_active_gpu_hours) / nullif(sum(activity_gpu_hours), 0) as sm_active_pct,
from job_efficiency
where job_id is not null
group by job_id
"""


def _has_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    """Whether the warehouse's own `table` (or view) has `column`."""
    rows = con.execute(
        "select count(*) from duckdb_columns() where database_name = current_database()"
        " and schema_name = 'main' and table_name = ? and column_name = ?",
        [table, column],
    ).fetchall()
    return bool(rows[0][0])


def gpus_to_drain(con: duckdb.DuckDBPyConnection) -> pl.DataFrame | None:
    """The GPUs whose latest day has `drain` (the view `gpus_to_drain`: whatever the week, as
    of each GPU's latest day), the longest draining first; None without the view."""
    if not has_table(con, "gpus_to_drain", or_view=True):
        return None
    return read(con, TO_DRAIN)


def how_well(con: duckdb.DuckDBPyConnection, week: str) -> pl.DataFrame | None:
    """Each team's week: utilization, the share of its GPU-hours with activity measured, and
    its mean SM and tensor activity there (null: not measured); None before activity."""
    if not _has_column(con, "gpu_hourly", "tensor_active_s"):
        return None
    monday = week_monday(week)
    return read(con, HOW_WELL, {"monday": monday, "next_monday": monday + dt.timedelta(days=7)})


def busy_low_sm_jobs(
    con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime, *, top: int = TOP_JOBS
) -> pl.DataFrame | None:
    """The jobs that ran in [start, end) at HIGH_UTIL_PCT utilization or more with their SMs
    active less than LOW_SM_ACTIVE_PCT of the time (whole jobs, as the least efficient
    jobs), the most GPU-hours first; None before job_efficiency had activity."""
    if not _has_column(con, "job_efficiency", "avg_sm_active_pct"):
        return None
    params = {
        "start": start,
        "end": end,
        "min_activity_gpu_hours": MIN_ACTIVITY_GPU_HOURS,
        "high_util_pct": HIGH_UTIL_PCT,
        "low_sm_active_pct": LOW_SM_ACTIVE_PCT,
        "top": top,
    }
    return read(con, BUSY_LOW_SM_JOBS, params)


def with_job_activity(jobs: pl.DataFrame, con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """`jobs` (rows with a `job_id`) in its order with each job's `sm_active_pct` (null: not
    measured, no job, or a warehouse before activity)."""
    if not _has_column(con, "job_efficiency", "sm_active_gpu_hours"):
        return jobs.with_columns(sm_active_pct=pl.lit(None, dtype=pl.Float64))
    activity = read(con, JOB_SM_ACTIVITY)
    return jobs.join(activity, on="job_id", how="left", maintain_order="left")
