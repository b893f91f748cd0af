"""The simulated span in epoch seconds, and the collectors' tick grid.

The scenario is drawn for a span [start, end); what runs at its start began up to two days
before (the horizon), and what runs at its end goes on unchanged after it.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass

HOUR_S = 3600
DAY_S = 86400


@dataclass(frozen=True, kw_only=True)
class Span:
    start_s: int
    end_s: int  # exclusive
    interval_us: int  # the collectors' sampling interval
    timezone: str  # of the allocation timestamps and the daily cycles

    @property
    def horizon_s(self) -> int:
        """Where the story begins: jobs already running at the start were started after it."""
        return self.start_s - 2 * DAY_S

    @property
    def length_s(self) -> int:
        return self.end_s - self.start_s

    @property
    def tz(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.timezone)


def first_tick(t_s: int, phase_us: int, interval_us: int) -> int:
    """The first tick whose timestamp (tick * interval + phase, in us) is at or after t_s."""
    return -((phase_us - t_s * 1_000_000) // interval_us)
