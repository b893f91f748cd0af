"""The records of a job's page: its GPUs hour by hour, its idle stretches and the page
itself, with the figures they add up to and their JSON; `str(page)` is its text
(`gpufleet.job_page.text`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from gpufleet.console import printable


@dataclass(frozen=True, kw_only=True)
class GpuHour:
    """One GPU's local hour of the job (`day`, `hour` as gpu_hourly keys them)."""

    day: dt.date
    hour: int
    gpu_hours: float
    measured_gpu_hours: float  # hours of samples with a utilization
    busy_gpu_hours: float
    idle_gpu_hours: float
    max_mem_used_bytes: int | None
    activity_gpu_hours: float  # hours of samples with an SM activity (0: not measured)
    sm_active_gpu_hours: float

    @property
    def avg_util_pct(self) -> float | None:
        return pct(self.busy_gpu_hours, self.measured_gpu_hours)

    @property
    def avg_sm_active_pct(self) -> float | None:
        return pct(self.sm_active_gpu_hours, self.activity_gpu_hours)

    def to_json(self) -> dict[str, Any]:
        return {
            "day": self.day.isoformat(),
            "hour": self.hour,
            "gpu_hours": self.gpu_hours,
            "avg_util_pct": self.avg_util_pct,
            "avg_sm_active_pct": self.avg_sm_active_pct,
            "idle_gpu_hours": self.idle_gpu_hours,
            "max_mem_used_bytes": self.max_mem_used_bytes,
        }


@dataclass(frozen=True, kw_only=True)
class JobGpu:
    """One GPU the job's samples were on, with its hours in time order."""

    host: str
    gpu_index: int | None
    gpu_uuid: str
    gpu_name: str | None
    mem_total_bytes: int | None
    first_ts: dt.datetime
    last_ts: dt.datetime
    hours: tuple[GpuHour, ...]

    @property
    def gpu_hours(self) -> float:
        return sum(hour.gpu_hours for hour in self.hours)

    @property
    def idle_gpu_hours(self) -> float:
        return sum(hour.idle_gpu_hours for hour in self.hours)

    @property
    def avg_util_pct(self) -> float | None:
        return pct(
            sum(hour.busy_gpu_hours for hour in self.hours),
            sum(hour.measured_gpu_hours for hour in self.hours),
        )

    @property
    def avg_sm_active_pct(self) -> float | None:
        return pct(
            sum(hour.sm_active_gpu_hours for hour in self.hours),
            sum(hour.activity_gpu_hours for hour in self.hours),
        )

    @property
    def max_mem_used_bytes(self) -> int | None:
        return max_present(hour.max_mem_used_bytes for hour in self.hours)

    @property
    def name(self) -> str:
        return gpu_label(self.host, self.gpu_index)

    def to_json(self, zone: ZoneInfo) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu_index": self.gpu_index,
            "gpu_uuid": self.gpu_uuid,
            "gpu_name": self.gpu_name,
            "first_ts": iso_in(self.first_ts, zone),
            "last_ts": iso_in(self.last_ts, zone),
            "gpu_hours": self.gpu_hours,
            "avg_util_pct": self.avg_util_pct,
            "avg_sm_active_pct": self.avg_sm_active_pct,
            "idle_gpu_hours": self.idle_gpu_hours,
            "max_mem_used_bytes": self.max_mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "hours": [hour.to_json() for hour in self.hours],
        }


@dataclass(frozen=True, kw_only=True)
class IdleStretch:
    """The job's part of one idle episode of one GPU: from the start of its first idle
    sample to its last one; waste when the episode is."""

    host: str
    gpu_index: int | None
    gpu_uuid: str
    start_ts: dt.datetime
    end_ts: dt.datetime
    idle_seconds: float
    is_waste: bool
    waste_usd: float  # the stretch's share of its episode's cost (0 unless waste)

    def to_json(self, zone: ZoneInfo) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu_index": self.gpu_index,
            "gpu_uuid": self.gpu_uuid,
            "start_ts": iso_in(self.start_ts, zone),
            "end_ts": iso_in(self.end_ts, zone),
            "idle_seconds": self.idle_seconds,
            "is_waste": self.is_waste,
            "waste_usd": self.waste_usd,
        }


@dataclass(frozen=True, kw_only=True)
class JobPage:
    """One job at its site: job_efficiency's figures over its GPU models, its GPUs hour by
    hour, and its idle stretches."""

    job_id: str
    cluster: str | None
    timezone: str  # of the site's local days and hours
    user: str | None
    team: str | None
    account: str | None
    partition: str | None
    state: str | None
    start_ts: dt.datetime | None
    end_ts: dt.datetime | None  # None: still running
    gpu_models: tuple[str, ...]
    gpus_allocated: int
    alloc_gpu_hours: float | None
    gpu_hours: float
    busy_gpu_hours: float
    idle_gpu_hours: float
    waste_gpu_hours: float
    waste_usd: float
    max_mem_used_bytes: int | None
    mem_total_bytes: int | None
    energy_kwh: float | None
    avg_sm_active_pct: float | None  # None: not measured
    idle_threshold_pct: float
    waste_min_minutes: float
    gpus: tuple[JobGpu, ...]
    idle_stretches: tuple[IdleStretch, ...]

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def measured_gpu_hours(self) -> float:
        return sum(hour.measured_gpu_hours for gpu in self.gpus for hour in gpu.hours)

    @property
    def avg_util_pct(self) -> float | None:
        return pct(self.busy_gpu_hours, self.measured_gpu_hours)

    def to_json(self) -> dict[str, Any]:
        zone = self.zone
        return {
            "job_id": self.job_id,
            "cluster": self.cluster,
            "timezone": self.timezone,
            "user": self.user,
            "team": self.team,
            "account": self.account,
            "partition": self.partition,
            "state": self.state,
            "start_ts": iso_in(self.start_ts, zone),
            "end_ts": iso_in(self.end_ts, zone),
            "gpu_models": list(self.gpu_models),
            "gpus": self.gpus_allocated,
            "alloc_gpu_hours": self.alloc_gpu_hours,
            "gpu_hours": self.gpu_hours,
            "busy_gpu_hours": self.busy_gpu_hours,
            "measured_gpu_hours": self.measured_gpu_hours,
            "avg_util_pct": self.avg_util_pct,
            "avg_sm_active_pct": self.avg_sm_active_pct,
            "idle_gpu_hours": self.idle_gpu_hours,
            "waste_gpu_hours": self.waste_gpu_hours,
            "waste_usd": self.waste_usd,
            "max_mem_used_bytes": self.max_mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "energy_kwh": self.energy_kwh,
            "idle_threshold_pct": self.idle_threshold_pct,
            "waste_min_minutes": self.waste_min_minutes,
            "gpu_list": [gpu.to_json(zone) for gpu in self.gpus],
            "idle_stretches": [stretch.to_json(zone) for stretch in self.idle_stretches],
        }

    def __str__(self) -> str:
        from gpufleet.job_page.text import page_lines  # which reads these records

        return "\n".join(page_lines(self))


def pct(part: float, whole: float) -> float | None:
    """100 x part / whole; None when there is no whole."""
    return 100 * part / whole if whole > 0 else None


def max_present(values: Any) -> Any:
    """The largest of the values that are not None (None: there is none)."""
    present = [value for value in values if value is not None]
    return max(present) if present else None


def gpu_label(host: str, gpu_index: int | None) -> str:
    """`host GPU index`, printable."""
    return f"{printable(host)} GPU {'?' if gpu_index is None else gpu_index}"


def iso_in(value: dt.datetime | None, zone: ZoneInfo) -> str | None:
    """`value` in ISO 8601 at `zone`'s offset."""
    return None if value is None else value.astimezone(zone).isoformat()
