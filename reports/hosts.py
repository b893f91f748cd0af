"""Each host's week from its days (`gpufleet.reports.queries.host_days`), with the problems a reader
should look at. A host is a host of a site: two sites' `node01`s are two hosts, shown as
`node01@siteA` and `node01@siteB`; a host without a site by its name alone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import polars as pl

SILENT_AFTER = dt.timedelta(hours=1)  # a host whose last sample is older than this went silent
GAP_COVERAGE_PCT = 99.0  # a host-day observed for less of its span than this has gaps


def _problems(host: Mapping[str, Any]) -> list[str]:
    """What is wrong with a host's week, in words (Python formats the percentage: polars
    has no `.1f`, and its rounding of a tie differs)."""
    problems: list[str] = []
    if host["is_silent_at_end"]:
        problems.append("silent at the end of the week")
    if host["has_late_start"]:
        problems.append("no data at the start of the week")
    missing = host["days_without_data"]
    if missing > 0:
        problems.append(f"{missing} day{'s' if missing > 1 else ''} without data")
    gaps = host["gap_days"]
    if gaps > 0:
        problems.append(
            f"gaps on {gaps} day{'s' if gaps > 1 else ''} (lowest: {host['coverage_pct']:.1f}%"
            f" observed on {host['lowest_coverage_day']:%a %d %b})"
        )
    return problems


def host_label(host: pl.Expr, cluster: pl.Expr) -> pl.Expr:
    """`host@cluster`, or the host's name alone where it has no site (null `cluster`)."""
    return pl.coalesce(pl.concat_str(host, pl.lit("@"), cluster), host)


def _week_coverage(hours_observed: float, gpus: int, covered_hours: float) -> float | None:
    """A host's observed GPU-hours over its GPUs x the hours of the week with samples."""
    if not gpus or covered_hours <= 0:
        return None
    return min(100.0, 100 * hours_observed / (gpus * covered_hours))


def host_weeks(days: pl.DataFrame, covered_hours: float) -> pl.DataFrame:
    """One row per host of a site (`cluster`): its GPUs, days reporting, first and last
    sample, its lowest daily coverage (`coverage_pct`, over each day's span from its first
    sample to its last), its `week_coverage_pct` (its observed GPU-hours over its GPUs x the
    `covered_hours` of the fleet's week: a host that reported for one hour of a full week
    has 0.6%) and its `problems`, `host` its label (`host_label`); the hosts with problems
    first, the worst covered over the week first."""
    days = days.with_columns(
        fleet_days=pl.col("day").n_unique(),
        fleet_first_ts=pl.col("first_ts").min(),
        fleet_last_ts=pl.col("last_ts").max(),
    )
    lowest = pl.col("coverage_pct") == pl.col("coverage_pct").min()
    hosts = days.group_by("cluster", "host", maintain_order=True).agg(
        gpus=pl.col("gpus").fill_null(0).max(),
        days_reporting=pl.len(),
        samples=pl.col("samples").fill_null(0).sum(),
        hours_observed=pl.col("hours_observed").fill_null(0.0).sum(),
        first_ts=pl.col("first_ts").min(),
        last_ts=pl.col("last_ts").max(),
        coverage_pct=pl.col("coverage_pct").min(),
        lowest_coverage_day=pl.col("day").filter(lowest).first(),
        gap_days=(pl.col("coverage_pct") < GAP_COVERAGE_PCT).sum(),
        days_without_data=pl.col("fleet_days").first().cast(pl.Int64) - pl.len(),
        is_silent_at_end=pl.col("fleet_last_ts").first() - pl.col("last_ts").max() > SILENT_AFTER,
        has_late_start=pl.col("first_ts").min() - pl.col("fleet_first_ts").first() > SILENT_AFTER,
    )
    problems = [_problems(host) for host in hosts.iter_rows(named=True)]
    week_coverage = [
        _week_coverage(hours, gpus, covered_hours)
        for hours, gpus in hosts.select("hours_observed", "gpus").iter_rows()
    ]
    return hosts.with_columns(
        pl.Series("problems", problems, dtype=pl.List(pl.String)),
        pl.Series("week_coverage_pct", week_coverage, dtype=pl.Float64),
        host=host_label(pl.col("host"), pl.col("cluster")),
    ).sort(pl.col("problems").list.len() == 0, pl.col("week_coverage_pct").fill_null(0.0), "host")
