"""ISO weeks in a configured time zone."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo

from gpufleet.errors import GpufleetError

_LABEL = re.compile(r"(\d{4})-W(\d{2})")


def week_label(day: dt.date) -> str:
    """`YYYY-Www` of a date."""
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def week_monday(label: str) -> dt.date:
    """The Monday of an ISO week `YYYY-Www`; a ValueError that quotes `label` if it is none
    (not of that form, or a week its year does not have, like 2026-W54)."""
    match = _LABEL.fullmatch(label)
    try:
        if match is None:
            raise ValueError(label)
        return dt.date.fromisocalendar(int(match[1]), int(match[2]), 1)
    except ValueError:
        raise ValueError(f"'{label}' is not an ISO week like 2026-W47") from None


def check_week(label: str) -> str:
    """`label` if it is an ISO week like 2026-W47, else a GpufleetError saying so."""
    try:
        week_monday(label)
    except ValueError as exc:
        raise GpufleetError(str(exc)) from None
    return label


def last_complete_week(timezone: str, now: dt.datetime | None = None) -> str:
    """The last ISO week that has fully ended in `timezone`."""
    moment = now or dt.datetime.now(dt.UTC)
    today = moment.astimezone(zoneinfo.ZoneInfo(timezone)).date()
    this_monday = today - dt.timedelta(days=today.weekday())
    return week_label(this_monday - dt.timedelta(days=7))


def week_bounds(label: str, timezone: str) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of an ISO week as aware datetimes: local midnights of Monday and next Monday."""
    tz = zoneinfo.ZoneInfo(timezone)
    monday = week_monday(label)
    start = dt.datetime.combine(monday, dt.time(), tzinfo=tz)
    end = dt.datetime.combine(monday + dt.timedelta(days=7), dt.time(), tzinfo=tz)
    return start, end


def previous_week(label: str) -> str:
    return week_label(week_monday(label) - dt.timedelta(days=7))
