"""The report's Altair charts, built from the polars DataFrames of `gpufleet.reports.data`.

Each chart carries its rows inline (no URL), has tooltips, and renders the same in the page
(interactive, through vegaEmbed) and in the email (a PNG through vl-convert). Times are
handed to Vega as local wall-clock strings without an offset, which Vega parses and shows
as they are in any browser's zone, so the charts show the configured zone's time.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from dataclasses import dataclass
from typing import Any

import altair as alt
import polars as pl
import polars.selectors as cs

from gpufleet.reports.records import WeekData

WIDTH = 860
MAX_TEAM_PANELS = 9  # the per-team heatmap shows the teams with the most GPU-hours
UTIL_SCALE = alt.Scale(domain=[0, 100], scheme="viridis")
NO_UTILIZATION = "#e4e4e4"  # a heatmap cell without a measured utilization
WALL_CLOCK = "%Y-%m-%dT%H:%M:%S"  # local time without an offset: Vega shows it as it is
DAY_LABEL = "%Y-%m-%d %a"  # "2026-11-16 Mon": sorts as a date, reads as a weekday
DAY_AXIS = "%a %d %b"  # a time axis labelled by day: "Mon 16 Nov"


@dataclass(frozen=True)
class NamedChart:
    key: str  # a slug: the element id in the page and the image's name in the email
    title: str
    chart: alt.TopLevelMixin

    @functools.cached_property
    def spec_json(self) -> str:
        """The chart's Vega-Lite spec as JSON with its keys sorted, made once: the page and
        the email both use it, and it names the chart's PNG (gpufleet.reports.mail).

        Not validated against the Vega-Lite schema here (three quarters of a chart's
        spec time): a chart's structure comes from this module's code, not from its rows,
        and tests/test_report.py validates every chart the report and the team emails make.
        """
        return json.dumps(self.chart.to_dict(validate=False), sort_keys=True)

    def spec(self) -> dict[str, Any]:
        """The chart's Vega-Lite spec, a new dict on each call (the caller may change it)."""
        spec: dict[str, Any] = json.loads(self.spec_json)
        return spec


class InlineRows(alt.Data):
    """`alt.Data`, which Altair does not check against the Vega-Lite schema as it is made: it
    checked every row of `values` (0.15 s for a week of nine teams' hours). The chart's test
    checks them with the rest of its spec (see NamedChart.spec_json)."""

    _class_is_valid_at_instantiation = False


def inline(frame: pl.DataFrame) -> alt.Data:
    """The frame's rows as the chart's inline values, days and times as text Vega shows as
    they are.

    Not `alt.Chart(frame)`: Altair would hand the frame to its process-wide data transformer,
    which moves the rows to a top-level `datasets` entry, refuses more than 5,000 rows, writes
    days as midnights, and (where a notebook enabled the `json` one) writes them to a file
    that the page would then have to fetch. (A plain `{"values": rows}` would be moved to
    `datasets` too.)
    """
    shown = frame.with_columns(
        cs.date().dt.strftime(DAY_LABEL), cs.datetime().dt.strftime(WALL_CLOCK)
    )
    return InlineRows(values=shown.to_dicts())


def utilization_heatmap(
    heatmap: pl.DataFrame, title: str = "Fleet utilization by day and hour"
) -> alt.TopLevelMixin:
    """Utilization by day and local hour (the fleet's, or one team's rows)."""
    return (
        alt.Chart(inline(heatmap), title=title)
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


def team_hours(heatmap: pl.DataFrame, teams: list[str]) -> pl.DataFrame:
    """Each team's row for every hour of every day that has data: an hour in which none of
    the team's GPUs reported gets 0 GPU-hours, so each team's panel is a full grid."""
    grid = (
        pl.DataFrame({"team": teams}, schema={"team": heatmap.schema["team"]})
        .join(heatmap.select(pl.col("day").unique().sort()), how="cross")
        .join(
            pl.DataFrame({"hour": range(24)}, schema={"hour": heatmap.schema["hour"]}), how="cross"
        )
    )
    return grid.join(heatmap, on=["team", "day", "hour"], how="left").with_columns(
        pl.col("gpu_hours", "busy_gpu_hours", "util_hours").fill_null(0.0)
    )


def team_heatmaps(heatmap: pl.DataFrame) -> alt.TopLevelMixin:
    """Utilization by day and local hour, one panel per team (the largest teams), each a full
    grid of the days with data: grey where none of the team's GPUs measured a utilization."""
    largest = (
        heatmap.group_by("team")
        .agg(pl.col("gpu_hours").sum())
        .sort(["gpu_hours", "team"], descending=[True, False])
        .head(MAX_TEAM_PANELS)["team"]
        .to_list()
    )
    cells = alt.Chart().encode(
        x=alt.X("hour:O", title="hour of day", axis=alt.Axis(values=[0, 6, 12, 18])),
        y=alt.Y("day:O", title=None, axis=alt.Axis(labelExpr="slice(datum.value, 11)")),
    )
    grid = cells.mark_rect(color=NO_UTILIZATION).encode(
        tooltip=[
            alt.Tooltip("team:N", title="team"),
            alt.Tooltip("day:O", title="day"),
            alt.Tooltip("hour:O", title="hour"),
            alt.Tooltip("gpu_hours:Q", title="GPU-hours", format=",.1f"),
        ]
    )
    utilization = (
        cells.transform_filter("datum.util_hours > 0")
        .transform_calculate(util_pct="100 * datum.busy_gpu_hours / datum.util_hours")
        .mark_rect()
        .encode(
            color=alt.Color("util_pct:Q", scale=UTIL_SCALE, title="util %"),
            tooltip=[
                alt.Tooltip("team:N", title="team"),
                alt.Tooltip("day:O", title="day"),
                alt.Tooltip("hour:O", title="hour"),
                alt.Tooltip("util_pct:Q", title="utilization %", format=".1f"),
                alt.Tooltip("gpu_hours:Q", title="GPU-hours", format=",.1f"),
            ],
        )
    )
    return (
        alt.layer(grid, utilization, data=inline(team_hours(heatmap, largest)))
        .properties(width=220, height=110)
        .facet(
            facet=alt.Facet("team:N", title=None, sort=largest),
            columns=3,
            title=alt.Title(
                "Utilization by team, day and hour",
                subtitle="grey: no GPU of the team measured a utilization in that hour",
            ),
        )
        # each panel draws its own axes, so the empty places of the last row draw none
        .resolve_axis(x="independent", y="independent")
    )


BUSY_STATES = ("in use", "idle, not counted as waste", "idle waste")


def busy_idle_split(teams: pl.DataFrame) -> pl.DataFrame:
    """Three rows per team, in the teams' order: its GPU-hours in use, idle, and idle waste,
    each with its share of the team's hours."""
    gpu_hours, idle, waste = (
        pl.col(name).fill_null(0.0) for name in ("gpu_hours", "idle_gpu_hours", "waste_gpu_hours")
    )
    parts = ((gpu_hours - idle).clip(lower_bound=0.0), (idle - waste).clip(lower_bound=0.0), waste)
    split = pl.concat(
        teams.with_row_index("position").select(
            "position",
            "team",
            state=pl.lit(state),
            order=pl.lit(order),
            hours=part,
            gpu_hours=gpu_hours,
        )
        for order, (state, part) in enumerate(zip(BUSY_STATES, parts, strict=True))
    ).sort("position", "order")
    # Divided in Python: polars divides by a repeated value as a multiplication by its
    # reciprocal, which can differ from the quotient in the last digit.
    shares = [
        100 * hours / total if total else 0.0
        for hours, total in split.select("hours", "gpu_hours").iter_rows()
    ]
    return split.select("team", "state", "order", "hours").with_columns(
        share_pct=pl.Series(shares, dtype=pl.Float64)
    )


def busy_versus_idle(teams: pl.DataFrame) -> alt.TopLevelMixin:
    """Each team's GPU-hours split into in use, idle and idle waste."""
    team_order = (
        teams.with_columns(pl.col("gpu_hours").fill_null(0.0))
        .sort("gpu_hours", descending=True, maintain_order=True)["team"]
        .to_list()
    )
    return (
        alt.Chart(inline(busy_idle_split(teams)), title="Busy versus idle GPU-hours per team")
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


def waste_trend(trend: pl.DataFrame, title: str = "Idle waste per week") -> alt.TopLevelMixin:
    """Idle waste in dollars per week and team; click a team in the legend to highlight it."""
    pick = alt.selection_point(fields=["team"], bind="legend")
    return (
        alt.Chart(inline(trend), title=title)
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


def thermal_heatmap(hours: pl.DataFrame, data: WeekData) -> alt.TopLevelMixin:
    """Throttled minutes by host and local hour over the week: one row per host (the most
    throttled first), one cell per hour with throttling. The time axis ends at the week's
    end, with a tick at each of its seven midnights (none at the next Monday's)."""
    hosts = hours.sort("host_rank")["host"].unique(maintain_order=True).to_list()
    throttled = int(hours.select(pl.col("hosts_throttled").max()).item() or 0)
    title: str | alt.TitleParams = "Throttled minutes by host and hour"
    if len(hosts) < throttled:
        title = alt.Title(
            title, subtitle=f"the {len(hosts)} of {throttled} hosts that throttled most"
        )
    domain = [data.start.strftime(WALL_CLOCK), data.end.strftime(WALL_CLOCK)]
    midnights = [
        alt.DateTime(year=day.year, month=day.month, date=day.day)
        for day in (data.start.date() + dt.timedelta(days=offset) for offset in range(7))
    ]
    return (
        alt.Chart(
            inline(hours.select("host", "hour_start", "throttled_minutes", "gpus_throttled")),
            title=title,
        )
        .mark_rect()
        .encode(
            x=alt.X(
                "yearmonthdatehours(hour_start):T",
                title=None,
                scale=alt.Scale(domain=domain, nice=False),
                axis=alt.Axis(format=DAY_AXIS, values=midnights, grid=True),
            ),
            y=alt.Y("host:N", sort=hosts, title=None),
            color=alt.Color(
                "throttled_minutes:Q",
                title="throttled min",
                scale=alt.Scale(scheme="orangered", domainMin=0),
            ),
            tooltip=[
                alt.Tooltip("host:N"),
                alt.Tooltip(
                    "yearmonthdatehours(hour_start):T", title="hour", format="%a %d %b %H:00"
                ),
                alt.Tooltip("throttled_minutes:Q", title="throttled minutes", format=",.1f"),
                alt.Tooltip("gpus_throttled:Q", title="GPUs throttled"),
            ],
        )
        .properties(width=WIDTH - 200, height=alt.Step(16))
    )


def build_charts(data: WeekData) -> list[NamedChart]:
    """The week's charts in page order; a chart without rows is left out."""
    charts: list[NamedChart] = []
    if not data.heatmap.is_empty():
        charts.append(
            NamedChart("utilization", "Fleet utilization", utilization_heatmap(data.heatmap))
        )
        charts.append(
            NamedChart("team-utilization", "Utilization by team", team_heatmaps(data.heatmap))
        )
    if not data.teams.is_empty():
        charts.append(NamedChart("busy-idle", "Busy versus idle", busy_versus_idle(data.teams)))
    if not data.waste_trend.is_empty():
        charts.append(NamedChart("waste-trend", "Waste trend", waste_trend(data.waste_trend)))
    if not data.thermal_hours.is_empty():
        charts.append(
            NamedChart(
                "thermal-heatmap",
                "Throttled minutes by host and hour",
                thermal_heatmap(data.thermal_hours, data),
            )
        )
    return charts
