"""Read one ISO week's mart rows from the warehouse, read-only, as polars DataFrames.

Everything the report shows comes from here: totals are sums of mart rows, and the one
sample-grain read is the hour-of-day utilization aggregate that no mart holds. The queries
are in `gpufleet.reports.queries`, the records they fill in `gpufleet.reports.records`.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

import duckdb
import polars as pl
import polars.selectors as cs

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.reports import health, jobs, queries
from gpufleet.reports.allocated import alloc_only_week
from gpufleet.reports.carbon import team_co2, with_co2
from gpufleet.reports.coverage import week_coverage
from gpufleet.reports.host_groups import throttled_group
from gpufleet.reports.hosts import host_weeks
from gpufleet.reports.records import FleetTotals, Kpi, WeekData
from gpufleet.reports.sites import site_views, site_weeks
from gpufleet.sites import check_site
from gpufleet.warehouse.publish import connect_read_only
from gpufleet.weeks import previous_week, week_bounds

__all__ = ["MART_TABLES", "FleetTotals", "Kpi", "WeekData", "load_week"]

MART_TABLES = (
    "team_daily",
    "team_weekly",
    "idle_episodes",
    "thermal_events",
    "gpu_daily",
    "host_daily",
    "gpu_hourly",
    "run_pieces",
    "quarantined_files",
)


def local(frame: pl.DataFrame, timezone: str) -> pl.DataFrame:
    """Timestamps shown in the configured zone, as every mart's days are."""
    return frame.with_columns(cs.datetime(time_zone="*").dt.convert_time_zone(timezone))


def _local_or_none(frame: pl.DataFrame | None, timezone: str) -> pl.DataFrame | None:
    return None if frame is None else local(frame, timezone)


def load_week(
    config: Config, week: str, *, now: dt.datetime | None = None, cluster: str | None = None
) -> WeekData:
    """Every row the report of `week` needs, read from the warehouse read-only: of every
    site (each team's figures summed over its sites), or of `cluster` only, on that site's
    clock (its week and times in its zone: docs/sites.md#a-time-zone-per-site)."""
    tz = config.site_timezone(cluster)
    start, end = week_bounds(week, tz)
    before = previous_week(week)
    before_start, before_end = week_bounds(before, tz)
    con = connect_read_only(config, tables=MART_TABLES)
    try:
        if cluster is not None:
            check_site(con, config, cluster)
        site_views(con, cluster)
        quarantined, quarantined_total = queries.quarantined(con)
        host_days = local(queries.host_days(con, start, end), tz)
        coverage = week_coverage(host_days, start, end)
        previous_days = local(queries.host_days(con, before_start, before_end), tz)
        return WeekData(
            week=week,
            previous_week=before,
            timezone=tz,
            start=start,
            end=end,
            generated_at=(now or dt.datetime.now(dt.UTC)).astimezone(zoneinfo.ZoneInfo(tz)),
            totals=queries.fleet_totals(con, week, start, end),
            previous=queries.fleet_totals(con, before, before_start, before_end),
            teams=with_co2(queries.teams(con, week, coverage.hours), team_co2(con, config, week)),
            heatmap=queries.heatmap(con, start, end),
            waste_trend=queries.waste_trend(con, week),
            waste_jobs=local(queries.waste_jobs(con, week, top=queries.TOP_WASTE_JOBS), tz),
            thermal_hours=queries.thermal_hours(con, start, end),
            throttled_gpus=queries.throttled_gpus(con, start, end),
            least_efficient_jobs=_local_or_none(jobs.least_efficient_jobs(con, start, end), tz),
            hosts=host_weeks(host_days, coverage.hours),
            quarantined=local(quarantined, tz),
            quarantined_total=quarantined_total,
            weeks_with_data=queries.weeks_with_data(con),
            sites=site_weeks(con, week),
            cluster=cluster,
            alloc_only=alloc_only_week(con, week, cluster),
            coverage=coverage,
            previous_coverage=week_coverage(previous_days, before_start, before_end),
            throttled_group=throttled_group(queries.throttled_hosts(con, start, end), host_days),
            to_drain=health.gpus_to_drain(con),
            how_well=health.how_well(con, week),
            busy_low_sm_jobs=_local_or_none(health.busy_low_sm_jobs(con, start, end), tz),
        )
    except duckdb.Error as exc:
        raise GpufleetError(
            f"{config.warehouse_path}: cannot read the report's tables: {exc}"
        ) from exc
    finally:
        con.close()
