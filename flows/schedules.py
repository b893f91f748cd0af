"""Schedules shared by the importers' deployments: every 15 minutes, three minutes before
each run of the ingest-and-build cycle, so that the cycle loads what they wrote."""

from __future__ import annotations

import datetime as dt

from prefect.deployments.runner import RunnerDeployment
from prefect.schedules import Interval, Schedule

IMPORT_EVERY = dt.timedelta(minutes=15)
IMPORT_AHEAD = dt.timedelta(minutes=3)  # before each ingest-and-build run


def import_schedule(before: object, *, timezone: str) -> Schedule:
    """Every `IMPORT_EVERY`, `IMPORT_AHEAD` before each run of `before` (the ingest-and-build
    deployment, whose interval schedule it shares the anchor of)."""
    assert isinstance(before, RunnerDeployment)
    anchor = None
    for schedule in before.schedules or []:
        anchor = getattr(schedule.schedule, "anchor_date", None) or anchor
    return Interval(
        IMPORT_EVERY,
        anchor_date=(anchor or dt.datetime.now(dt.UTC)) - IMPORT_AHEAD,
        timezone=timezone,
    )
