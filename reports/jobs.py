"""The report's "Least efficient jobs": the week's jobs from `job_efficiency`, costliest first.

`job_efficiency` has one row per job and GPU model over the whole job, not per week. A job
belongs to a week when it ran in it: it started before the week's end and had not ended by
the week's start (a job still running counts in every week from its start). Its figures are
those of the whole job. Jobs with fewer than MIN_GPU_HOURS observed GPU-hours are left out,
so a flood of one-minute jobs cannot fill the table.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from gpufleet.reports.queries import read
from gpufleet.warehouse.base.catalog import has_table

TOP_JOBS = 10
MIN_GPU_HOURS = 1.0  # a job's observed GPU-hours (of one GPU model) to be listed
TABLE = "job_efficiency"

LEAST_EFFICIENT_JOBS = """
select
    job_id, gpu_name, cluster, "user", team, account, "partition", state, start_ts, end_ts,
    gpus, gpu_hours, avg_util_pct, idle_gpu_hours, waste_gpu_hours, waste_usd,
    max_mem_used_bytes, mem_total_bytes
from job_efficiency
where start_ts < $end
    and (end_ts is null or end_ts > $start)
    and gpu_hours >= $min_gpu_hours
order by
    waste_usd desc nulls last, idle_gpu_hours desc nulls last, job_id, gpu_name nulls last,
    cluster nulls last
limit $top
"""


def least_efficient_jobs(
    con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime, *, top: int = TOP_JOBS
) -> pl.DataFrame | None:
    """The `top` jobs that ran in [start, end) with at least MIN_GPU_HOURS GPU-hours, by
    waste cost, then idle GPU-hours; None when the warehouse has no `job_efficiency`."""
    if not has_table(con, TABLE, or_view=True):  # a warehouse built before it
        return None
    return read(
        con,
        LEAST_EFFICIENT_JOBS,
        {"start": start, "end": end, "min_gpu_hours": MIN_GPU_HOURS, "top": top},
    )
