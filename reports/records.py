"""The week a report shows: the fleet's totals, the headline numbers and the mart rows.

Every table-like field of `WeekData` is a polars DataFrame as `gpufleet.reports.queries` read it,
with its timestamps in the configured zone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import polars as pl

from gpufleet.reports.allocated import AllocOnly
from gpufleet.reports.coverage import WeekCoverage, elapsed_hours
from gpufleet.reports.host_groups import HostGroup


def _float(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _pct(part: float, whole: float) -> float | None:
    return 100 * part / whole if whole > 0 else None


@dataclass(frozen=True, kw_only=True)
class FleetTotals:
    """The fleet's week in numbers (None where the week has no data to measure)."""

    gpus_seen: int = 0
    gpu_hours: float = 0.0
    avg_util_pct: float | None = None
    idle_gpu_hours: float = 0.0
    waste_gpu_hours: float = 0.0
    waste_usd: float = 0.0
    energy_kwh: float = 0.0
    thermal_events: int = 0
    throttled_minutes: float = 0.0
    coverage_pct: float | None = None  # observed GPU-hours / (GPUs seen x hours in the week)
    # GPU-hours of `(unallocated)` GPUs and their cost: capacity no team held, no team's waste
    idle_capacity_gpu_hours: float = 0.0
    idle_capacity_usd: float = 0.0

    @classmethod
    def from_sums(cls, sums: Mapping[str, Any], *, week_hours: float) -> FleetTotals:
        """The totals from the marts' sums (`gpufleet.reports.queries.FLEET_SUMS`) over a week of
        `week_hours` hours (167 or 169 across a daylight-saving change)."""
        gpus_seen = int(sums.get("gpus_seen") or 0)
        return cls(
            gpus_seen=gpus_seen,
            gpu_hours=_float(sums.get("gpu_hours")),
            avg_util_pct=_pct(
                _float(sums.get("busy_gpu_hours")), _float(sums.get("measured_gpu_hours"))
            ),
            idle_gpu_hours=_float(sums.get("idle_gpu_hours")),
            waste_gpu_hours=_float(sums.get("waste_gpu_hours")),
            waste_usd=_float(sums.get("waste_usd")),
            energy_kwh=_float(sums.get("energy_kwh")),
            thermal_events=int(sums.get("thermal_events") or 0),
            throttled_minutes=_float(sums.get("throttled_minutes")),
            coverage_pct=_pct(_float(sums.get("observed_gpu_hours")), gpus_seen * week_hours),
            idle_capacity_gpu_hours=_float(sums.get("idle_capacity_gpu_hours")),
            idle_capacity_usd=_float(sums.get("idle_capacity_usd")),
        )


@dataclass(frozen=True, kw_only=True)
class Kpi:
    """One headline number with last week's value, for display with its change."""

    key: str
    label: str
    kind: str  # how to format: count, hours, pct, usd, kwh, minutes
    value: float | None
    previous: float | None
    lower_is_better: bool | None  # None: the change is neither good nor bad


class KpiSpec(NamedTuple):
    key: str  # a field of FleetTotals
    label: str
    kind: str
    lower_is_better: bool | None


KPIS = (
    KpiSpec("gpus_seen", "GPUs seen", "count", None),
    KpiSpec("gpu_hours", "GPU-hours", "hours", None),
    KpiSpec("avg_util_pct", "Mean utilization", "pct", False),
    KpiSpec("idle_gpu_hours", "Idle GPU-hours", "hours", True),
    KpiSpec("waste_gpu_hours", "Waste GPU-hours", "hours", True),
    KpiSpec("waste_usd", "Idle waste", "usd", True),
    KpiSpec("idle_capacity_gpu_hours", "Unallocated GPU-hours", "hours", True),
    KpiSpec("idle_capacity_usd", "Idle capacity", "usd", True),
    KpiSpec("energy_kwh", "Energy", "kwh", None),
    KpiSpec("thermal_events", "Thermal events", "count", True),
    KpiSpec("throttled_minutes", "Throttled minutes", "minutes", True),
    KpiSpec("coverage_pct", "Data coverage", "pct", False),
)


@dataclass(frozen=True, kw_only=True)
class WeekData:
    week: str
    previous_week: str
    timezone: str
    start: dt.datetime  # local midnight of the Monday
    end: dt.datetime  # local midnight of the next Monday
    generated_at: dt.datetime
    totals: FleetTotals
    previous: FleetTotals
    teams: pl.DataFrame
    heatmap: pl.DataFrame
    waste_trend: pl.DataFrame
    waste_jobs: pl.DataFrame  # the week's largest waste, per job (queries.waste_jobs)
    thermal_hours: pl.DataFrame  # throttled minutes per host and hour (queries.thermal_hours)
    throttled_gpus: pl.DataFrame
    hosts: pl.DataFrame
    quarantined: pl.DataFrame
    quarantined_total: int = 0
    # the week's least efficient jobs (gpufleet.reports.jobs); None: no job_efficiency table
    least_efficient_jobs: pl.DataFrame | None = None
    weeks_with_data: list[str] = field(default_factory=list)
    # each site's week (gpufleet.reports.sites.site_weeks); None or empty: one site only
    sites: pl.DataFrame | None = None
    cluster: str | None = None  # the one site the report is of (`report --cluster`); None: all
    alloc_only: AllocOnly | None = None  # nodes allocated by Slurm without a collector
    coverage: WeekCoverage | None = None  # the part of the week with samples; None: all of it
    previous_coverage: WeekCoverage | None = None
    throttled_group: HostGroup | None = None  # the host or rack with most throttled GPUs
    # gpufleet.reports.health; None: a warehouse built before activity and health
    to_drain: pl.DataFrame | None = None  # the GPUs to drain, as of each one's latest day
    how_well: pl.DataFrame | None = None  # per team: utilization, SM and tensor activity
    busy_low_sm_jobs: pl.DataFrame | None = None  # jobs busy with their SMs mostly idle

    @property
    def has_data(self) -> bool:
        return self.totals.gpu_hours > 0 or self.totals.gpus_seen > 0

    @property
    def last_day(self) -> dt.date:
        return (self.end - dt.timedelta(days=1)).date()

    @property
    def hosts_with_problems(self) -> pl.DataFrame:
        return self.hosts.filter(pl.col("problems").list.len() > 0)

    @property
    def previous_has_data(self) -> bool:
        return self.previous.gpu_hours > 0 or self.previous.gpus_seen > 0

    @property
    def is_partial(self) -> bool:
        """This week has samples for only part of it."""
        return self.coverage is not None and self.coverage.is_partial

    @property
    def previous_is_partial(self) -> bool:
        return self.previous_coverage is not None and self.previous_coverage.is_partial

    @property
    def is_compared(self) -> bool:
        """Whether changes against last week mean anything: both weeks have data, in full."""
        return self.previous_has_data and not self.is_partial and not self.previous_is_partial

    @property
    def not_compared(self) -> str:
        """Why no change against last week is shown ("" when changes are shown)."""
        if self.is_compared:
            return ""
        if not self.previous_has_data:
            return f"no data for {self.previous_week}"
        return "not compared: partial week"

    @property
    def covered_hours(self) -> float:
        """The hours of the week that have samples (all of them when it is complete)."""
        if self.coverage is None:
            return elapsed_hours(self.start, self.end)
        return self.coverage.hours

    @property
    def kpis(self) -> list[Kpi]:
        """The headline numbers; last week's are None when that week has no data at all, or
        when either week is partial (a change against part of a week says nothing)."""
        return [
            Kpi(
                key=spec.key,
                label=spec.label,
                kind=spec.kind,
                value=getattr(self.totals, spec.key),
                previous=getattr(self.previous, spec.key) if self.is_compared else None,
                lower_is_better=spec.lower_is_better,
            )
            for spec in KPIS
        ]
