"""How much of a week the warehouse has samples for: the fleet's first and last sample in it
and the days without any, from the hosts' days (`gpufleet.reports.queries.host_days`).

A week is partial when its samples begin more than SLACK after its first midnight, end more
than SLACK before its last, or skip a day: the report then says so in a banner, compares
nothing with the week before, and counts the GPUs a team held on average over the hours
covered, not the week's.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl

SLACK = dt.timedelta(hours=1)  # samples this close to the week's bounds cover it from end to end


def elapsed_hours(start: dt.datetime, end: dt.datetime) -> float:
    """Elapsed hours between aware datetimes (a daylight-saving day has 23 or 25)."""
    return (end.astimezone(dt.UTC) - start.astimezone(dt.UTC)).total_seconds() / 3600


@dataclass(frozen=True, kw_only=True)
class WeekCoverage:
    """The part of the week [start, end) that has samples."""

    start: dt.datetime  # local midnight of the Monday
    end: dt.datetime  # local midnight of the next Monday
    first_ts: dt.datetime | None = None  # the fleet's first sample in the week; None: none
    last_ts: dt.datetime | None = None
    missing_days: tuple[dt.date, ...] = ()  # the week's local days without a sample

    @property
    def has_samples(self) -> bool:
        return self.first_ts is not None

    @property
    def starts_late(self) -> bool:
        return self.first_ts is not None and self.first_ts - self.start > SLACK

    @property
    def ends_early(self) -> bool:
        return self.last_ts is not None and self.end - self.last_ts > SLACK

    @property
    def is_partial(self) -> bool:
        """Samples for only part of the week (a week without any is not partial: it has no
        data, which the report says otherwise)."""
        return self.has_samples and (self.starts_late or self.ends_early or bool(self.missing_days))

    @property
    def covered_from(self) -> dt.datetime:
        return self.first_ts if self.starts_late and self.first_ts else self.start

    @property
    def covered_to(self) -> dt.datetime:
        return self.last_ts if self.ends_early and self.last_ts else self.end

    @property
    def gap_days(self) -> tuple[dt.date, ...]:
        """The days without samples between the first sample's day and the last's."""
        first, last = self.covered_from.date(), self.covered_to.date()
        return tuple(day for day in self.missing_days if first < day < last)

    @property
    def hours(self) -> float:
        """The hours covered: the week's, less the hours before the first sample and after
        the last (when more than SLACK) and the days without samples between them."""
        if not self.has_samples:
            return elapsed_hours(self.start, self.end)
        covered = elapsed_hours(self.covered_from, self.covered_to)
        zone = self.start.tzinfo
        for day in self.gap_days:
            midnight = dt.datetime.combine(day, dt.time(), tzinfo=zone)
            next_midnight = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=zone)
            covered -= elapsed_hours(midnight, next_midnight)
        return covered


def week_coverage(days: pl.DataFrame, start: dt.datetime, end: dt.datetime) -> WeekCoverage:
    """The coverage of [start, end) by the hosts' days of it (`day`, `first_ts`, `last_ts`,
    timestamps in the week's zone)."""
    with_samples = days.filter(pl.col("first_ts").is_not_null())
    if with_samples.is_empty():
        return WeekCoverage(start=start, end=end)
    present = set(with_samples["day"].to_list())
    week_days = (start.date() + dt.timedelta(days=offset) for offset in range(7))
    return WeekCoverage(
        start=start,
        end=end,
        first_ts=with_samples["first_ts"].min(),  # type: ignore[arg-type]
        last_ts=with_samples["last_ts"].max(),  # type: ignore[arg-type]
        missing_days=tuple(day for day in week_days if day not in present),
    )
