"""What to simulate: `SimulationSpec`, the fleet, the span and the collectors' settings.

Checked at once with a clear `ValueError`; `from_cli` turns `gpufleet simulate`'s options
(whole local days from a date or an ISO week) into a spec.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.weeks import last_complete_week, week_monday


@dataclass(frozen=True, kw_only=True)
class SimulationSpec:
    """What to simulate: the fleet, the span [start, end) and the collectors' settings."""

    gpus: int = 128
    gpus_per_host: int = 8  # the last host gets the remainder
    start: dt.datetime  # aware; the first sample's ts is at or after it
    end: dt.datetime  # aware, exclusive
    interval_s: float = 10.0
    flush_s: float = 600.0
    seed: int = 7
    timezone: str = "UTC"  # zone of the allocation timestamps and the daily cycles
    mig: bool = False  # split some H100 GPUs into MIG devices (`mig`)

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {self.gpus}")
        if not 1 <= self.gpus_per_host <= 64:
            raise ValueError(f"gpus_per_host must be between 1 and 64, got {self.gpus_per_host}")
        for name, moment in (("start", self.start), ("end", self.end)):
            if moment.tzinfo is None or moment.utcoffset() is None:
                raise ValueError(f"{name} must be a timezone-aware datetime, got {moment}")
        if self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be after start ({self.start})")
        if self.interval_s < 0.1:
            raise ValueError(f"interval_s must be at least 0.1 s, got {self.interval_s}")
        if round(self.interval_s * 1_000_000) % 1000:
            raise ValueError(f"interval_s must be a whole number of ms, got {self.interval_s}")
        if self.flush_s < 1:
            raise ValueError(f"flush_s must be at least 1 s, got {self.flush_s}")
        if self.interval_s > self.flush_s:
            raise ValueError(
                f"interval_s ({self.interval_s} s) must not exceed flush_s ({self.flush_s} s)"
            )
        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone '{self.timezone}'") from exc

    @classmethod
    def from_cli(
        cls,
        *,
        config: Config,
        gpus: int,
        gpus_per_host: int,
        week: str | None,
        start: dt.date | None,
        days: int,
        interval_s: float,
        flush_s: float,
        seed: int,
        mig: bool = False,
    ) -> SimulationSpec:
        """The spec for `gpufleet simulate`: whole local days from `start`, else the Monday of
        `week`, else of the last complete week in the configured time zone."""
        tz = zoneinfo.ZoneInfo(config.timezone)
        first = start or week_monday(week or last_complete_week(config.timezone))
        try:
            return cls(
                gpus=gpus,
                gpus_per_host=gpus_per_host,
                start=dt.datetime.combine(first, dt.time(), tzinfo=tz),
                end=dt.datetime.combine(first + dt.timedelta(days=days), dt.time(), tzinfo=tz),
                interval_s=interval_s,
                flush_s=flush_s,
                seed=seed,
                timezone=config.timezone,
                mig=mig,
            )
        except ValueError as exc:
            raise GpufleetError(f"simulate: {exc}") from exc

    @property
    def hosts(self) -> int:
        return -(-self.gpus // self.gpus_per_host)

    @property
    def interval_us(self) -> int:
        return round(self.interval_s * 1_000_000)

    @property
    def flush_us(self) -> int:
        return round(self.flush_s * 1_000_000)

    @property
    def start_s(self) -> int:
        """The span's start in epoch seconds (rounded down)."""
        return int(self.start.timestamp() // 1)

    @property
    def end_s(self) -> int:
        return int(-(-self.end.timestamp() // 1))
