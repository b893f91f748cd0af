"""Render the week's rows into the self-contained HTML page, the email bodies and a summary.

Jinja autoescapes every HTML template, so a team called `<script>` shows as text. Chart
specs go into the page as JSON inside one `<script type="application/json">` element, with
`<`, `>` and `&` written as `\\u003c` etc. so no value can close the element. The Vega,
Vega-Lite and vega-embed libraries are inlined once, from vl-convert's bundle, which is made
once per vl-convert version and kept in the cache folder (`disk_cache`).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jinja2
import polars as pl
import vl_convert
from markupsafe import Markup

from gpufleet.console import printable
from gpufleet.episode_groups import index_ranges
from gpufleet.reports import disk_cache, health
from gpufleet.reports.charts import NamedChart
from gpufleet.reports.jobs import MIN_GPU_HOURS
from gpufleet.reports.records import Kpi, WeekData


class PageLink(NamedTuple):
    """Where an email says the interactive page is: its URL (`report.page_url`), or, with
    none configured, its path on the host that wrote it."""

    url: str | None
    path: str


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("gpufleet.reports", "templates"),
    autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default=False),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)

_JSON_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def script_json(value: object) -> str:
    """JSON that is safe inside a <script> element: nothing in it can end the element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for raw, escaped in _JSON_ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


VEGA_SNIPPET = "window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;"


@functools.cache
def vega_bundle() -> str:
    """vega, vega-lite and vega-embed as one script that sets window.vegaEmbed (about 0.9 MB).
    vl-convert takes some 1.8 CPU seconds to make it: it is made once per vl-convert version
    and kept in the cache folder (`disk_cache`), and once per process in memory."""
    bundle = disk_cache.cached_bytes(
        "vega-bundle",
        # vl_version: vl-convert's default, its latest Vega-Lite (its version says which)
        (importlib.metadata.version("vl-convert-python"), "vl_version=default", VEGA_SNIPPET),
        lambda: vl_convert.javascript_bundle(VEGA_SNIPPET).encode("utf-8"),
    ).decode("utf-8")
    # The bundle is inlined in a <script> element; make sure nothing in it can close that.
    return bundle.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def page_spec(chart: NamedChart) -> dict[str, Any]:
    """The chart's Vega-Lite spec as the page embeds it: no `$schema` URL (the page says
    mode "vega-lite" instead), so the page names no external address at all."""
    spec = chart.spec()
    spec.pop("$schema", None)
    return spec


# --- formatting -----------------------------------------------------------------------------


def format_value(value: float | int | None, kind: str) -> str:
    """A headline number with its unit."""
    if value is None:
        return "–"
    if kind == "count":
        return f"{value:,.0f}"
    if kind == "hours":
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"
    if kind == "pct":
        return f"{value:.1f}%"
    if kind == "usd":
        return f"${value:,.0f}"
    if kind == "kwh":
        return f"{value:,.0f} kWh" if abs(value) >= 100 else f"{value:,.1f} kWh"
    if kind == "minutes":
        return f"{value:,.0f} min"
    raise ValueError(f"unknown kind {kind!r}")


def change(
    value: float | int | None, previous: float | int | None, kind: str
) -> tuple[str, float | None]:
    """The change from last week as text, and its sign (None: not comparable)."""
    if value is None or previous is None:
        return "no data last week" if previous is None and value is not None else "–", None
    delta = float(value) - float(previous)
    if kind == "pct":
        return f"{delta:+.1f} pts", delta
    if previous == 0:
        return ("no change" if delta == 0 else "new"), delta
    if delta == 0:
        return "no change", 0.0
    return f"{100 * delta / abs(float(previous)):+.0f}%", delta


def kpi_tone(kpi: Kpi) -> str:
    """good, bad or neutral: whether this week's change is an improvement."""
    _, delta = change(kpi.value, kpi.previous, kpi.kind)
    if delta is None or delta == 0 or kpi.lower_is_better is None:
        return "neutral"
    return "good" if (delta < 0) == kpi.lower_is_better else "bad"


def format_duration(seconds: float | int | None) -> str:
    if seconds is None:
        return "–"
    minutes = round(float(seconds) / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {rest:02d} min"
    return f"{hours / 24:.1f} days"


def format_number(value: float | int | None, decimals: int = 1) -> str:
    return "–" if value is None else f"{value:,.{decimals}f}"


def format_usd(value: float | int | None) -> str:
    return "–" if value is None else f"${value:,.0f}"


def format_time(value: Any, pattern: str = "%a %d %b %H:%M") -> str:
    return "–" if value is None else value.strftime(pattern)


GIB = 1 << 30


def format_memory(used: float | int | None, total: float | int | None) -> str:
    """A GPU's peak memory against its total, in GiB: `38.5 of 80 GiB (48%)`."""
    if used is None:
        return "–"
    if not total:
        return f"{used / GIB:,.1f} GiB"
    return f"{used / GIB:,.1f} of {total / GIB:,.0f} GiB ({100 * used / total:.0f}%)"


MAX_GPU_HOSTS = 3  # the hosts a list of GPUs names before it says how many more


def format_gpus(gpus: Sequence[Mapping[str, Any]] | None, max_hosts: int = MAX_GPU_HOSTS) -> str:
    """GPUs (each with its `host` and `gpu_index`) as `host:index` per host, consecutive
    indices as ranges (`node-a:0-7; node-b:2,5`), the first `max_hosts` hosts by name and
    then how many GPUs on how many more hosts."""
    by_host: dict[str, set[int]] = {}
    for gpu in gpus or ():
        by_host.setdefault(str(gpu["host"]), set()).add(int(gpu["gpu_index"]))
    hosts = sorted(by_host)
    shown = [f"{host}:{index_ranges(sorted(by_host[host]), ',')}" for host in hosts[:max_hosts]]
    rest = hosts[max_hosts:]
    if rest:
        more = sum(len(by_host[host]) for host in rest)
        shown.append(
            f"and {more} GPU{'s' * (more != 1)} on {len(rest)} more host{'s' * (len(rest) != 1)}"
        )
    return "; ".join(shown) or "–"


def rows(frame: pl.DataFrame) -> Iterator[dict[str, Any]]:
    """A DataFrame's rows as dicts, for a template's `for` loop."""
    return frame.iter_rows(named=True)


def _gpu_hours_text(hours: float) -> str:
    return f"{hours:g} GPU-hour{'' if hours == 1 else 's'}"


_ENV.filters.update(
    rows=rows,
    value=format_value,
    duration=format_duration,
    gpus=format_gpus,
    memory=format_memory,
    number=format_number,
    usd=format_usd,
    time=format_time,
    shell_word=shlex.quote,  # a name in a command line to copy: one word, run as none
)
_ENV.globals.update(
    change=change,
    kpi_tone=kpi_tone,
    jobs_min_gpu_hours=_gpu_hours_text(MIN_GPU_HOURS),
    high_util=format_value(health.HIGH_UTIL_PCT, "pct"),
    low_sm_active=format_value(health.LOW_SM_ACTIVE_PCT, "pct"),
)


def report_name(data: WeekData) -> str:
    """`gpufleet weekly report 2026-W47`, `... 2026-W47, site sfo` for one site's."""
    site = f", site {printable(data.cluster)}" if data.cluster else ""
    return f"gpufleet weekly report {data.week}{site}"


def subject(data: WeekData) -> str:
    """The fleet email's subject: the week's idle waste, and its idle capacity (the GPUs no
    team held) when it has any, as a cost line of its own."""
    if not data.has_data:
        return f"{report_name(data)}: no data"
    text = f"{report_name(data)}: {format_usd(data.totals.waste_usd)} idle waste"
    hours = data.totals.idle_capacity_gpu_hours
    if hours > 0:
        text += (
            f", {format_usd(data.totals.idle_capacity_usd)} idle capacity "
            f"({format_value(hours, 'hours')} unallocated GPU-hours)"
        )
    if data.is_partial:
        text += " (partial week)"
    return text


def coverage_notes(data: WeekData) -> list[str]:
    """The partial-week banner: what part of this week has samples, and why no change
    against last week is shown (no lines when both weeks are complete)."""
    notes: list[str] = []
    coverage = data.coverage
    if data.has_data and coverage is not None and coverage.is_partial:
        when = "%a %d %b %H:%M"
        text = (
            f"Partial week: samples from {coverage.first_ts:{when}} to "
            f"{coverage.last_ts:{when}} ({data.timezone}) only"
        )
        if coverage.gap_days:
            text += ", none on " + ", ".join(day.strftime("%a %d %b") for day in coverage.gap_days)
        notes.append(
            f"{text}. The figures cover those {format_number(coverage.hours)} hours, and a "
            f"team's GPUs held on average are over them; no change against "
            f"{data.previous_week} is shown."
        )
    if data.has_data and data.previous_has_data and data.previous_is_partial:
        notes.append(
            f"{data.previous_week} has samples for part of that week only: no change against "
            "it is shown."
        )
    return notes


def _context(data: WeekData, charts: list[NamedChart]) -> dict[str, Any]:
    return {
        "data": data,
        "kpis": data.kpis,
        "charts": {chart.key: chart for chart in charts},
        "title": f"GPU fleet report {data.week}"
        + (f": site {printable(data.cluster)}" if data.cluster else ""),
        "subject": subject(data),
        "coverage_notes": coverage_notes(data),
    }


def render_page(data: WeekData, charts: list[NamedChart]) -> str:
    """The interactive page: one file, the Vega libraries inlined once, one spec per chart."""
    specs = {chart.key: page_spec(chart) for chart in charts}

    def slot(key: str) -> Markup:
        chart = charts_by_key.get(key)
        if chart is None:
            return Markup("")
        return Markup('<figure class="chart" id="chart-{}" data-chart="{}"></figure>').format(
            key, key
        )

    charts_by_key = {chart.key: chart for chart in charts}
    return _ENV.get_template("page.html").render(
        **_context(data, charts),
        mode="page",
        chart_slot=slot,
        specs_json=Markup(script_json(specs)),
        vega_bundle=Markup(vega_bundle()) if charts else Markup(""),
    )


def render_email_html(
    data: WeekData, charts: list[NamedChart], cids: Mapping[str, str], page: PageLink
) -> str:
    """The email's HTML body: the same summary and tables, each chart an <img src="cid:...">,
    and where the interactive page is."""
    titles = {chart.key: chart.title for chart in charts}

    def slot(key: str) -> Markup:
        if key not in cids:
            return Markup("")
        return Markup(
            '<p class="chart"><img src="cid:{}" alt="{}" style="max-width:100%;height:auto"></p>'
        ).format(cids[key], titles[key])

    chart_slot: Callable[[str], Markup] = slot
    return _ENV.get_template("email.html").render(
        **_context(data, charts), mode="email", chart_slot=chart_slot, page=page
    )


def render_template(name: str, **context: Any) -> str:
    """Any template of reports/templates with its context (HTML ones autoescaped)."""
    return _ENV.get_template(name).render(**context)


def render_email_text(data: WeekData, page: PageLink) -> str:
    """The plain-text alternative."""
    return _ENV.get_template("email.txt").render(
        data=data,
        kpis=data.kpis,
        subject=subject(data),
        coverage_notes=coverage_notes(data),
        page=page,
    )


def _md(text: object) -> str:
    """Text that markdown (and the HTML it may carry) shows literally."""
    escaped = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for char in "\\`*_[]|#":
        escaped = escaped.replace(char, "\\" + char)
    return escaped


def summary_markdown(data: WeekData, page_path: str) -> str:
    """The week's summary as markdown, for the Prefect artifact."""
    lines = [f"# {_md(subject(data))}", ""]
    if not data.has_data:
        lines.append(f"No data for week {data.week}.")
        return "\n".join(lines) + "\n"
    lines += [*(f"**{_md(note)}**\n" for note in coverage_notes(data))]
    lines += ["| | this week | change |", "|---|---:|---:|"]
    for kpi in data.kpis:
        text = data.not_compared or change(kpi.value, kpi.previous, kpi.kind)[0]
        lines.append(f"| {kpi.label} | {format_value(kpi.value, kpi.kind)} | {text} |")
    lines += [
        "",
        "| team | GPU-hours | util | waste GPU-hours | waste |",
        "|---|---:|---:|---:|---:|",
    ]
    for team in rows(data.teams.head(10)):
        lines.append(
            f"| {_md(team['team'])} | {format_number(team['gpu_hours'])} "
            f"| {format_value(team['avg_util_pct'], 'pct')} "
            f"| {format_number(team['waste_gpu_hours'])} | {format_usd(team['waste_usd'])} |"
        )
    lines += ["", f"Report: {_md(page_path)}"]
    return "\n".join(lines) + "\n"
