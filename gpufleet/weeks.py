"""ISO weeks in a configured time zone."""

from __future__ import annotations

import datetime as dt
import zoneinfo


def week_label(day: dt.date) -> str:
    """`YYYY-Www` of a date."""
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def week_monday(label: str) -> dt.date:
    """The Monday of an ISO week `YYYY-Www`."""
    year, week = label.split("-W")
    return dt.date.fromisocalendar(int(year), int(week), 1)


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
