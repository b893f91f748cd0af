"""The report page in a real browser: headless Chromium, opened from file://, no network.

Every request Chromium makes goes to a proxy on loopback that answers nothing and counts
what it was asked for, so the test proves both that the page needs no network and that it
does not even try. The page marks <body> once every vegaEmbed promise has settled
(`data-charts="rendered"` or `"failed"`) and each chart with how many marks it drew; the
DOM Chromium dumps after running the page's scripts is checked for those marks.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpufleet.reports.weekly import write_report
from tests import report_fixtures as fx

pytestmark = [pytest.mark.slow, pytest.mark.stack]

CHARTS = [
    "utilization",
    "team-utilization",
    "busy-idle",
    "waste-trend",
    "thermal-heatmap",
]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "Chromium is needed for the browser test: run 'make browser' (apt-get install chromium)"
    )


# Chromium itself calls home in the background even with the flags below; the page never does.
CHROMIUM_OWN = re.compile(
    r"^(GET|POST|CONNECT) (https?://)?[a-z0-9.-]+\.(google\.com|googleapis\.com|gvt1\.com)[:/]"
)


class BlackHoleProxy:
    """A TCP listener that records the first line of every connection and closes it."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self._socket.settimeout(0.2)
        self.port = int(self._socket.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(2)
                try:
                    first = connection.recv(1024).split(b"\r\n", 1)[0]
                except OSError:
                    first = b"?"
                self.requests.append(first.decode("latin-1"))

    def page_requests(self) -> list[str]:
        """The requests, less Chromium's own housekeeping (update checks, clock, accounts)."""
        return [line for line in self.requests if not CHROMIUM_OWN.search(line)]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._socket.close()


@pytest.fixture
def proxy() -> Iterator[BlackHoleProxy]:
    black_hole = BlackHoleProxy()
    try:
        yield black_hole
    finally:
        black_hole.close()


def run_chromium(
    page: Path, proxy: BlackHoleProxy, profile: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    command = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        f"--proxy-server=http://127.0.0.1:{proxy.port}",
        "--proxy-bypass-list=<-loopback>",  # even loopback goes to the black hole
        "--virtual-time-budget=30000",  # let the scripts run to the end before dumping
        "--hide-scrollbars",
        *extra,
        page.resolve().as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


class _DomParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.body: dict[str, str | None] = {}
        self.charts: dict[str, dict[str, str | None]] = {}
        self.svgs_in: dict[str, int] = {}
        self.tags: list[str] = []
        self.cells: list[str] = []
        self._chart: str | None = None
        self._in_td = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.append(tag)
        if tag == "body":
            self.body = found
        if tag == "figure" and found.get("data-chart"):
            self._chart = found["data-chart"] or ""
            self.charts[self._chart] = found
            self.svgs_in[self._chart] = 0
        if tag == "svg" and self._chart:
            self.svgs_in[self._chart] += 1
        if tag == "td":
            self._in_td = True
            self.cells.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._chart = None
        if tag == "td":
            self._in_td = False

    def handle_data(self, data: str) -> None:
        if self._in_td:
            self.cells[-1] += data


def rendered_dom(page: Path, proxy: BlackHoleProxy, profile: Path) -> tuple[str, _DomParser]:
    dom = run_chromium(page, proxy, profile, "--dump-dom").stdout
    parser = _DomParser()
    parser.feed(dom)
    return dom, parser


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One report page for the tests that only read it."""
    config, _ = fx.fixture_config(tmp_path_factory.mktemp("report") / "data")
    return write_report(config, fx.WEEK).page_path


@pytest.fixture(scope="module")
def rendered_report(
    report_page: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, _DomParser, list[str]]:
    """That page as Chromium ran it (its DOM, and parsed) and what the page asked the network
    for (BlackHoleProxy.page_requests): one run for the tests that only read them."""
    black_hole = BlackHoleProxy()
    try:
        dom, parsed = rendered_dom(report_page, black_hole, tmp_path_factory.mktemp("profile"))
    finally:
        black_hole.close()
    return dom, parsed, black_hole.page_requests()


def test_every_chart_renders_offline(rendered_report: tuple[str, _DomParser, list[str]]) -> None:
    dom, parsed, page_requests = rendered_report
    assert parsed.body.get("data-charts") == "rendered", parsed.body
    assert parsed.body.get("data-charts-expected") == str(len(CHARTS))
    assert parsed.body.get("data-charts-rendered") == str(len(CHARTS))
    assert parsed.body.get("data-charts-failed") == "0"
    assert sorted(parsed.charts) == sorted(CHARTS)
    for key, attributes in parsed.charts.items():
        assert "data-error" not in attributes, (key, attributes.get("data-error"))
        assert int(attributes.get("data-marks") or 0) > 0, key
        assert parsed.svgs_in[key] >= 1, key
    # the marks are in the dumped DOM too: the heatmap's 7 days x 8 hours of rects
    heatmap = dom.split('id="chart-utilization"', 1)[1].split("</figure>", 1)[0]
    cells = re.findall(r'<path aria-label="([^"]*)"[^>]*aria-roledescription="rect mark"', heatmap)
    assert len(cells) == 7 * 8
    # each cell carries its tooltip's fields (Vega writes them into its aria-label)
    assert all("utilization %: 45.0" in label for label in cells)
    assert page_requests == [], f"the page tried the network: {page_requests}"


def test_names_stay_text_in_the_browser(
    rendered_report: tuple[str, _DomParser, list[str]],
) -> None:
    _, parsed, _ = rendered_report
    assert fx.EVIL_TEAM in parsed.cells  # shown as text in the teams table
    assert fx.EVIL_USER in parsed.cells
    assert "b" not in parsed.tags  # `<b>bob</b>` did not become an element
    assert parsed.tags.count("script") == 3  # and nothing injected a script
    assert parsed.body.get("data-charts") == "rendered"


def test_a_broken_chart_is_reported_by_the_page(
    report_page: Path, proxy: BlackHoleProxy, tmp_path: Path
) -> None:
    """The check above can fail: a chart Vega cannot draw marks the page as failed."""
    page = report_page.read_text(encoding="utf-8")
    broken = page.replace('"mark":{"type":"bar"', '"mark":{"type":"no-such-mark"', 1)
    assert broken != page
    target = tmp_path / "broken.html"
    target.write_text(broken, encoding="utf-8")
    _, parsed = rendered_dom(target, proxy, tmp_path / "profile")
    assert parsed.body.get("data-charts") == "failed"
    assert parsed.body.get("data-charts-failed") == "1"
    failed = [key for key, attrs in parsed.charts.items() if "data-error" in attrs]
    assert failed == ["busy-idle"]


def test_screenshot_of_the_rendered_page(
    report_page: Path, proxy: BlackHoleProxy, tmp_path: Path
) -> None:
    shot = tmp_path / "report.png"
    run_chromium(
        report_page,
        proxy,
        tmp_path / "profile",
        "--window-size=1100,4200",
        f"--screenshot={shot}",
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 100_000  # a page of charts, not a blank page
    print(f"screenshot: {shot}")


def test_the_black_hole_sees_what_a_page_fetches(proxy: BlackHoleProxy, tmp_path: Path) -> None:
    """The network check above can fail: a page that loads a URL is seen by the proxy."""
    page = tmp_path / "fetches.html"
    page.write_text('<!DOCTYPE html><img src="https://cdn.example.org/x.png">', encoding="utf-8")
    run_chromium(page, proxy, tmp_path / "profile", "--dump-dom")
    assert any("cdn.example.org" in line for line in proxy.page_requests()), proxy.requests
