"""The weekly report's "Least efficient jobs": which jobs of `job_efficiency` a week lists, in
what order, how they are shown (names escaped), and what it says when there are none."""

from __future__ import annotations

import datetime as dt
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest

import gpufleet
from gpufleet.reports.data import load_week
from gpufleet.reports.jobs import MIN_GPU_HOURS, TOP_JOBS
from gpufleet.reports.mail import read_message
from gpufleet.reports.weekly import ReportFiles, write_report
from tests import report_fixtures as fx

pytestmark = pytest.mark.fleet

GIB = 1 << 30
A100 = "NVIDIA A100-SXM4-80GB"
EVIL_ACCOUNT = "<img src=x onerror=alert(1)>"

# job_efficiency's columns, in their order, with the types the mart gives them.
JOB_EFFICIENCY_DDL = """
create table job_efficiency (
    job_id varchar, gpu_name varchar, cluster varchar, "user" varchar, team varchar,
    account varchar, "partition" varchar, state varchar, start_ts timestamptz,
    end_ts timestamptz, gpus bigint, alloc_gpu_hours double, gpu_hours double,
    busy_gpu_hours double, avg_util_pct double, idle_gpu_hours double, waste_gpu_hours double,
    waste_usd double, max_mem_used_bytes bigint, mem_total_bytes bigint, energy_kwh double
)
"""


def _at(days: float) -> dt.datetime:
    """`days` after the fixture week's Monday, 00:00 UTC."""
    return dt.datetime.combine(fx.MONDAY, dt.time(), tzinfo=dt.UTC) + dt.timedelta(days=days)


def job(
    job_id: str,
    waste_usd: float,
    idle_gpu_hours: float,
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    user: str | None = "alice",
    team: str = "vision",
    account: str | None = "vision",
    partition: str | None = "gpu",
    state: str | None = "COMPLETED",
    cluster: str | None = "alpha",
    gpu_name: str = fx.H100,
    gpus: int = 1,
    gpu_hours: float = 10.0,
    busy_gpu_hours: float = 2.0,
    max_mem: int = 10 * GIB,
) -> tuple[object, ...]:
    """One row of job_efficiency; by default a job that ran on the week's Tuesday."""
    return (
        job_id, gpu_name, cluster, user, team, account, partition, state,
        start or _at(1), end if end is not None or start is not None else _at(1.5),
        gpus, gpu_hours, gpu_hours, busy_gpu_hours, 100 * busy_gpu_hours / gpu_hours,
        idle_gpu_hours, idle_gpu_hours, waste_usd, max_mem, 80 * GIB, 1.0,
    )  # fmt: skip


def week_jobs() -> list[tuple[object, ...]]:
    """Jobs around the fixture week: ten listed, five that ran in it but rank lower, and
    five that must not be listed at all (outside the week, or too short)."""
    return [
        # equal waste: the one with more idle GPU-hours first
        job(
            "101",
            500.0,
            40.0,
            user=fx.EVIL_USER,
            team=fx.EVIL_TEAM,
            account=EVIL_ACCOUNT,
            state="FAILED",
            gpus=4,
            gpu_hours=48.0,
            busy_gpu_hours=8.0,
            max_mem=70 * GIB,
        ),
        job("102", 500.0, 60.0),
        # began weeks before and still runs: it ran in the week
        job("103", 300.0, 200.0, start=_at(-40), end=None, state="RUNNING"),
        # one job on two GPU models: a row for each
        job("107", 200.0, 20.0, gpus=2),
        job("107", 100.0, 10.0, gpu_name=A100, gpus=2),
        # a job known only by its processes' job id: no Slurm record
        job("116", 18.0, 9.0, user=None, account=None, partition=None, state=None, cluster=None),
        *(job(str(number), float(number - 100), 1.0) for number in range(115, 108, -1)),
        # never listed: ended before the week (or just as it began), began after it, too short
        job("104", 9999.0, 99.0, start=_at(-3), end=_at(-1)),
        job("117", 9999.0, 99.0, start=_at(-3), end=_at(0)),
        job("105", 9999.0, 99.0, start=_at(7), end=_at(8)),
        job("106", 9999.0, 99.0, gpu_hours=MIN_GPU_HOURS / 2, busy_gpu_hours=0.1),
    ]


LISTED = [
    ("102", fx.H100), ("101", fx.H100), ("103", fx.H100), ("107", fx.H100), ("107", A100),
    ("116", fx.H100), ("115", fx.H100), ("114", fx.H100), ("113", fx.H100), ("112", fx.H100),
]  # fmt: skip


def add_job_efficiency(data_dir: Path, rows: list[tuple[object, ...]]) -> None:
    """A `job_efficiency` table with `rows` in the hand-made warehouse of `data_dir`."""
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as con:
        con.execute(JOB_EFFICIENCY_DDL)
        if rows:
            marks = ", ".join("?" for _ in rows[0])
            con.executemany(f"insert into job_efficiency values ({marks})", rows)


class _JobsTable(HTMLParser):
    """The text of each cell of each row of the page's jobs table."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._inside = False
        self._cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("class", "jobs") in attrs:
            self._inside = True
        elif self._inside and tag == "tr":
            self.rows.append([])
        elif self._inside and tag == "td":
            self._cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._inside = False
        elif tag == "td":
            self._cell = False

    def handle_data(self, data: str) -> None:
        if self._inside and self._cell:
            self.rows[-1][-1] += data


def table_rows(html: str) -> list[list[str]]:
    parser = _JobsTable()
    parser.feed(html)
    return [row for row in parser.rows if row]  # the header row has no <td>


def section(html: str) -> str:
    """The HTML of the page's jobs section."""
    start = html.index('<section id="jobs">')
    return html[start : html.index("</section>", start)]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory):
    """The hand-made warehouse with the week's jobs, for the tests that only read it."""
    data_dir = tmp_path_factory.mktemp("jobs")
    config, _ = fx.fixture_config(data_dir)
    add_job_efficiency(data_dir, week_jobs())
    return config


@pytest.fixture(scope="module")
def report(config) -> ReportFiles:
    """Its report, written once."""
    return write_report(config, fx.WEEK)


def test_the_weeks_jobs_by_waste_then_idle_hours_top_ten(config) -> None:
    jobs = load_week(config, fx.WEEK).least_efficient_jobs
    assert jobs is not None and jobs.height == TOP_JOBS
    assert list(zip(jobs["job_id"], jobs["gpu_name"], strict=True)) == LISTED
    first = jobs.row(1, named=True)
    assert (first["user"], first["team"], first["account"]) == (
        fx.EVIL_USER,
        fx.EVIL_TEAM,
        EVIL_ACCOUNT,
    )
    assert first["start_ts"].tzinfo is not None  # shown in the configured zone


def test_the_section_shows_each_jobs_columns_formatted(report: ReportFiles) -> None:
    page = report.page_path.read_text(encoding="utf-8")
    rows = table_rows(section(page))
    assert [(row[0], row[1]) for row in rows] == LISTED  # the GPU model in its own column
    assert rows[1] == [
        "101",
        fx.H100,
        "alpha",
        fx.EVIL_USER,
        fx.EVIL_TEAM,
        EVIL_ACCOUNT,
        "gpu",
        "FAILED",
        "4",
        "48.0",
        "16.7%",
        "40.0",
        "$500",
        "70.0 of 80 GiB (88%)",
    ]
    assert rows[4][:3] == ["107", A100, "alpha"]
    # no Slurm record: the unknown columns are dashes
    assert rows[5][:8] == ["116", fx.H100, "–", "–", "vision", "–", "–", "–"]
    assert "$9,999" not in section(page)


def test_hostile_names_are_escaped_in_the_section(report: ReportFiles) -> None:
    html = section(report.page_path.read_text(encoding="utf-8"))
    for raw in (fx.EVIL_USER, fx.EVIL_TEAM, EVIL_ACCOUNT):
        assert raw not in html
    assert "&lt;/script&gt;&lt;b&gt;bob&lt;/b&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_the_email_has_the_section_in_html_and_text(report: ReportFiles) -> None:
    message = read_message(report.email_path)
    html_part = message.get_body(preferencelist=("html",))
    text_part = message.get_body(preferencelist=("plain",))
    assert html_part is not None and text_part is not None
    html, text = html_part.get_content(), text_part.get_content()
    assert [row[0] for row in table_rows(section(html))][:3] == ["102", "101", "103"]
    assert fx.EVIL_USER not in html
    jobs_text = text[text.index("LEAST EFFICIENT JOBS") : text.index("THERMAL")]
    lines = [line.strip() for line in jobs_text.splitlines()[1:] if line.strip()]
    assert len(lines) == TOP_JOBS
    assert lines[1].startswith(f"$500  job 101 ({fx.H100}), user {fx.EVIL_USER}, team ")
    assert "4 GPUs, 48.0 GPU-hours, 16.7% utilization, 40.0 idle GPU-hours" in lines[1]
    assert lines[1].endswith("peak memory 70.0 of 80 GiB (88%)")
    assert "user -, team vision, account -, partition -, state -: 1 GPU, 10.0 GPU-hours" in lines[5]


def test_a_week_without_jobs_says_so(tmp_path: Path) -> None:
    config, _ = fx.fixture_config(tmp_path)
    add_job_efficiency(tmp_path, [job("104", 9999.0, 99.0, start=_at(-3), end=_at(-1))])
    files = write_report(config, fx.WEEK)
    html = section(files.page_path.read_text(encoding="utf-8"))
    assert "No job with at least 1 GPU-hour ran this week." in " ".join(html.split())
    assert not table_rows(html)
    text = read_message(files.email_path).get_body(preferencelist=("plain",))
    assert text is not None
    assert "No job with at least 1 GPU-hour ran this week." in text.get_content()


def test_a_warehouse_built_before_job_efficiency_says_to_build(tmp_path: Path) -> None:
    config, _ = fx.fixture_config(tmp_path)
    assert load_week(config, fx.WEEK).least_efficient_jobs is None
    html = section(write_report(config, fx.WEEK).page_path.read_text(encoding="utf-8"))
    assert "no <code>job_efficiency</code> table yet" in html


# --- end to end: sample files and allocations, ingested and built by the real pipeline ------

MONDAY = dt.date(2026, 11, 16)  # 2026-W47
E2E_WEEK = "2026-W47"
ALLOCATIONS_CSV = (
    "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
    "7001,alice,,node-a,0,2026-11-16T08:00:00Z,2026-11-16T12:00:00Z\n"
    "7001,alice,,node-a,1,2026-11-16T08:00:00Z,2026-11-16T12:00:00Z\n"
    "7003,alice,,node-a,2,2026-11-16T08:00:00Z,2026-11-16T08:30:00Z\n"
)
SLURM_JOBS_CSV = (
    "job_id,cluster,user,account,partition,state,team,gpus,hosts,start_ts,end_ts\n"
    "7001,alpha,alice,vision-acct,gpu,COMPLETED,vision,2,node-a,"
    "2026-11-16T08:00:00Z,2026-11-16T12:00:00Z\n"
)


def _minutes(
    gpu: str,
    index: int,
    host: str,
    start_h: float,
    end_h: float,
    util: float,
    mem_gib: int,
    process: tuple[str, str] | None = None,
) -> list[dict[str, object]]:
    """One sample a minute in (start, end] hours of MONDAY, UTC."""
    first = dt.datetime.combine(MONDAY, dt.time(), tzinfo=dt.UTC)
    rows: list[dict[str, object]] = []
    for minute in range(int(start_h * 60) + 1, int(end_h * 60) + 1):
        rows.append({
            "ts": first + dt.timedelta(minutes=minute), "interval_s": 60.0, "host": host,
            "gpu_index": index, "gpu_uuid": gpu, "gpu_name": fx.H100, "status": "ok",
            "gpu_util_pct": util, "power_w": 300.0, "mem_used_bytes": mem_gib * GIB,
            "mem_total_bytes": 80 * GIB,
            "processes": [] if process is None else [
                {"pid": 7, "user": process[0], "used_mem_bytes": mem_gib * GIB,
                 "job_id": process[1]}
            ],
        })  # fmt: skip
    return rows


def _build_fleet(data_dir: Path, *, with_jobs: bool):
    from gpufleet.warehouse.build import build
    from gpufleet.warehouse.ingest import ingest
    from tests.notify_fixtures import write_config, write_samples

    data_dir.mkdir(parents=True)
    config = write_config(data_dir, notify="")
    ref = data_dir / "ref"
    ref.mkdir()
    (ref / "users.csv").write_text("user,team\nalice,vision\nbob,nlp\n", encoding="utf-8")
    (ref / "prices.csv").write_text("gpu_glob,usd_per_gpu_hour\n*H100*,2.5\n", encoding="utf-8")
    bob = ("bob", "7002") if with_jobs else None
    rows = [
        # 7001: two allocated GPUs, 08:00-12:00; GPU 0 busy for two hours, GPU 1 never
        *_minutes("GPU-a0", 0, "node-a", 8, 10, 90.0, 40),
        *_minutes("GPU-a0", 0, "node-a", 10, 12, 2.0, 1),
        *_minutes("GPU-a1", 1, "node-a", 8, 12, 2.0, 2),
        # 7003: half an hour, idle: under the listed minimum of GPU-hours
        *_minutes("GPU-a2", 2, "node-a", 8, 8.5, 1.0, 1),
        # 7002: known by its process only, busy
        *_minutes("GPU-b0", 0, "node-b", 9, 11, 90.0, 20, process=bob),
    ]
    write_samples(data_dir, "fleet", rows)
    if with_jobs:
        for folder, name, text in (
            ("allocations", "slurm-2026-11-16.csv", ALLOCATIONS_CSV),
            ("jobs", "slurm-alpha-2026-11-16.csv", SLURM_JOBS_CSV),
        ):
            (data_dir / "raw" / folder).mkdir(parents=True, exist_ok=True)
            (data_dir / "raw" / folder / name).write_text(text, encoding="utf-8")
    ingest(config, compact=False)
    build(config)
    return config


def test_a_built_warehouse_lists_its_jobs_with_hand_computed_figures(tmp_path: Path) -> None:
    config = _build_fleet(tmp_path / "data", with_jobs=True)
    jobs = load_week(config, E2E_WEEK).least_efficient_jobs
    assert jobs is not None
    assert jobs["job_id"].to_list() == ["7001", "7002"]  # 7003 has half a GPU-hour
    first, second = jobs.to_dicts()
    assert (first["user"], first["team"], first["account"], first["partition"]) == (
        "alice",
        "vision",
        "vision-acct",
        "gpu",
    )
    assert (first["state"], first["cluster"], first["gpus"]) == ("COMPLETED", "alpha", 2)
    # 2 GPUs x 4 h; busy 2 h x 90% + 6 h x 2%; idle and waste 2 h + 4 h at $2.50
    assert first["gpu_hours"] == pytest.approx(8.0)
    assert first["avg_util_pct"] == pytest.approx(100 * (1.8 + 0.12) / 8)
    assert first["idle_gpu_hours"] == pytest.approx(6.0)
    assert first["waste_usd"] == pytest.approx(15.0)
    assert (first["max_mem_used_bytes"], first["mem_total_bytes"]) == (40 * GIB, 80 * GIB)
    assert (second["user"], second["team"], second["gpus"]) == ("bob", "nlp", 1)
    assert (second["gpu_hours"], second["waste_usd"]) == (pytest.approx(2.0), 0.0)

    # the analyst reads the same view through its sandbox
    analyst = gpufleet.open(config.data_dir).jobs(E2E_WEEK, cluster="alpha")
    assert analyst["job_id"].to_list() == ["7001"]
    assert analyst["waste_usd"].to_list() == [pytest.approx(15.0)]
    assert sorted(gpufleet.open(config.data_dir).jobs(E2E_WEEK)["job_id"]) == [
        "7001", "7002", "7003"
    ]  # fmt: skip

    rows = table_rows(section(write_report(config, E2E_WEEK).page_path.read_text("utf-8")))
    assert rows == [
        ["7001", fx.H100, "alpha", "alice", "vision", "vision-acct", "gpu", "COMPLETED", "2",
         "8.0", "24.0%", "6.0", "$15", "40.0 of 80 GiB (50%)"],
        ["7002", fx.H100, "–", "bob", "nlp", "–", "–", "–", "1", "2.0", "90.0%", "0.0", "$0",
         "20.0 of 80 GiB (25%)"],
    ]  # fmt: skip


def test_a_fleet_without_jobs_says_so(tmp_path: Path) -> None:
    config = _build_fleet(tmp_path / "data", with_jobs=False)
    jobs = load_week(config, E2E_WEEK).least_efficient_jobs
    assert jobs is not None and jobs.is_empty()
    html = section(write_report(config, E2E_WEEK).page_path.read_text("utf-8"))
    assert "No job with at least 1 GPU-hour ran this week." in " ".join(html.split())
