"""The deployments' schedules (docs/sites.md#a-time-zone-per-site, docs/operations.md).

- The importers': every 15 minutes, three minutes before each run of the ingest-and-build
  cycle, so that the cycle loads what they wrote.
- The weekly report's: Monday 07:00 in the zone of the site whose week ends last (the
  westernmost), so that the week it reports is over at every site; with one zone, 07:00 in
  the configured `timezone`.
- The idle notices': 08:00 every day in each zone of the fleet, the notices of the sites in
  that zone (their yesterday), so that each site's users hear of their day the next morning
  there, once the day is over there; with one zone, one run at 08:00 in it.
"""

from __future__ import annotations

import datetime as dt

from prefect.deployments.runner import RunnerDeployment
from prefect.schedules import Cron, Interval, Schedule

from gpufleet.config import Config
from gpufleet.site_zones import fleet_zones, latest_zone

IMPORT_EVERY = dt.timedelta(minutes=15)
IMPORT_AHEAD = dt.timedelta(minutes=3)  # before each ingest-and-build run
REPORT_CRON = "0 7 * * 1"  # Monday 07:00
NOTICES_CRON = "0 8 * * *"  # every day 08:00


def report_zone(config: Config, now: dt.datetime | None = None) -> str:
    """The zone of the weekly report's Monday 07:00: of the fleet's zones, the one whose week
    ends last (as `serve` starts: its offset from UTC then)."""
    return latest_zone(fleet_zones(config), now)


def report_schedule(config: Config, now: dt.datetime | None = None) -> Schedule:
    """Monday 07:00 where the week ends last, so that it is over at every site."""
    return Cron(REPORT_CRON, timezone=report_zone(config, now))


def notice_zones(config: Config) -> tuple[str | None, ...]:
    """The zones the idle notices run for, one run each: None (every site) for a fleet in
    one zone, else each zone of the fleet (the configured one first)."""
    zones = fleet_zones(config)
    return (None,) if len(zones) == 1 else zones


def notices_schedule(config: Config, zone: str | None) -> Schedule:
    """08:00 every day in `zone` (None: the configured one)."""
    return Cron(NOTICES_CRON, timezone=zone or config.timezone)


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
