"""The fleet's time zones (docs/sites.md#a-time-zone-per-site): the configured `timezone`
and each site's own (`[clusters.<site>] timezone`), and which of them ends a day last.

A day or a week is over for the whole fleet only once it is over at every site: in the zone
that ends it last, the westernmost (the smallest offset from UTC). Sunday in Los Angeles
ends at 09:00 on Monday in Berlin, so a fleet with sites in both has its week over at
Monday 00:00 in Los Angeles, not in Berlin.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Sequence

from gpufleet.config import Config
from gpufleet.weeks import last_complete_week


def fleet_zones(config: Config) -> tuple[str, ...]:
    """The configured zone, then each site's that differs, each once, in site order."""
    return tuple(dict.fromkeys((config.timezone, *(zone for _, zone in config.sites))))


def latest_zone(zones: Sequence[str], now: dt.datetime | None = None) -> str:
    """The zone of `zones` whose day ends last at `now`: the smallest offset from UTC then
    (the first of them on a tie)."""
    moment = now or dt.datetime.now(dt.UTC)

    def offset(zone: str) -> dt.timedelta:
        return moment.astimezone(zoneinfo.ZoneInfo(zone)).utcoffset() or dt.timedelta()

    return min(zones, key=offset)


def last_complete_day(zones: Sequence[str], now: dt.datetime | None = None) -> dt.date:
    """The last local day that has ended in every zone of `zones`."""
    moment = now or dt.datetime.now(dt.UTC)
    return min(moment.astimezone(zoneinfo.ZoneInfo(zone)).date() for zone in zones) - dt.timedelta(
        days=1
    )


def last_complete_fleet_week(config: Config, now: dt.datetime | None = None) -> str:
    """The last ISO week that has ended at every site (and in the configured zone)."""
    return min(last_complete_week(zone, now) for zone in fleet_zones(config))
