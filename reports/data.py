"""Read one ISO week's mart rows from the warehouse, read-only, with parameterized queries.

Everything the report shows comes from here: totals are sums of mart rows, and the one
sample-grain read is the hour-of-day utilization aggregate that no mart holds.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.weeks import previous_week, week_bounds, week_monday

Row = dict[str, Any]

MART_TABLES = (
    "team_daily",
    "team_weekly",
    "idle_episodes",
    "thermal_events",
    "gpu_daily",
    "host_daily",
    "gpu_hourly",
    "quarantined_files",
)

TREND_WEEKS = 8  # weeks of waste trend, this one included
TOP_EPISODES = 15
TOP_GPUS = 10
MAX_THERMAL_EVENTS = 3000  # the timeline's cap; the counts cover every event
SILENT_AFTER = dt.timedelta(hours=1)  # a host whose last sample is older than this went silent
GAP_COVERAGE_PCT = 99.0  # a host-day observed for less of its span than this has gaps


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


@dataclass(frozen=True, kw_only=True)
class Kpi:
    """One headline number with last week's value, for display with its change."""

    key: str
    label: str
    kind: str  # how to format: count, hours, pct, usd, kwh, minutes
    value: float | None
    previous: float | None
    lower_is_better: bool | None  # None: the change is neither good nor bad


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
    teams: list[Row] = field(default_factory=list)
    heatmap: list[Row] = field(default_factory=list)
    waste_trend: list[Row] = field(default_factory=list)
    episodes: list[Row] = field(default_factory=list)
    thermal_events: list[Row] = field(default_factory=list)
    hottest_gpus: list[Row] = field(default_factory=list)
    hosts: list[Row] = field(default_factory=list)
    quarantined: list[Row] = field(default_factory=list)
    quarantined_total: int = 0
    weeks_with_data: list[str] = field(default_factory=list)

    @property
    def has_data(self) -> bool:
        return self.totals.gpu_hours > 0 or self.totals.gpus_seen > 0

    @property
    def last_day(self) -> dt.date:
        return (self.end - dt.timedelta(days=1)).date()

    @property
    def hosts_with_problems(self) -> list[Row]:
        return [host for host in self.hosts if host["problems"]]

    @property
    def previous_has_data(self) -> bool:
        return self.previous.gpu_hours > 0 or self.previous.gpus_seen > 0

    @property
    def kpis(self) -> list[Kpi]:
        """The headline numbers; last week's are None when that week has no data at all."""
        now, before = self.totals, self.previous

        def last(value: float | None) -> float | None:
            return value if self.previous_has_data else None

        return [
            Kpi(
                key="gpus_seen",
                label="GPUs seen",
                kind="count",
                value=now.gpus_seen,
                previous=last(before.gpus_seen),
                lower_is_better=None,
            ),
            Kpi(
                key="gpu_hours",
                label="GPU-hours",
                kind="hours",
                value=now.gpu_hours,
                previous=last(before.gpu_hours),
                lower_is_better=None,
            ),
            Kpi(
                key="avg_util_pct",
                label="Mean utilization",
                kind="pct",
                value=now.avg_util_pct,
                previous=last(before.avg_util_pct),
                lower_is_better=False,
            ),
            Kpi(
                key="idle_gpu_hours",
                label="Idle GPU-hours",
                kind="hours",
                value=now.idle_gpu_hours,
                previous=last(before.idle_gpu_hours),
                lower_is_better=True,
            ),
            Kpi(
                key="waste_gpu_hours",
                label="Waste GPU-hours",
                kind="hours",
                value=now.waste_gpu_hours,
                previous=last(before.waste_gpu_hours),
                lower_is_better=True,
            ),
            Kpi(
                key="waste_usd",
                label="Idle waste",
                kind="usd",
                value=now.waste_usd,
                previous=last(before.waste_usd),
                lower_is_better=True,
            ),
            Kpi(
                key="energy_kwh",
                label="Energy",
                kind="kwh",
                value=now.energy_kwh,
                previous=last(before.energy_kwh),
                lower_is_better=None,
            ),
            Kpi(
                key="thermal_events",
                label="Thermal events",
                kind="count",
                value=now.thermal_events,
                previous=last(before.thermal_events),
                lower_is_better=True,
            ),
            Kpi(
                key="throttled_minutes",
                label="Throttled minutes",
                kind="minutes",
                value=now.throttled_minutes,
                previous=last(before.throttled_minutes),
                lower_is_better=True,
            ),
            Kpi(
                key="coverage_pct",
                label="Data coverage",
                kind="pct",
                value=now.coverage_pct,
                previous=last(before.coverage_pct),
                lower_is_better=False,
            ),
        ]


def connect_read_only(warehouse: Path) -> duckdb.DuckDBPyConnection:
    """Open the warehouse read-only, or fail with a message that says what to do."""
    if not warehouse.is_file():
        raise GpufleetError(
            f"{warehouse}: no warehouse here; run 'gpufleet ingest' and 'gpufleet build' first"
        )
    try:
        con = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.Error as exc:
        raise GpufleetError(f"{warehouse}: cannot open the warehouse read-only: {exc}") from exc
    present = {
        name
        for (name,) in con.execute(
            "select table_name from information_schema.tables "
            "where table_schema = 'main' and table_catalog = current_database()"
        ).fetchall()
    }
    missing = [name for name in MART_TABLES if name not in present]
    if missing:
        con.close()
        raise GpufleetError(
            f"{warehouse}: the warehouse has no {', '.join(missing)}; run 'gpufleet build' first"
        )
    return con


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object]) -> list[Row]:
    cursor = con.execute(sql, list(params))
    names = [column[0] for column in cursor.description or []]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[object]) -> Row:
    rows = _rows(con, sql, params)
    return rows[0] if rows else {}


def _float(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _hours(start: dt.datetime, end: dt.datetime) -> float:
    """Elapsed hours between aware datetimes (23 or 25 on a daylight-saving day)."""
    return (end.astimezone(dt.UTC) - start.astimezone(dt.UTC)).total_seconds() / 3600


def _fleet_totals(
    con: duckdb.DuckDBPyConnection, week: str, start: dt.datetime, end: dt.datetime
) -> FleetTotals:
    first_day, next_monday = start.date(), end.date()
    teams = _one(
        con,
        """
        select
            coalesce(sum(gpu_hours), 0) as gpu_hours,
            coalesce(sum(idle_gpu_hours), 0) as idle_gpu_hours,
            coalesce(sum(waste_gpu_hours), 0) as waste_gpu_hours,
            coalesce(sum(waste_usd), 0) as waste_usd,
            coalesce(sum(energy_kwh), 0) as energy_kwh
        from team_weekly
        where iso_week = ?
        """,
        [week],
    )
    gpus = _one(
        con,
        """
        select count(distinct gpu_uuid) as gpus, coalesce(sum(hours_observed), 0) as hours
        from gpu_daily
        where day >= ? and day < ?
        """,
        [first_day, next_monday],
    )
    # The fleet's mean utilization is utilization-weighted over samples, as avg_util_pct is
    # per team: the teams' busy and measured hours add up to it, their averages do not.
    util = _one(
        con,
        """
        select
            sum(busy_gpu_hours) as busy_hours,
            sum(measured_gpu_hours) as util_hours
        from team_daily
        where day >= ? and day < ?
        """,
        [first_day, next_monday],
    )
    thermal = _one(
        con,
        """
        select count(*) as events, coalesce(sum(duration_s), 0) / 60 as minutes
        from thermal_events
        where start_ts >= ? and start_ts < ?
        """,
        [start, end],
    )
    gpus_seen = int(gpus.get("gpus") or 0)
    util_hours = _float(util.get("util_hours"))
    possible_hours = gpus_seen * _hours(start, end)
    return FleetTotals(
        gpus_seen=gpus_seen,
        gpu_hours=_float(teams.get("gpu_hours")),
        avg_util_pct=(
            100 * _float(util.get("busy_hours")) / util_hours if util_hours > 0 else None
        ),
        idle_gpu_hours=_float(teams.get("idle_gpu_hours")),
        waste_gpu_hours=_float(teams.get("waste_gpu_hours")),
        waste_usd=_float(teams.get("waste_usd")),
        energy_kwh=_float(teams.get("energy_kwh")),
        thermal_events=int(thermal.get("events") or 0),
        throttled_minutes=_float(thermal.get("minutes")),
        coverage_pct=(
            100 * _float(gpus.get("hours")) / possible_hours if possible_hours > 0 else None
        ),
    )


def _teams(con: duckdb.DuckDBPyConnection, week: str) -> list[Row]:
    return _rows(
        con,
        """
        with this_week as (
            select * from team_weekly where iso_week = ?
        ),
        last_week as (
            select * from team_weekly where iso_week = ?
        )
        select
            this_week.team,
            this_week.gpus,
            this_week.gpu_hours,
            this_week.busy_gpu_hours,
            this_week.avg_util_pct,
            this_week.idle_gpu_hours,
            this_week.waste_gpu_hours,
            this_week.waste_usd,
            this_week.energy_kwh,
            last_week.gpu_hours as prev_gpu_hours,
            last_week.avg_util_pct as prev_avg_util_pct,
            last_week.waste_gpu_hours as prev_waste_gpu_hours,
            last_week.waste_usd as prev_waste_usd
        from this_week
        left join last_week on last_week.team = this_week.team
        order by this_week.waste_usd desc, this_week.waste_gpu_hours desc, this_week.team
        """,
        [week, previous_week(week)],
    )


def _heatmap(con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime) -> list[Row]:
    return _rows(
        con,
        """
        select
            day,
            hour,
            team,
            sum(observed_s) / 3600 as gpu_hours,
            sum(busy_s) / 3600 as busy_gpu_hours,
            sum(utilization_s) / 3600 as util_hours
        from gpu_hourly
        where day >= ? and day < ?
        group by all
        order by day, hour, team
        """,
        [start.date(), end.date()],
    )


def _waste_trend(con: duckdb.DuckDBPyConnection, week: str) -> list[Row]:
    monday = week_monday(week)
    return _rows(
        con,
        """
        select iso_week, week_start, team, waste_gpu_hours, waste_usd, gpu_hours
        from team_weekly
        where week_start > ? and week_start <= ?
        order by week_start, team
        """,
        [monday - dt.timedelta(weeks=TREND_WEEKS), monday],
    )


def _episodes(con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime) -> list[Row]:
    return _rows(
        con,
        """
        select
            team, "user", job_id, host, gpu_index, gpu_name, gpu_uuid, attributed_by,
            start_ts, end_ts, idle_seconds, held_memory, waste_usd
        from idle_episodes
        where is_waste and start_ts < ? and end_ts > ?
        order by waste_usd desc, idle_seconds desc, start_ts, gpu_uuid
        limit ?
        """,
        [end, start, TOP_EPISODES],
    )


def _thermal_events(
    con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime
) -> list[Row]:
    return _rows(
        con,
        """
        select
            host, gpu_index, gpu_uuid, team, start_ts, end_ts, duration_s,
            max_temp_gpu_c, min_sm_clock_mhz, reasons_mask, is_hw
        from thermal_events
        where start_ts >= ? and start_ts < ?
        order by duration_s desc, start_ts
        limit ?
        """,
        [start, end, MAX_THERMAL_EVENTS],
    )


def _hottest_gpus(
    con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime
) -> list[Row]:
    return _rows(
        con,
        """
        select
            gpu_uuid,
            any_value(host order by start_ts desc) as host,
            any_value(gpu_index order by start_ts desc) as gpu_index,
            count(*) as events,
            count(*) filter (where is_hw) as hw_events,
            sum(duration_s) / 60 as throttled_minutes,
            max(max_temp_gpu_c) as max_temp_gpu_c,
            min(min_sm_clock_mhz) as min_sm_clock_mhz
        from thermal_events
        where start_ts >= ? and start_ts < ?
        group by gpu_uuid
        order by max_temp_gpu_c desc nulls last, throttled_minutes desc, gpu_uuid
        limit ?
        """,
        [start, end, TOP_GPUS],
    )


def _host_days(con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime) -> list[Row]:
    return _rows(
        con,
        """
        select day, host, gpus, samples, hours_observed, first_ts, last_ts
        from host_daily
        where day >= ? and day < ?
        order by host, day
        """,
        [start.date(), end.date()],
    )


def _day_coverage_pct(day: Row) -> float | None:
    """Observed GPU-hours over the host's GPUs x the day's span from first to last sample.

    A gap inside the day, or a GPU that stopped reporting, lowers it below 100%."""
    span_hours = _hours(day["first_ts"], day["last_ts"])
    gpus = int(day["gpus"] or 0)
    if not gpus or span_hours <= 0:
        return None
    return min(100.0, 100 * _float(day["hours_observed"]) / (gpus * span_hours))


def _hosts(con: duckdb.DuckDBPyConnection, start: dt.datetime, end: dt.datetime) -> list[Row]:
    """Each host's week from host_daily, with the problems a reader should look at."""
    days = _host_days(con, start, end)
    if not days:
        return []
    fleet_days = len({day["day"] for day in days})
    fleet_first = min(day["first_ts"] for day in days)
    fleet_last = max(day["last_ts"] for day in days)
    by_host: dict[str, list[Row]] = {}
    for day in days:
        by_host.setdefault(str(day["host"]), []).append(day)
    hosts: list[Row] = []
    for name, host_days in by_host.items():
        coverages = [
            (c, day["day"]) for day in host_days if (c := _day_coverage_pct(day)) is not None
        ]
        host: Row = {
            "host": name,
            "gpus": max(int(day["gpus"] or 0) for day in host_days),
            "days_reporting": len(host_days),
            "samples": sum(int(day["samples"] or 0) for day in host_days),
            "hours_observed": sum(_float(day["hours_observed"]) for day in host_days),
            "first_ts": min(day["first_ts"] for day in host_days),
            "last_ts": max(day["last_ts"] for day in host_days),
            "coverage_pct": min((c for c, _ in coverages), default=None),
        }
        problems: list[str] = []
        if fleet_last - host["last_ts"] > SILENT_AFTER:
            problems.append("silent at the end of the week")
        if host["first_ts"] - fleet_first > SILENT_AFTER:
            problems.append("no data at the start of the week")
        missing = fleet_days - len(host_days)
        if missing > 0:
            problems.append(f"{missing} day{'s' if missing > 1 else ''} without data")
        gappy = [(c, day) for c, day in coverages if c < GAP_COVERAGE_PCT]
        if gappy:
            worst, worst_day = min(gappy, key=lambda item: item[0])
            problems.append(
                f"gaps on {len(gappy)} day{'s' if len(gappy) > 1 else ''}"
                f" (lowest: {worst:.1f}% observed on {worst_day:%a %d %b})"
            )
        host["problems"] = problems
        hosts.append(host)
    hosts.sort(key=lambda h: (not h["problems"], h["coverage_pct"] or 0.0, h["host"]))
    return hosts


def _quarantined(con: duckdb.DuckDBPyConnection) -> tuple[list[Row], int]:
    total = _one(con, "select count(*) as files from quarantined_files", [])
    rows = _rows(
        con,
        """
        select path, reason, quarantined_at
        from quarantined_files
        order by quarantined_at desc, path
        limit 50
        """,
        [],
    )
    return rows, int(total.get("files") or 0)


def _weeks_with_data(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = _rows(
        con,
        "select iso_week from team_weekly group by iso_week order by iso_week desc limit 8",
        [],
    )
    return [str(row["iso_week"]) for row in rows]


def _localize(rows: list[Row], keys: Sequence[str], tz: zoneinfo.ZoneInfo) -> list[Row]:
    """Timestamps shown in the configured zone, as every mart's days are."""
    for row in rows:
        for key in keys:
            value = row.get(key)
            if isinstance(value, dt.datetime):
                row[key] = value.astimezone(tz)
    return rows


def load_week(config: Config, week: str, *, now: dt.datetime | None = None) -> WeekData:
    """Every row the report of `week` needs, read from the warehouse read-only."""
    tz = zoneinfo.ZoneInfo(config.timezone)
    start, end = week_bounds(week, config.timezone)
    before = previous_week(week)
    before_start, before_end = week_bounds(before, config.timezone)
    con = connect_read_only(config.warehouse_path)
    try:
        totals = _fleet_totals(con, week, start, end)
        previous = _fleet_totals(con, before, before_start, before_end)
        quarantined, quarantined_total = _quarantined(con)
        return WeekData(
            week=week,
            previous_week=before,
            timezone=config.timezone,
            start=start,
            end=end,
            generated_at=(now or dt.datetime.now(dt.UTC)).astimezone(tz),
            totals=totals,
            previous=previous,
            teams=_teams(con, week),
            heatmap=_heatmap(con, start, end),
            waste_trend=_waste_trend(con, week),
            episodes=_localize(_episodes(con, start, end), ("start_ts", "end_ts"), tz),
            thermal_events=_localize(_thermal_events(con, start, end), ("start_ts", "end_ts"), tz),
            hottest_gpus=_hottest_gpus(con, start, end),
            hosts=_localize(_hosts(con, start, end), ("first_ts", "last_ts"), tz),
            quarantined=_localize(quarantined, ("quarantined_at",), tz),
            quarantined_total=quarantined_total,
            weeks_with_data=_weeks_with_data(con),
        )
    except duckdb.Error as exc:
        raise GpufleetError(
            f"{config.warehouse_path}: cannot read the report's tables: {exc}"
        ) from exc
    finally:
        con.close()
