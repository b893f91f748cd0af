"""Fuzzing the Prometheus import with the answers a server might give: bodies that are not
JSON, cut short or of the wrong shape, series with odd labels, times and values. Each
answer goes through the real code path: a loopback HTTP server hands it to `gpufleet
import prometheus`, which exits 0 (and what it wrote, ingest loads), or 1 with one line
naming the query or the server; the parsers alone return or raise PrometheusError."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.config import DEFAULT_PROMETHEUS_SERIES, Config, PrometheusConfig
from gpufleet.errors import GpufleetError
from gpufleet.integrations.prometheus.pods import pod_allocations
from gpufleet.integrations.prometheus.queries import METRICS
from gpufleet.integrations.prometheus.samples import HostSteps
from tests.fuzzing import CELLS, assert_kept, examples, run_cli, scratch, tree, written_outside

pytestmark = pytest.mark.fleet

SINCE, UNTIL = "2026-11-16T09:00:00+00:00", "2026-11-16T09:05:00+00:00"
FIRST_S = 1794819660  # 09:01, the first step's ts
STEP_S = 60
NAMES = [name for _, names in DEFAULT_PROMETHEUS_SERIES for name in names]

Answer = Callable[[str, dict[str, list[str]]], tuple[int, bytes]]


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        status, body = self.server.answer(url.path, urllib.parse.parse_qs(url.query))  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadingHTTPServer]:
    """A loopback HTTP server answering with whatever `server.answer` returns."""
    running = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    try:
        yield running
    finally:
        running.shutdown()
        running.server_close()


LABELS = st.one_of(st.sampled_from(CELLS), st.text(max_size=8))
TIMES = st.one_of(
    st.sampled_from([FIRST_S + STEP_S * n for n in range(5)]),
    st.sampled_from([0, -1, 1e30, -1e30, 2**63, "NaN", "Inf", "-Inf", "x", None, FIRST_S + 0.5]),
    st.floats(),
)
VALUES = st.one_of(
    st.sampled_from(["1", "50.5", "0", "-1", "NaN", "+Inf", "-Inf", "1e400", "1e19", "x", ""]),
    st.sampled_from([1, 1.5, None, True, [], {}]),
    st.floats().map(repr),
)


@st.composite
def series(draw: st.DrawFn) -> Any:
    """One series of a matrix answer: mostly dcgm-exporter's labels and [time, "value"]
    points, now and then something else."""
    labels = {"Hostname": "node-1", "UUID": "GPU-a", "gpu": "0", "modelName": "H100"}
    # and now and then a MIG device's labels, or the code of an XID query's answer
    keys = [*labels, "namespace", "pod", "GPU_I_ID", "GPU_I_PROFILE", "gpufleet_xid"]
    labels |= draw(st.dictionaries(st.sampled_from(keys), LABELS))
    for name in draw(st.lists(st.sampled_from(list(labels)), max_size=2, unique=True)):
        del labels[name]
    points = draw(st.lists(st.one_of(st.tuples(TIMES, VALUES).map(list), st.just([1])), max_size=5))
    found: Any = {"metric": labels, "values": points}
    shape = draw(st.integers(0, 14))
    if shape == 0:
        found = draw(st.sampled_from([None, 1, "x", [], {"metric": None}, {"values": None}]))
    elif shape == 1:
        found["metric"] = draw(st.sampled_from([None, [], "x", {"Hostname": 1}]))
    return found


def _ok(data: Any) -> bytes:
    return json.dumps({"status": "success", "data": data}).encode()


BODIES = st.one_of(
    st.sampled_from(
        [
            b"",
            b"not json",
            b"{",
            b"null",
            b"[]",
            b'{"status": "error", "error": "bad\\nthing"}',
            b'{"status": "success"}',
            b'{"status": "success", "data": {"resultType": "vector", "result": []}}',
            b'{"status": "success", "data": {"resultType": "matrix", "result": {}}}',
            b'{"status": "success", "data": [1, 2]}',
            b'{"status": "success", "data": "x"}',
            b"\xff\xfe",
        ]
    ),
    st.binary(max_size=20),
)


class Script(NamedTuple):
    """What the server answers: right answers for the names, hosts and label checks, the
    `matrices` in turn for the range queries, and every third answer of the API path
    that `broken` names (none when empty) `bad_body` with `bad_status`."""

    hosts: list[Any]
    matrices: list[list[Any]]
    broken: str
    bad_body: bytes
    bad_status: int


scripts = st.builds(
    Script,
    hosts=st.lists(st.one_of(st.just("node-1"), LABELS), min_size=1, max_size=2),
    matrices=st.lists(st.lists(series(), max_size=3), min_size=1, max_size=4),
    broken=st.sampled_from(["", "values", "series", "query_range", "label"]),
    bad_body=BODIES,
    bad_status=st.sampled_from([200, 200, 400, 500, 503]),
)


def answering(script: Script) -> Answer:
    count = iter(range(10**6))

    def answer(path: str, query: dict[str, list[str]]) -> tuple[int, bytes]:
        if script.broken and script.broken in path and next(count) % 3 == 0:
            return script.bad_status, script.bad_body
        if path == "/api/v1/label/__name__/values":
            return 200, _ok(NAMES)
        if path.startswith("/api/v1/label/"):
            return 200, _ok(script.hosts)
        if path == "/api/v1/series":
            return 200, _ok([])
        result = script.matrices[next(count) % len(script.matrices)]
        return 200, _ok({"resultType": "matrix", "result": result})

    return answer


@given(script=scripts)
@examples(25)
def test_import_prometheus_writes_files_or_fails_in_one_line(
    server: ThreadingHTTPServer, script: Script
) -> None:
    server.answer = answering(script)  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with scratch() as root:
        data_dir = root / "data"
        before = tree(root)
        argv = ["--data-dir", str(data_dir), "import", "prometheus", "--url", url]
        outcome = run_cli([*argv, "--since", SINCE, "--until", UNTIL])
        assert_kept(outcome, names=("query", url, "prometheus", "values of label", "series"))
        assert not written_outside(root, data_dir, before)
        if outcome.status == 0 and data_dir.exists():
            ingested = run_cli(["--data-dir", str(data_dir), "ingest"])
            assert ingested.status == 0, ingested


@given(answers=st.lists(st.lists(series(), max_size=4), min_size=1, max_size=len(METRICS)))
@examples(50)
def test_host_steps_take_an_answer_or_raise_the_projects_error(answers: list[Any]) -> None:
    steps = HostSteps(STEP_S, FIRST_S, 5)
    for metric, answer in zip(METRICS, answers, strict=False):
        try:
            steps.add(metric, answer, query="q", prometheus=PrometheusConfig())
        except GpufleetError as exc:
            assert str(exc).startswith("query 'q': "), exc
            return
    steps.table(METRICS)


@given(answer=st.lists(series(), max_size=5))
@examples(80)
def test_pod_allocations_take_an_answer_or_raise_the_projects_error(answer: list[Any]) -> None:
    try:
        pod_allocations([("q", answer)], config=Config(), namespaces=())
    except GpufleetError as exc:
        assert str(exc).startswith("query 'q': "), exc


GOOD_SERIES = {"metric": {"Hostname": "node-1", "UUID": "GPU-a", "gpu": "0"}, "values": []}


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ([None], "a series that is not an object of labels and points"),
        ([{"metric": ["Hostname"], "values": []}], "a series that is not an object"),
        ([GOOD_SERIES | {"values": [["NaN", "1"]]}], "a point at time nan, not a time"),
        ([GOOD_SERIES | {"values": [[1e30, "1"]]}], "a point at time 1e+30, not a time"),
        ([GOOD_SERIES | {"values": [[FIRST_S + 3600, "1"]]}], "outside the window asked for"),
        ([GOOD_SERIES | {"values": [[FIRST_S - STEP_S, "1"]]}], "outside the window asked for"),
    ],
)
def test_an_answer_of_no_shape_prometheus_gives_is_the_projects_error(
    answer: list[Any], problem: str
) -> None:
    """Found by the fuzz tests above: a series that was not an object raised AttributeError,
    a time of NaN or 1e30 failed in Arrow's cast, and a point outside the window was put
    in another GPU's row."""
    steps = HostSteps(STEP_S, FIRST_S, 5)
    with pytest.raises(GpufleetError, match=re.escape(problem)):
        steps.add(METRICS[0], answer, query="q", prometheus=PrometheusConfig())
    if "window" not in problem:  # the pods' reader takes the same series
        pods = [
            series | {"metric": series["metric"] | {"namespace": "ns", "pod": "p"}}
            if isinstance(series, dict) and isinstance(series.get("metric"), dict)
            else series
            for series in answer
        ]
        with pytest.raises(GpufleetError, match=re.escape(problem)):
            pod_allocations([("q", pods)], config=Config(), namespaces=())


def test_a_series_answer_that_is_not_label_sets_is_one_line(server: ThreadingHTTPServer) -> None:
    """Found by the fuzz test above: `dict(found[0])` of a series answer `[1, 2]` raised
    TypeError."""
    script = Script(["node-1"], [[]], "series", b'{"status": "success", "data": [1, 2]}', 200)
    server.answer = answering(script)  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with scratch() as root:
        argv = ["--data-dir", str(root / "data"), "import", "prometheus", "--url", url]
        outcome = run_cli([*argv, "--since", SINCE, "--until", UNTIL])
    assert outcome.status == 1
    assert "the answer is not a list of label sets" in outcome.stderr
