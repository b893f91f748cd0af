"""The report's Altair charts, built from the rows of `reports.data`.

Each chart carries its rows inline (no URL), has tooltips, and renders the same in the page
(interactive, through vegaEmbed) and in the email (a PNG through vl-convert). Times are
handed to Vega as local wall-clock strings without an offset, which Vega parses and shows
as they are in any browser's zone, so the charts show the configured zone's time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt

from reports.data import Row, WeekData

WIDTH = 860
MAX_TEAM_PANELS = 9  # the per-team heatmap shows the teams with the most GPU-hours
UTIL_SCALE = alt.Scale(domain=[0, 100], scheme="viridis")


@dataclass(frozen=True)
class NamedChart:
    key: str  # a slug: the element id in the page and the image's name in the email
    title: str
    chart: alt.TopLevelMixin

    def spec(self) -> dict[str, Any]:
        return self.chart.to_dict()


def _wall_clock(value: dt.datetime) -> str:
    """Local time without an offset: Vega shows it as it is, whatever the browser's zone."""
    return value.replace(tzinfo=None).isoformat(timespec="seconds")


def _plain(value: object) -> object:
    """A JSON value Vega reads as the value it should show."""
    if isinstance(value, dt.datetime):
        return _wall_clock(value)
    if isinstance(value, dt.date):
        return f"{value.isoformat()} {value.strftime('%a')}"
    return value


def _values(rows: Iterable[Row]) -> alt.Data:
    return alt.Data(values=[{key: _plain(value) for key, value in row.items()} for row in rows])


def utilization_heatmap(heatmap: Sequence[Row]) -> alt.TopLevelMixin:
    """Fleet utilization by day and local hour."""
    return (
        alt.Chart(_values(heatmap), title="Fleet utilization by day and hour")
        .transform_aggregate(
            busy_gpu_hours="sum(busy_gpu_hours)",
            util_hours="sum(util_hours)",
            gpu_hours="sum(gpu_hours)",
            groupby=["day", "hour"],
        )
        .transform_calculate(
            util_pct="datum.util_hours > 0 ? 100 * datum.busy_gpu_hours / datum.util_hours : null"
        )
        .mark_rect()
        .encode(
            x=alt.X("hour:O", title="hour of day"),
            y=alt.Y("day:O", title=None),
            color=alt.Color("util_pct:Q", scale=UTIL_SCALE, title="util %"),
            tooltip=[
                alt.Tooltip("day:O", title="day"),
                alt.Tooltip("hour:O", title="hour"),
                alt.Tooltip("util_pct:Q", title="utilization %", format=".1f"),
                alt.Tooltip("gpu_hours:Q", title="GPU-hours", format=",.1f"),
            ],
        )
        .properties(width=WIDTH - 120, height=220)
    )


def team_heatmaps(heatmap: Sequence[Row]) -> alt.TopLevelMixin:
    """Utilization by day and local hour, one panel per team (the largest teams)."""
    hours_by_team: dict[str, float] = {}
    for row in heatmap:
        hours_by_team[row["team"]] = hours_by_team.get(row["team"], 0.0) + row["gpu_hours"]
    largest = sorted(hours_by_team, key=lambda team: (-hours_by_team[team], team))
    shown = set(largest[:MAX_TEAM_PANELS])
    rows = [row for row in heatmap if row["team"] in shown]
    return (
        alt.Chart(_values(rows))
        .transform_calculate(
            util_pct="datum.util_hours > 0 ? 100 * datum.busy_gpu_hours / datum.util_hours : null"
        )
        .mark_rect()
        .encode(
            x=alt.X("hour:O", title="hour of day", axis=alt.Axis(values=[0, 6, 12, 18])),
            y=alt.Y("day:O", title=None, axis=alt.Axis(labelExpr="slice(datum.value, 11)")),
            color=alt.Color("util_pct:Q", scale=UTIL_SCALE, title="util %"),
            tooltip=[
                alt.Tooltip("team:N", title="team"),
                alt.Tooltip("day:O", title="day"),
                alt.Tooltip("hour:O", title="hour"),
                alt.Tooltip("util_pct:Q", title="utilization %", format=".1f"),
                alt.Tooltip("gpu_hours:Q", title="GPU-hours", format=",.1f"),
            ],
        )
        .properties(width=220, height=110)
        .facet(
            facet=alt.Facet("team:N", title=None, sort=largest[:MAX_TEAM_PANELS]),
            columns=3,
            title="Utilization by team, day and hour",
        )
    )


BUSY_STATES = ("in use", "idle, not counted as waste", "idle waste")


def busy_versus_idle(teams: Sequence[Row]) -> alt.TopLevelMixin:
    """Each team's GPU-hours split into in use, idle and idle waste."""
    rows: list[Row] = []
    for team in teams:
        gpu_hours = float(team["gpu_hours"] or 0)
        idle = float(team["idle_gpu_hours"] or 0)
        waste = float(team["waste_gpu_hours"] or 0)
        parts = (max(gpu_hours - idle, 0.0), max(idle - waste, 0.0), waste)
        for order, (state, hours) in enumerate(zip(BUSY_STATES, parts, strict=True)):
            rows.append(
                {
                    "team": team["team"],
                    "state": state,
                    "order": order,
                    "hours": hours,
                    "share_pct": 100 * hours / gpu_hours if gpu_hours else 0.0,
                }
            )
    team_order = [t["team"] for t in sorted(teams, key=lambda t: -float(t["gpu_hours"] or 0))]
    return (
        alt.Chart(_values(rows), title="Busy versus idle GPU-hours per team")
        .mark_bar()
        .encode(
            y=alt.Y("team:N", sort=team_order, title=None),
            x=alt.X("hours:Q", title="GPU-hours", stack="zero"),
            color=alt.Color(
                "state:N",
                scale=alt.Scale(domain=list(BUSY_STATES), range=["#4c78a8", "#f2cf5b", "#e45756"]),
                title=None,
                legend=alt.Legend(orient="top"),
            ),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("team:N"),
                alt.Tooltip("state:N"),
                alt.Tooltip("hours:Q", title="GPU-hours", format=",.1f"),
                alt.Tooltip("share_pct:Q", title="% of the team's hours", format=".1f"),
            ],
        )
        .properties(width=WIDTH - 200, height=alt.Step(22))
    )


def waste_trend(trend: Sequence[Row]) -> alt.TopLevelMixin:
    """Idle waste in dollars per week and team; click a team in the legend to highlight it."""
    pick = alt.selection_point(fields=["team"], bind="legend")
    return (
        alt.Chart(_values(trend), title="Idle waste per week")
        .mark_bar()
        .encode(
            x=alt.X("iso_week:O", title=None),
            y=alt.Y("waste_usd:Q", title="waste (USD)", stack="zero"),
            color=alt.Color("team:N", title="team"),
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.25)),
            tooltip=[
                alt.Tooltip("iso_week:O", title="week"),
                alt.Tooltip("team:N"),
                alt.Tooltip("waste_usd:Q", title="waste USD", format="$,.0f"),
                alt.Tooltip("waste_gpu_hours:Q", title="waste GPU-hours", format=",.1f"),
            ],
        )
        .add_params(pick)
        .properties(width=alt.Step(64), height=240)
    )


def thermal_timeline(events: Sequence[Row], data: WeekData) -> alt.TopLevelMixin:
    """Thermal events per host over the week, sized by how long the GPU throttled."""
    rows = [
        {
            "host": event["host"],
            "gpu": f"GPU {event['gpu_index']}",
            "team": event["team"],
            "start_ts": event["start_ts"],
            "duration_min": float(event["duration_s"] or 0) / 60,
            "max_temp_gpu_c": event["max_temp_gpu_c"],
            "min_sm_clock_mhz": event["min_sm_clock_mhz"],
            "kind": "HW slowdown" if event["is_hw"] else "SW thermal slowdown",
        }
        for event in events
    ]
    hosts = sorted({str(event["host"]) for event in events})
    domain = [_wall_clock(data.start), _wall_clock(data.end)]
    return (
        alt.Chart(_values(rows), title="Thermal events per host")
        .mark_point(filled=True, opacity=0.7)
        .encode(
            x=alt.X("start_ts:T", title=None, scale=alt.Scale(domain=domain)),
            y=alt.Y("host:N", title=None, sort=hosts),
            size=alt.Size("duration_min:Q", title="minutes", scale=alt.Scale(range=[30, 600])),
            color=alt.Color(
                "kind:N",
                title=None,
                scale=alt.Scale(
                    domain=["SW thermal slowdown", "HW slowdown"], range=["#f58518", "#e45756"]
                ),
                legend=alt.Legend(orient="top"),
            ),
            tooltip=[
                alt.Tooltip("host:N"),
                alt.Tooltip("gpu:N"),
                alt.Tooltip("team:N"),
                alt.Tooltip("start_ts:T", title="start", format="%a %d %b %H:%M"),
                alt.Tooltip("duration_min:Q", title="minutes", format=",.1f"),
                alt.Tooltip("max_temp_gpu_c:Q", title="max °C"),
                alt.Tooltip("min_sm_clock_mhz:Q", title="min SM MHz"),
                alt.Tooltip("kind:N"),
            ],
        )
        .properties(width=WIDTH - 200, height=alt.Step(18))
    )


def hottest_gpus(gpus: Sequence[Row]) -> alt.TopLevelMixin:
    """The hottest GPUs by peak temperature during thermal events."""
    rows = [{**gpu, "gpu": f"{gpu['host']} / GPU {gpu['gpu_index']}"} for gpu in gpus]
    return (
        alt.Chart(_values(rows), title="Hottest GPUs")
        .mark_bar()
        .encode(
            y=alt.Y("gpu:N", sort="-x", title=None),
            x=alt.X("max_temp_gpu_c:Q", title="peak temperature (°C)"),
            color=alt.Color(
                "throttled_minutes:Q", title="throttled min", scale=alt.Scale(scheme="orangered")
            ),
            tooltip=[
                alt.Tooltip("gpu:N", title="GPU"),
                alt.Tooltip("gpu_uuid:N", title="UUID"),
                alt.Tooltip("max_temp_gpu_c:Q", title="peak °C"),
                alt.Tooltip("throttled_minutes:Q", title="throttled minutes", format=",.1f"),
                alt.Tooltip("events:Q", title="events"),
                alt.Tooltip("min_sm_clock_mhz:Q", title="min SM MHz"),
            ],
        )
        .properties(width=WIDTH - 260, height=alt.Step(20))
    )


def build_charts(data: WeekData) -> list[NamedChart]:
    """The week's charts in page order; a chart without rows is left out."""
    charts: list[NamedChart] = []
    if data.heatmap:
        charts.append(
            NamedChart("utilization", "Fleet utilization", utilization_heatmap(data.heatmap))
        )
        charts.append(
            NamedChart("team-utilization", "Utilization by team", team_heatmaps(data.heatmap))
        )
    if data.teams:
        charts.append(NamedChart("busy-idle", "Busy versus idle", busy_versus_idle(data.teams)))
    if data.waste_trend:
        charts.append(NamedChart("waste-trend", "Waste trend", waste_trend(data.waste_trend)))
    if data.thermal_events:
        charts.append(
            NamedChart(
                "thermal-timeline",
                "Thermal events per host",
                thermal_timeline(data.thermal_events, data),
            )
        )
    if data.hottest_gpus:
        charts.append(NamedChart("hottest-gpus", "Hottest GPUs", hottest_gpus(data.hottest_gpus)))
    return charts
