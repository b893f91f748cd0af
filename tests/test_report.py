"""The weekly report: what it reads from the marts, the page it writes, and its safety rules."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

import altair as alt
import duckdb
import polars as pl
import pytest
from altair.utils import schemapi

from gpufleet.cli import main
from gpufleet.config import load_config
from gpufleet.errors import GpufleetError
from gpufleet.reports import charts as report_charts
from gpufleet.reports.data import WeekData, load_week
from gpufleet.reports.host_groups import HostGroup, throttled_group
from gpufleet.reports.mail import read_message
from gpufleet.reports.render import (
    PageLink,
    change,
    format_duration,
    format_gpus,
    format_value,
    render_email_text,
    script_json,
)
from gpufleet.reports.team import load_team_weeks, team_charts
from gpufleet.reports.weekly import write_report
from gpufleet.warehouse.base.connect import connect
from gpufleet.weeks import week_label
from tests import report_fixtures as fx
from tests.prefect_runs import own_flow_runs

pytestmark = pytest.mark.fleet


class _PageParser(HTMLParser):
    """Collects the attributes of every tag, the scripts' text, and the KPI cards' text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.attributes: list[tuple[str, str, str]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.kpis: dict[str, list[str]] = {}
        self.table_cells: list[str] = []
        self._script: dict[str, str | None] | None = None
        self._kpi: str | None = None
        self._kpi_depth = 0
        self._in_td = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            self.attributes.append((tag, name, value or ""))
        found = dict(attrs)
        if tag == "script":
            self._script = found
        if tag == "td":
            self._in_td = True
            self.table_cells.append("")
        if self._kpi is not None and tag == "div":
            self._kpi_depth += 1
        elif found.get("data-kpi"):
            self._kpi = found["data-kpi"]
            self._kpi_depth = 1
            self.kpis[self._kpi or ""] = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._in_td = False
        if self._kpi is not None and tag == "div":
            self._kpi_depth -= 1
            if self._kpi_depth == 0:
                self._kpi = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self.scripts.append((self._script, data))
            self._script = None
        if self._kpi is not None and data.strip():
            self.kpis[self._kpi].append(data.strip())
        if self._in_td:
            self.table_cells[-1] += data


def parse(html: str) -> _PageParser:
    parser = _PageParser()
    parser.feed(html)
    return parser


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    """One report for the tests that only read it."""
    config, _ = fx.fixture_config(tmp_path_factory.mktemp("report") / "data")
    files = write_report(config, fx.WEEK)
    return config, files, files.page_path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def week(report) -> WeekData:
    """The week that report read, for the tests that only read it."""
    config, _, _ = report
    return load_week(config, fx.WEEK)


# --- what is read from the marts --------------------------------------------------------


def test_week_totals_are_the_marts_sums(week: WeekData) -> None:
    data = week
    totals = data.totals
    assert totals.gpu_hours == pytest.approx(fx.GPU_HOURS)
    assert totals.idle_gpu_hours == pytest.approx(fx.IDLE_GPU_HOURS)
    assert totals.waste_gpu_hours == pytest.approx(fx.WASTE_GPU_HOURS)
    assert totals.waste_usd == pytest.approx(fx.WASTE_USD)
    assert totals.energy_kwh == pytest.approx(fx.ENERGY_KWH)
    assert totals.avg_util_pct == pytest.approx(fx.MEAN_UTIL_PCT)
    assert totals.gpus_seen == fx.GPUS_SEEN
    assert totals.coverage_pct == pytest.approx(fx.COVERAGE_PCT)
    assert totals.thermal_events == fx.THERMAL_EVENTS
    assert totals.throttled_minutes == pytest.approx(fx.THROTTLED_MINUTES)
    assert data.previous.waste_usd == pytest.approx(fx.PREVIOUS_WASTE_USD)
    assert data.previous.gpu_hours == pytest.approx(fx.PREVIOUS_GPU_HOURS)


def test_a_previous_week_without_data_is_not_compared(tmp_path: Path) -> None:
    config, _ = fx.fixture_config(tmp_path)
    data = load_week(config, "2026-W44")  # 2026-W43 has no rows at all
    assert data.has_data and not data.previous_has_data
    assert all(kpi.previous is None for kpi in data.kpis)
    page = write_report(config, "2026-W44").page_path.read_text(encoding="utf-8")
    assert parse(page).kpis["waste_usd"][:3] == ["Idle waste", "$30", "no data for 2026-W43"]


def test_teams_sorted_by_waste_with_last_weeks_figures(week: WeekData) -> None:
    teams = week.teams.to_dicts()
    assert [t["team"] for t in teams[:2]] == [fx.EVIL_TEAM, "vision"]
    assert [t["waste_usd"] for t in teams] == sorted((t["waste_usd"] for t in teams), reverse=True)
    assert teams[0]["prev_waste_usd"] == pytest.approx(1000.0)
    nlp = next(t for t in teams if t["team"] == "nlp")
    assert nlp["prev_gpu_hours"] is None  # no row last week


def test_waste_is_this_weeks_per_job_most_expensive_first(week: WeekData) -> None:
    jobs = week.waste_jobs.to_dicts()
    assert [(j["team"], j["job_id"], j["waste_usd"]) for j in jobs] == [
        (fx.EVIL_TEAM, "j1", 1150.0),
        ("vision", "42", 40.0),
    ]
    assert jobs[0]["user"] == fx.EVIL_USER
    assert jobs[0]["gpu_list"] == [{"host": fx.EVIL_HOST, "gpu_index": 3}]
    assert (jobs[0]["gpus"], jobs[0]["episodes"], jobs[0]["waste_gpu_hours"]) == (1, 1, 10.0)


# An idle 8-GPU job (two hosts) whose episodes began 4 weeks before the week and ended in its
# Tuesday: 28 days of waste at $1 a GPU-hour each, of which the week holds 1 day.
LONG_START = dt.datetime(2026, 10, 13, tzinfo=dt.UTC)
LONG_END = dt.datetime(2026, 11, 10, tzinfo=dt.UTC)


def _add_long_job(data_dir: Path) -> None:
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as con:
        for index in range(8):
            host = "node-j1" if index < 6 else "node-j2"
            con.execute(
                "insert into idle_episodes values "
                "(?, ?, ?, 'H100', 'nlp', 'zoe', 'big-1', 'allocation', ?, ?, ?, ?, true, false, "
                "?, null)",
                [f"gpu-j{index}", host, index % 6, LONG_START, LONG_END, 28 * 86400.0,
                 28 * 1440, 28 * 24.0],
            )  # fmt: skip
        fx.add_run_pieces(con)
        # each episode's pieces: 27 days before the week, then 24 h on its Monday
        con.execute(
            """
            update run_pieces set seconds = 27 * 86400.0 where gpu_uuid like 'gpu-j%';
            insert into run_pieces
            select gpu_uuid, idle_run_start_ts, date '2026-11-09', 86400.0
            from run_pieces where gpu_uuid like 'gpu-j%';
            """
        )


def test_a_jobs_episodes_on_many_gpus_are_one_row_with_the_weeks_part(tmp_path: Path) -> None:
    config, _ = fx.fixture_config(tmp_path)
    _add_long_job(tmp_path)
    data = load_week(config, fx.WEEK)
    (job,) = [j for j in data.waste_jobs.iter_rows(named=True) if j["job_id"] == "big-1"]
    assert (job["gpus"], job["episodes"]) == (8, 8)
    # 8 GPUs x 24 h in the week at $1, not the episodes' 8 x 672 h
    assert job["waste_gpu_hours"] == pytest.approx(8 * 24.0)
    assert job["waste_usd"] == pytest.approx(8 * 24.0)
    assert (job["start_ts"], job["end_ts"]) == (LONG_START, LONG_END)
    page = write_report(config, fx.WEEK).page_path.read_text(encoding="utf-8")
    cells = parse(page).table_cells
    assert cells.count("big-1") == 1
    assert "node-j1:0-5; node-j2:0-1" in cells
    assert "$192" in cells and "$5,376" not in page
    assert "cost this week" in page and "GPU-hours this week" in page


def test_a_gpu_list_names_a_few_hosts_and_counts_the_rest() -> None:
    gpus = [{"host": f"node-{h}", "gpu_index": i} for h in "dcba" for i in (7, 0, 1, 2, 5)]
    assert format_gpus(gpus[:5]) == "node-d:0-2,5,7"
    assert (
        format_gpus(gpus)
        == "node-a:0-2,5,7; node-b:0-2,5,7; node-c:0-2,5,7; and 5 GPUs on 1 more host"
    )
    assert format_gpus(gpus, max_hosts=1).endswith("and 15 GPUs on 3 more hosts")
    assert format_gpus([]) == "–"


def test_thermal_hours_most_throttled_gpus_and_hosts_with_problems(week: WeekData) -> None:
    data = week
    hours = data.thermal_hours.select("host", "hour_start", "throttled_minutes").rows()
    thu = dt.datetime(2026, 11, 12)
    assert hours == [
        ("node-a", thu.replace(hour=14), 10.0),
        ("node-a", thu.replace(hour=15), 5.0),
        ("node-a", thu.replace(hour=16), 2.0),
        (fx.EVIL_HOST, dt.datetime(2026, 11, 9, 9), 1.0),
    ]
    assert set(data.thermal_hours["hosts_throttled"]) == {2}
    top = data.throttled_gpus.row(0, named=True)
    assert (top["gpu_uuid"], top["max_temp_gpu_c"], top["events"]) == ("gpu-v1", 91, 2)
    assert top["throttled_minutes"] == pytest.approx(15.0)
    assert top["hw_throttled_minutes"] == pytest.approx(10.0)
    assert data.throttled_gpus["gpu_uuid"].to_list() == ["gpu-v1", "gpu-v2", "gpu-x1"]
    problems = {h["host"]: h["problems"] for h in data.hosts_with_problems.iter_rows(named=True)}
    assert sorted(problems) == ["node-a", "node-b"]  # node-<1> reported all week
    assert problems["node-b"] == ["silent at the end of the week", "1 day without data"]
    # 45 of 2 x 23.98 GPU-hours observed on Wednesday
    assert problems["node-a"] == ["gaps on 1 day (lowest: 93.8% observed on Wed 11 Nov)"]
    assert data.quarantined_total == 1


def test_heatmap_hours_come_from_gpu_hourly(week: WeekData) -> None:
    """The local hour is the build's (gpu_hourly.hour; see the model tests), not the report's."""
    heatmap = week.heatmap.iter_rows(named=True)
    hours = {r["hour"] for r in heatmap if r["team"] == "vision"}
    assert hours == set(range(9, 17))


def test_missing_warehouse_is_a_clear_error(tmp_path: Path) -> None:
    fx.write_config(tmp_path)
    config = load_config(config_path=tmp_path / "gpufleet.toml")
    with pytest.raises(GpufleetError, match=r"warehouse\.duckdb: no warehouse.*gpufleet ingest"):
        write_report(config, fx.WEEK)
    assert not (tmp_path / "reports").exists()


def test_warehouse_without_marts_says_to_build(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "warehouse.duckdb")) as con:
        con.execute("create table samples(x int)")
    config = load_config(config_path=fx.write_config(tmp_path))
    with pytest.raises(GpufleetError, match=r"has no team_daily, .*run 'gpufleet build'"):
        write_report(config, fx.WEEK)


def test_report_leaves_the_warehouse_untouched_and_reads_beside_a_reader(tmp_path: Path) -> None:
    config, _ = fx.fixture_config(tmp_path)
    before = hashlib.sha256(config.warehouse_path.read_bytes()).hexdigest()
    # opened as the pipeline opens every connection: DuckDB refuses a second connection to a
    # file in one process with other settings (GPUFLEET_THREADS, which the suite sets)
    other_reader = connect(str(config.warehouse_path), read_only=True)
    try:
        write_report(config, fx.WEEK)
    finally:
        other_reader.close()
    assert hashlib.sha256(config.warehouse_path.read_bytes()).hexdigest() == before
    assert not Path(str(config.warehouse_path) + ".wal").exists()


# --- the page ---------------------------------------------------------------------------


def test_page_shows_the_fleet_in_numbers_with_changes(report) -> None:
    _, files, page = report
    kpis = parse(page).kpis
    assert kpis["waste_usd"][:3] == ["Idle waste", "$1,190", "+12%"]
    assert kpis["gpu_hours"][:3] == ["GPU-hours", "574", "+59%"]
    assert kpis["avg_util_pct"][:3] == ["Mean utilization", "45.0%", "-5.0 pts"]
    assert kpis["gpus_seen"][:2] == ["GPUs seen", "4"]
    assert kpis["thermal_events"][:3] == ["Thermal events", "4", "+300%"]
    assert kpis["coverage_pct"][:3] == ["Data coverage", "98.2%", "-1.8 pts"]
    assert set(kpis) == {
        "gpus_seen",
        "gpu_hours",
        "avg_util_pct",
        "idle_gpu_hours",
        "waste_gpu_hours",
        "waste_usd",
        "idle_capacity_gpu_hours",
        "idle_capacity_usd",
        "energy_kwh",
        "thermal_events",
        "throttled_minutes",
        "coverage_pct",
    }
    assert files.page_path == files.page_path.parent / "index.html"
    assert files.page_path.parent.name == fx.WEEK


def test_page_tables_show_episodes_thermal_and_data_quality(report) -> None:
    _, _, page = report
    cells = parse(page).table_cells
    assert "j1" in cells and fx.EVIL_USER in cells and f"{fx.EVIL_HOST}:3" in cells
    assert "gpu-v1" in cells  # the most throttled GPU
    assert any("silent at the end of the week" in cell for cell in cells)
    assert "raw/samples/date=2026-11-10/host=node-b/broken.parquet" in cells


def test_vega_is_inlined_once_and_every_chart_embedded(report) -> None:
    _, _, page = report
    scripts = parse(page).scripts
    assert len(scripts) == 3  # the libraries, the specs, the code that embeds them
    assert page.count("window.vegaEmbed=") == 1
    bundle = scripts[0][1]
    assert len(bundle) > 500_000 and "vegaEmbed" in bundle
    specs_attrs, specs_text = scripts[1]
    assert specs_attrs == {"type": "application/json", "id": "gpufleet-specs"}
    specs = json.loads(specs_text)
    assert list(specs) == [
        "utilization",
        "team-utilization",
        "busy-idle",
        "waste-trend",
        "thermal-heatmap",
    ]
    for key in specs:
        assert f'id="chart-{key}"' in page
    assert scripts[2][1].count("vegaEmbed(") == 1  # one call, made once per chart


def test_page_names_no_external_address(report) -> None:
    _, _, page = report
    parser = parse(page)
    for tag, name, value in parser.attributes:
        if name in {"src", "href", "action", "data", "poster"}:
            assert "://" not in value and not value.startswith("//"), (tag, name, value)
    assert not any(tag in {"link", "img", "iframe"} for tag, _, _ in parser.attributes)
    bundle = parser.scripts[0][1]
    outside_the_libraries = page.replace(bundle, "")
    assert not re.search(r"https?://", outside_the_libraries)
    # the libraries mention addresses only as XML namespaces and the (disabled) editor link
    for url in set(re.findall(r"https?://[^\s\"'`)]+", bundle)):
        assert url.startswith(
            ("http://www.w3.org/", "https://vega.github.io/", "https://github.com/")
        ), url


def test_names_are_escaped_in_the_page(report) -> None:
    _, _, page = report
    assert fx.EVIL_TEAM not in page
    assert fx.EVIL_USER not in page
    assert "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "node-&lt;1&gt;" in page
    parser = parse(page)
    # nothing closes a script early: exactly our three scripts, the specs parse as JSON
    assert page.count("</script>") == 3
    specs = json.loads(parser.scripts[1][1])
    assert fx.EVIL_TEAM in json.dumps(specs, ensure_ascii=False)
    assert fx.EVIL_TEAM in parser.table_cells


def test_script_json_cannot_close_a_script() -> None:
    text = script_json({"team": "</script><script>alert(1)</script>", "x": "a&b\u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"team": "</script><script>alert(1)</script>", "x": "a&b\u2028"}


def test_week_without_data_renders_a_clear_page(tmp_path: Path) -> None:
    config, _ = fx.fixture_config(tmp_path)
    files = write_report(config, "2026-W30")
    page = files.page_path.read_text(encoding="utf-8")
    assert not files.has_data
    assert "No data for week 2026-W30" in page
    assert "Weeks with data: 2026-W46, 2026-W45, 2026-W44" in page
    assert "<script" not in page  # no charts, so no libraries either
    assert files.subject == "gpufleet weekly report 2026-W30: no data"
    assert files.email_path.is_file()


# --- the charts, through their specs -----------------------------------------------------


def _values(spec: dict) -> list[dict]:
    """The rows a chart carries inline."""
    return spec["data"]["values"]


def _tooltips(spec: dict) -> list[str]:
    """The tooltip fields of a chart, of a faceted one's panels, or of each of their layers."""
    inner = spec.get("spec", spec)
    encodings = [layer.get("encoding", {}) for layer in inner.get("layer", [inner])]
    return [t["field"] for encoding in encodings for t in encoding.get("tooltip", [])]


def test_every_chart_has_inline_data_and_tooltips(week: WeekData) -> None:
    built = report_charts.build_charts(week)
    assert [c.key for c in built] == [
        "utilization",
        "team-utilization",
        "busy-idle",
        "waste-trend",
        "thermal-heatmap",
    ]
    for chart in built:
        spec = chart.spec()
        assert _values(spec), chart.key
        assert "url" not in spec["data"], chart.key
        assert _tooltips(spec), chart.key


def test_every_chart_of_the_report_and_the_team_emails_is_valid_vega_lite(
    report, week: WeekData
) -> None:
    """NamedChart.spec leaves out Altair's schema validation: every chart the report and the
    team emails make (the thermal heatmap capped too) is validated here, and its spec is the
    validated one."""
    config, data = report[0], week
    capped = data.thermal_hours.filter(pl.col("host_rank") == 1)
    charts = [
        *report_charts.build_charts(data),
        *(chart for team in load_team_weeks(config, fx.WEEK) for chart in team_charts(team)),
        report_charts.NamedChart("capped", "capped", report_charts.thermal_heatmap(capped, data)),
    ]
    assert {chart.key for chart in charts} == {
        "utilization", "team-utilization", "busy-idle", "waste-trend", "thermal-heatmap", "capped"
    }  # fmt: skip
    for chart in charts:
        assert chart.spec() == chart.chart.to_dict(validate=True), chart.key


def test_making_the_charts_checks_no_row_against_the_schema(
    week: WeekData, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Altair checked each chart's inline rows as it made the chart (0.15 s for a week of
    nine teams' hours): the test above checks them once, with the rest of the spec."""
    rows_checked: list[int] = []  # the rows of each chart's data checked on its own
    validate = schemapi.validate_jsonschema

    def counted(spec, schema, rootschema=None, **options):
        if schema == alt.Data._schema:
            rows_checked.append(len(spec["values"]))
        return validate(spec, schema, rootschema, **options)

    monkeypatch.setattr(schemapi, "validate_jsonschema", counted)
    charts = report_charts.build_charts(week)
    assert len(charts) == 5 and rows_checked == []
    assert alt.Data(values=[{"hour": 1}]) and rows_checked == [1]  # what Altair's own does


def test_busy_versus_idle_splits_each_teams_hours(week: WeekData) -> None:
    spec = report_charts.busy_versus_idle(week.teams).to_dict()
    rows = _values(spec)
    evil = {r["state"]: r["hours"] for r in rows if r["team"] == fx.EVIL_TEAM}
    assert evil == {"in use": 40.0, "idle, not counted as waste": 10.0, "idle waste": 50.0}
    assert spec["mark"]["type"] == "bar"
    assert spec["encoding"]["x"]["stack"] == "zero"


def test_heatmap_spec_is_day_by_hour_utilization(week: WeekData) -> None:
    heatmap = week.heatmap
    spec = report_charts.utilization_heatmap(heatmap).to_dict()
    assert spec["mark"]["type"] == "rect"
    assert spec["encoding"]["x"]["field"] == "hour"
    assert spec["encoding"]["y"]["field"] == "day"
    assert spec["encoding"]["color"]["scale"]["domain"] == [0, 100]
    rows = _values(spec)
    assert rows[0]["day"] == "2026-11-09 Mon"
    teams = report_charts.team_heatmaps(heatmap).to_dict()
    assert teams["facet"]["field"] == "team"


def test_waste_trend_highlights_a_team_from_the_legend(week: WeekData) -> None:
    spec = report_charts.waste_trend(week.waste_trend).to_dict()
    assert spec["params"][0]["bind"] == "legend"
    weeks = {r["iso_week"] for r in _values(spec)}
    assert weeks == {"2026-W44", "2026-W45", "2026-W46"}


def test_thermal_heatmap_is_throttled_minutes_by_host_and_hour_of_the_week(
    week: WeekData,
) -> None:
    data = week
    spec = report_charts.thermal_heatmap(data.thermal_hours, data).to_dict()
    assert spec["mark"]["type"] == "rect"
    assert spec["encoding"]["y"]["field"] == "host"
    assert spec["encoding"]["y"]["sort"] == ["node-a", fx.EVIL_HOST]  # the most throttled first
    x = spec["encoding"]["x"]
    assert (x["field"], x["timeUnit"]) == ("hour_start", "yearmonthdatehours")
    assert x["scale"]["domain"] == ["2026-11-09T00:00:00", "2026-11-16T00:00:00"]
    assert spec["encoding"]["color"]["field"] == "throttled_minutes"
    rows = _values(spec)
    assert rows[0] == {
        "host": "node-a",
        "hour_start": "2026-11-12T14:00:00",
        "throttled_minutes": 10.0,
        "gpus_throttled": 1,
    }
    assert len(rows) == 4  # one cell per throttled hour: no circle per event


def test_a_capped_thermal_heatmap_says_how_many_hosts_it_shows(week: WeekData) -> None:
    data = week
    capped = data.thermal_hours.filter(pl.col("host_rank") == 1)
    title = report_charts.thermal_heatmap(capped, data).to_dict()["title"]
    assert title["subtitle"] == "the 1 of 2 hosts that throttled most"
    uncapped = report_charts.thermal_heatmap(data.thermal_hours, data).to_dict()
    assert uncapped["title"] == "Throttled minutes by host and hour"


def test_the_thermal_chart_stops_at_the_weeks_end(week: WeekData) -> None:
    """Its axis ticks the week's seven midnights, Mon 09 to Sun 15 Nov, and no next Monday."""
    data = week
    x = report_charts.thermal_heatmap(data.thermal_hours, data).to_dict()["encoding"]["x"]
    assert x["scale"]["domain"][1] == "2026-11-16T00:00:00"
    assert x["scale"]["nice"] is False
    assert [(tick["month"], tick["date"]) for tick in x["axis"]["values"]] == [
        (11, day) for day in range(9, 16)
    ]


def test_throttling_is_shown_once_as_a_table_not_again_as_a_chart(report) -> None:
    """The most throttled GPUs were a bar chart and a table of the same ten GPUs: the table
    stays (it has the UUIDs, HW slowdowns, temperatures and clocks), the chart goes."""
    _, _, page = report
    thermal = page[page.index('<section id="thermal">') :]
    thermal = thermal[: thermal.index("</section>")]
    assert 'data-chart="thermal-heatmap"' in thermal
    assert thermal.count("data-chart=") == 1
    assert thermal.count("Most throttled GPUs") == 1
    rows = parse(thermal).table_cells
    # gpu-v1 (node-a): 15 min throttled, 10 of them in events with a HW slowdown
    assert rows[:5] == ["node-a", "0", "gpu-v1", "15.0", "10.0"]


def test_team_heatmaps_fill_each_panel_and_draw_no_axes_in_empty_places(week: WeekData) -> None:
    heatmap = week.heatmap
    spec = report_charts.team_heatmaps(heatmap).to_dict()
    assert spec["resolve"]["axis"] == {"x": "independent", "y": "independent"}
    rows = _values(spec)
    days = heatmap["day"].n_unique()
    teams = heatmap["team"].n_unique()
    assert len(rows) == teams * days * 24  # every hour of every day with data, per team
    nlp = [r for r in rows if r["team"] == "nlp"]
    assert sum(1 for r in nlp if r["util_hours"] > 0) == 0  # nlp never measured: all grey
    assert {r["gpu_hours"] for r in nlp if r["hour"] != 12} == {0.0}
    grid, utilization = spec["spec"]["layer"]
    assert grid["mark"]["color"] == report_charts.NO_UTILIZATION
    assert utilization["transform"][0] == {"filter": "datum.util_hours > 0"}


# --- formatting ---------------------------------------------------------------------------


def test_formatting_and_changes() -> None:
    assert format_value(1234.4, "usd") == "$1,234"
    assert format_value(None, "pct") == "–"
    assert change(45.0, 50.0, "pct") == ("-5.0 pts", -5.0)
    assert change(1190.0, 1060.0, "usd")[0] == "+12%"
    assert change(5.0, 0.0, "count")[0] == "new"
    assert change(5.0, None, "count")[0] == "no data last week"
    assert format_duration(36000) == "10 h 00 min"
    assert format_duration(2700) == "45 min"


# --- through the CLI and Prefect -----------------------------------------------------------


def test_cli_report_writes_the_page_and_prints_the_paths(
    tmp_path: Path, prefect_harness: None, capsys: pytest.CaptureFixture[str]
) -> None:
    _, config_path = fx.fixture_config(tmp_path)
    assert main(["--config", str(config_path), "report", "--week", fx.WEEK]) == 0
    out = capsys.readouterr().out
    page = tmp_path / "reports" / fx.WEEK / "index.html"
    assert f"page:  {page}" in out
    assert f"email: {page.parent / 'report.eml'}" in out
    assert "$1,190 idle waste" in out
    assert page.is_file()


def test_cli_report_without_a_warehouse_fails_with_one_line(
    tmp_path: Path, prefect_harness: None, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path = fx.write_config(tmp_path)
    assert main(["--config", str(config_path), "report", "--week", fx.WEEK]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("gpufleet: error: ")
    assert "no warehouse yet" in err[-1]


@pytest.fixture
def without_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command as run without a Prefect server: the engine, and its own output alone."""
    monkeypatch.setattr("gpufleet.flows.server.prefect_server_configured", lambda: False)


def test_cli_report_of_a_week_that_has_not_begun_fails_and_writes_nothing(
    tmp_path: Path, without_prefect: None, capsys: pytest.CaptureFixture[str]
) -> None:
    _, config_path = fx.fixture_config(tmp_path)
    week = week_label(dt.datetime.now(dt.UTC).date() + dt.timedelta(days=14))
    args = ["--config", str(config_path), "report", "--week", week, "--per-team"]
    assert main(args) == 1
    output = capsys.readouterr()
    assert output.out == ""
    err = output.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpufleet: error: week {week} has not begun")
    assert not (tmp_path / "reports").exists()
    with pytest.raises(GpufleetError, match=r"2026-W47 has not begun .*today is Sun 15 Nov 2026"):
        write_report(
            load_config(config_path=config_path),
            "2026-W47",
            now=dt.datetime(2026, 11, 15, 12, tzinfo=dt.UTC),
        )
    # the week under way is reported, as far as it goes
    write_report(
        load_config(config_path=config_path),
        fx.WEEK,
        now=dt.datetime(2026, 11, 9, 0, 1, tzinfo=dt.UTC),
    )


def test_cli_report_of_a_past_week_without_samples_says_so_in_one_line(
    tmp_path: Path, without_prefect: None, capsys: pytest.CaptureFixture[str]
) -> None:
    _, config_path = fx.fixture_config(tmp_path)
    assert main(["--config", str(config_path), "report", "--week", "2026-W30"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "report for 2026-W30: no samples in 2026-W30: the page and email say so "
        "(weeks with data: 2026-W46, 2026-W45, 2026-W44)"
    )
    assert [line for line in out if "no data" in line or "no samples" in line] == [out[0]]


def test_report_flow_publishes_the_summary_artifact(tmp_path: Path, prefect_harness: None) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        ArtifactFilterKey,
    )

    from gpufleet.flows.report import ARTIFACT_KEY, report_flow

    _, config_path = fx.fixture_config(tmp_path)
    result = report_flow(data_dir=str(tmp_path), config_path=str(config_path), week=fx.WEEK)
    assert result.page_path.is_file()
    (run,) = own_flow_runs(tmp_path, "weekly-report")
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[ARTIFACT_KEY]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]),
            )
        )
    assert artifacts, "no artifact with the report's key"
    latest = max(artifacts, key=lambda a: str(a.created))
    assert latest.type == "markdown"
    assert "gpufleet weekly report 2026-W46: $1,190 idle waste" in str(latest.data)
    assert "&lt;script&gt;" in str(latest.data)  # the team name shows as text there too


def test_report_flow_rejects_a_bad_week(tmp_path: Path, prefect_harness: None) -> None:
    from gpufleet.flows.report import report_flow

    _, config_path = fx.fixture_config(tmp_path)
    with pytest.raises(GpufleetError, match="not an ISO week"):
        report_flow(data_dir=str(tmp_path), config_path=str(config_path), week="2026-W60")


# --- a report a council acts on (#57 item 5) --------------------------------------------------


def test_teams_show_the_gpus_used_and_the_gpus_held_on_average(report, week: WeekData) -> None:
    """vision used 4 GPUs at some time of the week, but its 300 GPU-hours over the week's
    168 hours are 1.8 GPUs held on average."""
    held = dict(week.teams.select("team", "avg_gpus").rows())
    assert held["vision"] == pytest.approx(300 / 168)
    assert held[fx.EVIL_TEAM] == pytest.approx(100 / 168)
    _, _, page = report
    teams = page[page.index('<table class="teams">') :]
    teams = teams[: teams.index("</table>")]
    assert '<th class="num">GPUs used</th><th class="num">GPUs held on average</th>' in teams
    cells = parse(teams).table_cells
    assert cells[cells.index("vision") : cells.index("vision") + 4] == [
        "vision",
        "4",
        "1.8",
        "300.0",
    ]


def test_idle_capacity_is_a_cost_line_of_its_own_and_no_teams_waste(report, week: WeekData) -> None:
    """The 24 GPU-hours of (unallocated) GPUs at $2.50 are $60 of idle capacity: a card, a
    part of the subject, and not in the waste ($1,190 stays the teams' waste)."""
    data = week
    assert data.totals.idle_capacity_gpu_hours == pytest.approx(fx.IDLE_CAPACITY_GPU_HOURS)
    assert data.totals.idle_capacity_usd == pytest.approx(fx.IDLE_CAPACITY_USD)
    assert data.totals.waste_usd == pytest.approx(fx.WASTE_USD)
    _, files, page = report
    kpis = parse(page).kpis
    assert kpis["idle_capacity_usd"][:2] == ["Idle capacity", "$60"]
    assert kpis["idle_capacity_gpu_hours"][:2] == ["Unallocated GPU-hours", "24.0"]
    assert kpis["waste_usd"][:2] == ["Idle waste", "$1,190"]
    assert files.subject == (
        "gpufleet weekly report 2026-W46: $1,190 idle waste, "
        "$60 idle capacity (24.0 unallocated GPU-hours)"
    )
    unallocated = data.teams.filter(pl.col("team") == "(unallocated)").row(0, named=True)
    assert unallocated["waste_usd"] == 0.0


def _add_host_owned_waste(data_dir: Path) -> None:
    """nlp's node-b GPU, which nlp has through hosts.csv, idle for 6 hours on Thursday."""
    thu = fx.MONDAY + dt.timedelta(days=3)
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as con:
        con.execute(
            "insert into idle_episodes values ('gpu-n1', 'node-b', 1, ?, 'nlp', null, null, "
            "'host', ?, ?, 21600.0, 720, true, false, 60.0, null)",
            [fx.H100, fx._ts(thu, 0), fx._ts(thu, 6)],
        )
        fx.add_run_pieces(con)


def test_waste_of_a_host_owned_through_hosts_csv_says_who_owns_it_and_why(tmp_path: Path) -> None:
    config, _ = fx.fixture_config(tmp_path)
    _add_host_owned_waste(tmp_path)
    jobs = load_week(config, fx.WEEK).waste_jobs
    row = jobs.filter(pl.col("team") == "nlp").row(0, named=True)
    assert (row["user"], row["job_id"], row["is_host_owned"]) == (None, None, True)
    assert row["waste_usd"] == pytest.approx(60.0)
    assert not jobs.filter(pl.col("team") != "nlp")["is_host_owned"].any()
    files = write_report(config, fx.WEEK)
    cells = parse(files.page_path.read_text(encoding="utf-8")).table_cells
    assert "owned by team nlp through hosts.csv" in cells
    text = read_message(files.email_path).get_body(preferencelist=("plain",))
    assert text is not None
    assert (
        "$60  6.0 GPU-hours  team nlp, no user or job: owned by team nlp through hosts.csv, "
        "1 GPU (node-b:1)"
    ) in text.get_content()


def _drop_host_days(data_dir: Path, *days: dt.date) -> None:
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as con:
        con.execute("delete from host_daily where list_contains(?, day)", [list(days)])


def test_a_partial_week_gets_a_banner_and_no_changes(tmp_path: Path) -> None:
    """Samples from Tuesday on, none on Thursday: 144 - 24 = 120 hours covered; vision's 300
    GPU-hours are 2.5 GPUs held over them; no "+59%" against a whole week."""
    config, _ = fx.fixture_config(tmp_path)
    _drop_host_days(tmp_path, fx.MONDAY, fx.MONDAY + dt.timedelta(days=3))
    data = load_week(config, fx.WEEK)
    assert data.is_partial and not data.is_compared
    assert data.covered_hours == pytest.approx(120.0)
    assert dict(data.teams.select("team", "avg_gpus").rows())["vision"] == pytest.approx(2.5)
    assert all(kpi.previous is None for kpi in data.kpis)
    files = write_report(config, fx.WEEK)
    page = files.page_path.read_text(encoding="utf-8")
    banner = (
        "Partial week: samples from Tue 10 Nov 00:00 to Sun 15 Nov 23:59 (UTC) only, none on "
        "Thu 12 Nov. The figures cover those 120.0 hours, and a team's GPUs held on average "
        "are over them; no change against 2026-W45 is shown."
    )
    assert banner in " ".join(unescape(page).split())
    kpis = parse(page).kpis
    assert kpis["gpu_hours"][:3] == ["GPU-hours", "574", "not compared: partial week"]
    assert "+59%" not in page and "+12%" not in page
    teams = page[page.index('<table class="teams">') :]
    cells = parse(teams[: teams.index("</table>")]).table_cells
    row = cells[cells.index("vision") :][:11]
    assert row[4] == row[6] == row[10] == "–"  # the three change columns
    assert files.subject.endswith("(partial week)")
    text = read_message(files.email_path).get_body(preferencelist=("plain",))
    assert text is not None and banner in " ".join(text.get_content().split())


def test_a_partial_previous_week_is_not_compared_either(tmp_path: Path) -> None:
    config, _ = fx.fixture_config(tmp_path)
    saturday = fx.MONDAY - dt.timedelta(days=2)
    _drop_host_days(tmp_path, saturday, saturday + dt.timedelta(days=1))
    data = load_week(config, fx.WEEK)
    assert not data.is_partial and data.previous_is_partial and not data.is_compared
    page = write_report(config, fx.WEEK).page_path.read_text(encoding="utf-8")
    assert "2026-W45 has samples for part of that week only: no change against it is shown." in (
        " ".join(page.split())
    )
    assert parse(page).kpis["waste_usd"][:3] == [
        "Idle waste",
        "$1,190",
        "not compared: partial week",
    ]


def test_throttling_names_the_host_that_holds_most_throttled_gpus(report) -> None:
    """gpu-v1 and gpu-v2 on node-a, gpu-x1 on node-<1>: 2 of the 3 throttled GPUs."""
    _, files, page = report
    assert "2 of 3 throttled GPUs are on host node-a" in " ".join(page.split())
    text = read_message(files.email_path).get_body(preferencelist=("plain",))
    assert text is not None and "2 of 3 throttled GPUs are on host node-a." in text.get_content()


def _hosts(names: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {"cluster": [None] * len(names), "host": names}, schema_overrides={"cluster": pl.String}
    )


def test_throttling_names_the_rack_of_hosts_named_alike() -> None:
    fleet = _hosts([f"gpu-r{rack:02d}n{n:02d}" for rack in (1, 2, 3) for n in (1, 2, 3, 4)])
    throttled = _hosts(["gpu-r02n01", "gpu-r02n02", "gpu-r02n03", "gpu-r02n04", "gpu-r03n01"])
    throttled = throttled.with_columns(gpus_throttled=pl.Series([8, 8, 7, 8, 2]))
    group = throttled_group(throttled, fleet)
    assert group == HostGroup(
        name="gpu-r02n*", hosts=4, gpus_throttled=31, all_gpus_throttled=33, is_host=False
    )
    # a name that all the fleet's hosts share says nothing: not named
    nodes = _hosts(["node01", "node02", "node03"])
    spread = nodes.with_columns(gpus_throttled=pl.Series([2, 2, 2]))
    assert throttled_group(spread, nodes) is None
    # no group holds more than half of them: none named
    halves = _hosts(["gpu-r01n01", "gpu-r02n01"]).with_columns(gpus_throttled=pl.Series([3, 3]))
    assert throttled_group(halves, fleet) is None


def test_a_host_that_reported_for_one_hour_has_one_day_and_little_of_the_week(
    tmp_path: Path,
) -> None:
    """node-c reported for one hour on Tuesday: 1 day with data, 1 of its 168 GPU-hours
    (0.6%), not "lowest daily coverage 100%" (its one hour covers its own span in full)."""
    config, _ = fx.fixture_config(tmp_path)
    tue = fx.MONDAY + dt.timedelta(days=1)
    with duckdb.connect(str(tmp_path / "warehouse.duckdb")) as con:
        con.execute(
            "insert into host_daily values (?, 'node-c', 1, 120, 1.0, ?, ?)",
            [tue, fx._ts(tue, 10), fx._ts(tue, 10, 59)],
        )
    data = load_week(config, fx.WEEK)
    host = data.hosts.filter(pl.col("host") == "node-c").row(0, named=True)
    assert host["days_reporting"] == 1
    assert host["week_coverage_pct"] == pytest.approx(100 / 168)
    page = write_report(config, fx.WEEK).page_path.read_text(encoding="utf-8")
    quality = page[page.index('<section id="data-quality">') :]
    cells = parse(quality).table_cells
    assert cells[cells.index("node-c") : cells.index("node-c") + 4] == ["node-c", "1", "1", "0.6%"]
    assert "lowest daily coverage" not in quality and "coverage of the week" in quality


def test_the_sites_block_of_the_text_email_has_column_headers(week: WeekData) -> None:
    sites = pl.DataFrame(
        {"cluster": ["sfo", "nyc"], "gpu_hours": [100.0, 50.0], "avg_util_pct": [50.0, 20.0],
         "waste_gpu_hours": [10.0, 5.0], "waste_usd": [25.0, 12.5]}
    )  # fmt: skip
    data = dataclasses.replace(week, sites=sites)
    text = render_email_text(data, PageLink(url=None, path="index.html"))
    block = text[text.index("SITES") :].splitlines()
    assert block[1].split() == ["site", "GPU-hours", "util", "waste", "hours", "waste"]
    assert block[2].split() == ["sfo", "100.0", "50.0%", "10.0", "$25"]
