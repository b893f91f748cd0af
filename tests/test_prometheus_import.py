"""`gpufleet import prometheus` against a real Prometheus (tests/prometheus_stack.py): the
backfilled hours of a small Kubernetes fleet are imported, ingested and built, and the
warehouse's per-team GPU-hours, idle episodes, waste and thermal events are checked against
values computed here from the fixture's own scrapes, by the definitions of the reference
page. Then: importing again writes nothing, a live pod that comes and goes becomes one
allocation, Prometheus stopped mid-run fails in one line with nothing half-written, and bad
input (no server, an HTTP error, a series without UUID or Hostname, a non-numeric value, an
answer dribbled a byte a second) fails in one line naming the query, writing nothing."""

from __future__ import annotations

import datetime as dt
import gc
import http.server
import itertools
import json
import math
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import gpufleet
from gpufleet.cli import main
from gpufleet.config import Config, KubernetesConfig, PrometheusConfig, load_config
from gpufleet.errors import GpufleetError
from gpufleet.integrations.prometheus import ImportResult, PrometheusApi, import_prometheus
from gpufleet.integrations.prometheus.run import READ_AHEAD
from tests.prometheus_stack import (
    ALL_NAMES,
    ENGINE_ACTIVE,
    GPU_UTIL,
    GPUS,
    MIB,
    MIG_DEVICES,
    MIG_MIN,
    MIG_POWER_W,
    MODEL,
    XID,
    FleetHistory,
    Gpu,
    Pod,
    PrometheusStack,
    Scrape,
    free_port,
    prometheus_stack,
    start_prometheus,
)

pytestmark = [pytest.mark.slow, pytest.mark.stack]

STEP_S = 60
PRICE_USD = 2.0  # per GPU-hour of the fleet's one model
NAMESPACES = "namespace,team,valid_from\nml-train,vision,\nml-infer,serving,2099-01-01\n"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusStack]:
    with prometheus_stack(tmp_path_factory.mktemp("prometheus")) as running:
        yield running


def utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)


def iso(seconds: float) -> str:
    return utc(seconds).isoformat()


def by_utc_day(start: float, end: float) -> list[tuple[float, float]]:
    """[start, end] cut at each UTC midnight, as the importer files a run (one row a day)."""
    pieces = []
    while (midnight := (start // 86_400 + 1) * 86_400) < end:
        pieces.append((start, midnight))
        start = midnight
    return [*pieces, (start, end)]


def data_dir_with_config(root: Path, **prometheus: object) -> Path:
    """A data directory with prices, namespaces and a config file (delay 0: the history is
    complete; a one-hour window, so the four hours take several)."""
    data = root / "data"
    (data / "ref").mkdir(parents=True)
    (data / "ref" / "prices.csv").write_text(
        f"gpu_glob,usd_per_gpu_hour\nNVIDIA H100*,{PRICE_USD}\n"
    )
    (data / "ref" / "namespaces.csv").write_text(NAMESPACES)
    settings = {"step_seconds": STEP_S, "window_minutes": 60, "delay_seconds": 0} | prometheus
    lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in settings.items())
    (data / "gpufleet.toml").write_text(f"[prometheus]\n{lines}")
    return data


# What the warehouse must hold, from the fixture's scrapes and the contract's definitions.


V1_2_NULLS: dict[str, object] = {
    "sm_active_pct": None,
    "sm_occupancy_pct": None,
    "tensor_active_pct": None,
    "dram_active_pct": None,
    "pcie_rx_bytes_s": None,
    "pcie_tx_bytes_s": None,
    "nvlink_rx_bytes_s": None,
    "nvlink_tx_bytes_s": None,
    "xid_errors": None,
    "ecc_uncorrected_volatile": None,
    "ecc_corrected_volatile": None,
    "remapped_rows_pending": None,
    "remapped_rows_failure": None,
    "retired_pages_pending": None,
    "pcie_replay_count": None,
    "parent_gpu_uuid": None,
    "mig_profile": None,
    "mig_slice_fraction": None,
    "mig_enabled": None,
}


def how_well(gpu: Gpu, in_step: list[Scrape], before: list[Scrape]) -> dict[str, object]:
    """A row's columns of contract v1.2 from its step's scrapes (and, for the XIDs, the
    five minutes before the step): gpu-a's exporter has their series, gpu-b's none (null,
    never 0). A MIG column is null on a GPU's row."""
    if gpu.host != "gpu-a":
        return V1_2_NULLS

    def mean(name: str, scale: float = 1.0) -> object:
        return pytest.approx(sum(s.values[name] for s in in_step) / len(in_step) * scale)

    last = in_step[-1].values
    # A code the step shows that no series of the GPU showed at the end of the step before
    # (every code is a series of its own: dcgm-exporter's err_code label).
    shown_before = {s.values[XID] for s in before}
    new = sorted({int(s.values[XID]) for s in in_step} - shown_before - {0})
    return V1_2_NULLS | {
        "sm_active_pct": mean("DCGM_FI_PROF_SM_ACTIVE", 100),
        "sm_occupancy_pct": mean("DCGM_FI_PROF_SM_OCCUPANCY", 100),
        "tensor_active_pct": mean("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 100),
        "dram_active_pct": mean("DCGM_FI_PROF_DRAM_ACTIVE", 100),
        "pcie_rx_bytes_s": mean("DCGM_FI_PROF_PCIE_RX_BYTES"),
        "pcie_tx_bytes_s": mean("DCGM_FI_PROF_PCIE_TX_BYTES"),
        "nvlink_rx_bytes_s": mean("DCGM_FI_PROF_NVLINK_RX_BYTES"),
        "nvlink_tx_bytes_s": mean("DCGM_FI_PROF_NVLINK_TX_BYTES"),
        "xid_errors": new,
        "ecc_uncorrected_volatile": last["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"],
        "ecc_corrected_volatile": last["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"],
        "remapped_rows_pending": last["DCGM_FI_DEV_ROW_REMAP_PENDING"] != 0,
        "remapped_rows_failure": False,
        "pcie_replay_count": last["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"],
    }


@dataclass(frozen=True)
class Row:
    gpu: Gpu
    ts: int
    util: float
    pod: Pod | None


def team_of(pod: Pod | None) -> str:
    if pod is None:
        return "(unallocated)"
    # namespaces.csv: ml-train -> vision; ml-infer -> serving only from 2099 on.
    return {"ml-train": "vision"}.get(pod.namespace, pod.namespace)


def expected_rows(history: FleetHistory, since: int, until: int) -> dict[tuple[Gpu, int], Row]:
    """A row per GPU and step `ts` in [since, until): the mean of the scrapes in
    (ts - step, ts]; the pod whose labels a scrape of the step carries."""
    steps: dict[tuple[Gpu, int], list] = {}
    for scrape in history.scrapes:
        ts = math.ceil(scrape.t / STEP_S) * STEP_S
        if since <= ts < until:
            steps.setdefault((scrape.gpu, ts), []).append(scrape)
    rows = {}
    for (gpu, ts), scrapes in steps.items():
        util = sum(s.values[GPU_UTIL] for s in scrapes) / len(scrapes)
        pod = next((s.pod for s in scrapes if s.pod), None)
        rows[(gpu, ts)] = Row(gpu, ts, util, pod)
    return rows


def expected_episodes(rows: dict[tuple[Gpu, int], Row]) -> set[tuple]:
    """Idle episodes: maximal runs of idle rows of a GPU, each contiguous with the previous
    (ts gap <= 2.5 steps), with one team and attribution; waste from 30 minutes on."""
    episodes = set()
    for gpu in GPUS:
        series = sorted((r for r in rows.values() if r.gpu == gpu), key=lambda r: r.ts)
        run: list[Row] = []

        def close(run: list[Row], gpu: Gpu) -> None:
            if not run:
                return
            idle_s = len(run) * STEP_S
            attributed = "allocation" if run[0].pod else "none"
            waste = idle_s >= 30 * 60 and attributed != "none"
            job = f"{run[0].pod.namespace}/{run[0].pod.name}" if run[0].pod else None
            episodes.add(
                (
                    gpu.uuid,
                    team_of(run[0].pod),
                    attributed,
                    job,
                    run[0].ts - STEP_S,
                    run[-1].ts,
                    idle_s,
                    waste,
                    round(idle_s / 3600 * PRICE_USD, 6) if waste else 0.0,
                )
            )

        for row in series:
            idle = row.util < 5.0
            joins = (
                run
                and idle
                and row.ts - run[-1].ts <= 2.5 * STEP_S
                and team_of(row.pod) == team_of(run[-1].pod)
                and (row.pod is None) == (run[-1].pod is None)
            )
            if not joins:
                close(run, gpu)
                run = []
            if idle:
                run.append(row)
        close(run, gpu)
    return episodes


def sample_table(data: Path) -> list[dict]:
    return (
        ds.dataset(data / "raw" / "samples", format="parquet", partitioning="hive")
        .to_table()
        .to_pylist()
    )


def raw_files(data: Path) -> dict[str, tuple[int, int]]:
    """Every file under raw/ and imports/ with its size and modification time."""
    return {
        str(p.relative_to(data)): (p.stat().st_size, p.stat().st_mtime_ns)
        for folder in ("raw", "imports")
        for p in sorted((data / folder).rglob("*"))
        if p.is_file()
    }


def test_import_ingest_build_matches_the_fixtures_series(
    stack: PrometheusStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = stack.history
    data = data_dir_with_config(tmp_path)
    span = ["--since", iso(history.start), "--until", iso(history.end)]
    assert main(["import", "prometheus", "--url", stack.url, *span, "--data-dir", str(data)]) == 0
    out = capsys.readouterr()
    assert "5 window(s)" in out.out or "4 window(s)" in out.out, out
    assert "3 pod(s) on GPUs" in out.out

    # The sample files: one row per GPU and step, each value its step's scrapes reduced.
    rows = expected_rows(history, history.start, history.end)
    samples = sample_table(data)
    assert len(samples) == len(rows) == 4 * 240 - 2 * 15  # gpu-b's outage is a gap
    # A column no series fills is written plain and uncompressed, a filled one with zstd.
    for path in (data / "raw" / "samples").rglob("*.parquet"):
        group = pq.ParquetFile(path).metadata.row_group(0)
        codecs = {
            group.column(i).path_in_schema: group.column(i).compression
            for i in range(group.num_columns)
        }
        assert (codecs["sm_clock_max_mhz"], codecs["power_w"]) == ("UNCOMPRESSED", "ZSTD")
    scrapes = {(s.gpu.uuid, s.t): s for s in history.scrapes}
    for sample in samples:
        ts = int(sample["ts"].timestamp())
        gpu = next(g for g in GPUS if g.uuid == sample["gpu_uuid"])
        expected = rows[(gpu, ts)]
        in_step = [
            scrapes[(gpu.uuid, t)] for t in range(ts - 45, ts + 1, 15) if (gpu.uuid, t) in scrapes
        ]
        assert sample["interval_s"] == STEP_S and sample["status"] == "ok"
        assert (sample["host"], sample["gpu_index"]) == (gpu.host, gpu.index)
        assert sample["gpu_name"] == "NVIDIA H100 80GB HBM3"
        assert sample["gpu_util_pct"] == pytest.approx(expected.util, abs=1e-4)
        used = sum(s.values["DCGM_FI_DEV_FB_USED"] for s in in_step) / len(in_step)
        assert sample["mem_used_bytes"] == round(used * MIB)
        assert sample["mem_total_bytes"] == round(used * MIB) + round((81_559 - used) * MIB)
        last = in_step[-1].values
        assert sample["energy_mj"] == round(last["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
        assert sample["clock_event_mask"] == last["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]
        assert sample["thermal_violation_ns"] == round(last["DCGM_FI_DEV_THERMAL_VIOLATION"]) * 1000
        assert sample["power_limit_w"] == 700.0
        assert sample["processes"] is None and sample["sm_clock_max_mhz"] is None
        step_before = [
            scrapes[(gpu.uuid, t)]
            for t in range(ts - 60 - 285, ts - 59, 15)
            if (gpu.uuid, t) in scrapes
        ]
        assert sample == sample | how_well(gpu, in_step, step_before), (gpu, ts)

    # The XIDs, each in the step of the scrape that first showed it: gpu-a:0's 79, then its
    # 13 (a scrape of the step still showed 79), gpu-a:1's two codes of one step.
    xids = sorted(
        (s["gpu_uuid"], int(s["ts"].timestamp()), s["xid_errors"])
        for s in samples
        if s["xid_errors"]
    )
    start = history.start
    assert xids == sorted(
        [
            (GPUS[0].uuid, start + 71 * 60, [79]),
            (GPUS[0].uuid, start + 91 * 60, [13]),
            (GPUS[1].uuid, start + 51 * 60, [31, 43]),
        ]
    )
    pending = [s for s in samples if s["remapped_rows_pending"]]
    assert min(int(s["ts"].timestamp()) for s in pending) == start + 122 * 60
    assert {s["gpu_uuid"] for s in pending} == {GPUS[1].uuid}

    # Pods as allocation rows: one per pod and GPU, its window pieces joined; the outage
    # (no scrapes at all) splits server-7's.
    allocations = (data / "raw" / "allocations").glob("prometheus-*.csv")
    lines = sorted(line for f in allocations for line in f.read_text().splitlines()[1:])
    runs = [
        ("ml-infer/server-7,,ml-infer,gpu-b,0", start - 60, start + 120 * 60),
        ("ml-infer/server-7,,ml-infer,gpu-b,0", start + 135 * 60, history.end - 60),
        ("ml-train/trainer-0,,vision,gpu-a,0", start + 10 * 60, start + 150 * 60),
        ("ml-train/trainer-1,,vision,gpu-a,1", start + 30 * 60, start + 200 * 60),
    ]
    # no site: an empty `cluster`, the last column
    assert lines == sorted(
        f"{head},{iso(a)},{iso(b)}," for head, *run in runs for a, b in by_utc_day(*run)
    )

    # Ingest and build; then the marts against the definitions applied to the scrapes.
    assert main(["ingest", "--data-dir", str(data)]) == 0
    assert main(["build", "--data-dir", str(data)]) == 0
    warehouse = gpufleet.open(data)
    teams = warehouse.sql(
        "select team, sum(gpu_hours) as gpu_hours, sum(waste_usd) as waste_usd "
        "from team_daily group by team order by team"
    ).rows()
    hours: dict[str, float] = {}
    for row in rows.values():
        hours[team_of(row.pod)] = hours.get(team_of(row.pod), 0.0) + STEP_S / 3600
    episodes = expected_episodes(rows)
    waste: dict[str, float] = {}
    for episode in episodes:
        waste[episode[1]] = waste.get(episode[1], 0.0) + episode[8]
    assert [t for t, _, _ in teams] == sorted(hours)
    for team, gpu_hours, waste_usd in teams:
        assert gpu_hours == pytest.approx(hours[team]), team
        assert waste_usd == pytest.approx(waste.get(team, 0.0)), team
    found = warehouse.sql(
        "select gpu_uuid, team, attributed_by, job_id, epoch(start_ts)::bigint, "
        "epoch(end_ts)::bigint, idle_seconds::bigint, is_waste, round(waste_usd, 6) "
        "from idle_episodes"
    ).rows()
    assert set(found) == episodes
    # The pod that idled 50 minutes holding its GPU is the one waste episode.
    assert [e for e in episodes if e[7]] == [
        (
            GPUS[0].uuid,
            "vision",
            "allocation",
            "ml-train/trainer-0",
            start + 100 * 60,
            start + 150 * 60,
            3000,
            True,
            round(3000 / 3600 * PRICE_USD, 6),
        )
    ]
    thermal = warehouse.sql(
        "select gpu_uuid, team, epoch(start_ts)::bigint, epoch(end_ts)::bigint, is_hw "
        "from thermal_events"
    ).rows()
    assert thermal == [(GPUS[2].uuid, "ml-infer", start + 60 * 60, start + 66 * 60, True)]

    # Importing again writes nothing: the same span, what is new (nothing: until is in the
    # past), and a wider span whose new part has no data.
    before = raw_files(data)
    assert main(["import", "prometheus", "--url", stack.url, *span, "--data-dir", str(data)]) == 0
    assert "nothing new" in capsys.readouterr().out
    wider = ["--since", iso(history.start - 3600), "--until", iso(history.end)]
    assert main(["import", "prometheus", "--url", stack.url, *wider, "--data-dir", str(data)]) == 0
    assert "0 rows" in capsys.readouterr().out
    after = raw_files(data)
    assert {k: v for k, v in after.items() if not k.startswith("imports/")} == {
        k: v for k, v in before.items() if not k.startswith("imports/")
    }
    assert main(["ingest", "--data-dir", str(data)]) == 0
    assert warehouse.sql("select count(*) from samples").rows() == [(len(rows),)]


def test_a_live_pod_that_comes_and_goes_is_one_allocation(
    stack: PrometheusStack, tmp_path: Path
) -> None:
    """Live scrapes (every second) with a one-second step: the pod's run on the GPU is one
    allocation row, and every row is the mean of the scrapes Prometheus holds for its step."""
    gpu = GPUS[3]
    pod = Pod("live", "job-1", gpu, 0, 0, 90.0)
    since = time.time()
    time.sleep(2.0)
    stack.exporter.set(gpu, 90.0, pod)
    time.sleep(4.0)
    stack.exporter.set(gpu, 0.0, None)
    time.sleep(3.0)
    until = time.time() - 1.5  # the last scrape of the span is in
    config = Config(
        data_dir=tmp_path / "data",
        prometheus=PrometheusConfig(step_seconds=1, delay_seconds=0, window_minutes=1),
    )
    result = import_prometheus(config, url=stack.url, since=utc(since), until=utc(until))
    assert result.pods == 2  # server-7 on gpu-b:0, and job-1

    # What Prometheus holds for the GPU in the span, scrape by scrape.
    first, last = math.ceil(since), math.ceil(until)
    query = f'{GPU_UTIL}{{UUID="{gpu.uuid}"}}[{last - first + 2}s]'
    held = stack.server.query_at(query, last)
    steps: dict[int, list[tuple[float, bool]]] = {}
    for series in held:
        with_pod = series["metric"].get("pod") == "job-1"
        for t, value in series["values"]:
            ts = math.ceil(float(t))
            if first <= ts < last:
                steps.setdefault(ts, []).append((float(value), with_pod))
    samples = {
        int(s["ts"].timestamp()): s["gpu_util_pct"]
        for s in sample_table(config.data_dir)
        if s["gpu_uuid"] == gpu.uuid
    }
    assert samples.keys() == steps.keys()
    for ts, values in steps.items():
        assert samples[ts] == pytest.approx(sum(v for v, _ in values) / len(values))
    pod_steps = sorted(ts for ts, values in steps.items() if any(p for _, p in values))
    assert len(pod_steps) >= 3
    # One row per run of consecutive steps with the pod (one run, unless a scrape was missed).
    runs: list[list[int]] = []
    for ts in pod_steps:
        if runs and ts == runs[-1][-1] + 1:
            runs[-1].append(ts)
        else:
            runs.append([ts])
    allocations = sorted(
        line
        for f in (config.allocations_dir).glob("*.csv")
        for line in f.read_text().splitlines()
        if line.startswith("live/job-1,")
    )
    assert allocations == sorted(
        f"live/job-1,,live,gpu-b,1,{iso(a)},{iso(b)},"
        for r in runs
        for a, b in by_utc_day(r[0] - 1, r[-1])
    )


def test_prometheus_stopped_mid_run_fails_in_one_line_and_writes_no_half_window(
    stack: PrometheusStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prometheus stops in the middle of the second window (after ten of its queries):
    one line names the query that failed; the first window is whole, nothing of the second
    is written, and the record of imported windows holds the first alone."""
    server = stack.another_prometheus("stopped-mid-run")
    history = stack.history
    config = load_config(data_dir=data_dir_with_config(tmp_path), environ={})
    queries: list[str] = []
    query_range = PrometheusApi.query_range

    # Both hosts in one batch: a query per series name, and the pods'.
    per_window = len(ALL_NAMES) + 1

    def then_stop(api: PrometheusApi, query: str, **kwargs: float) -> list:
        queries.append(query)
        if len(queries) == per_window + 10:
            server.stop()
        return query_range(api, query, **kwargs)

    monkeypatch.setattr(PrometheusApi, "query_range", then_stop)
    windows: list[str] = []
    try:
        with pytest.raises(GpufleetError) as failure:
            import_prometheus(
                config,
                url=server.url,
                since=utc(history.start),
                until=utc(history.end),
                progress=windows.append,
            )
    finally:
        server.stop()
    message = str(failure.value)
    assert "\n" not in message
    # The failed query, then what went wrong: no server, or (a query in flight while it
    # shut down) its HTTP error, its answer cut off, or no answer in time (a loaded machine).
    how = rf"(cannot reach|HTTP \d+ from|cannot read the answer of) {server.url}.*"
    failed = re.fullmatch(rf"query '(.+)': ({how}|{server.url} timed out after .*)", message)
    assert failed and failed.group(1) in queries[per_window:]  # of the second window
    assert len(windows) == 1
    first_end = (history.start // 3600 + 1) * 3600
    stamps = f"-{utc(history.start):%Y%m%dT%H%M%SZ}-{utc(first_end):%Y%m%dT%H%M%SZ}.parquet"
    files = [p.relative_to(config.data_dir) for p in config.data_dir.rglob("*") if p.is_file()]
    samples = sorted(f.name for f in files if f.parts[:2] == ("raw", "samples"))
    assert len(samples) == 2 and all(name.endswith(stamps) for name in samples)
    assert not [f for f in files if f.name.startswith(".")]
    state = json.loads((config.data_dir / "imports" / "prometheus.json").read_text())
    assert state == {server.url: [[history.start, first_end]]}


def test_queries_in_flight_across_windows_write_what_one_at_a_time_writes(
    stack: PrometheusStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Range queries are asked `READ_AHEAD` at a time, the next window's while the last of
    one is still out (here each window's pods query, its last, answers a second late):
    the files, the record of imported windows and the result are those of one at a time."""
    history = stack.history
    query_range = PrometheusApi.query_range
    lock = threading.Lock()
    in_flight = [0, 0]  # now, at most
    asked: dict[float, list[tuple[float, float]]] = {}  # window start -> (asked, answered)

    def timed(api: PrometheusApi, query: str, **kwargs: float) -> list:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
        began = time.monotonic()
        try:
            if 'pod!=""' in query:  # each window's last query
                time.sleep(1.0)
            return query_range(api, query, **kwargs)
        finally:
            with lock:
                in_flight[0] -= 1
                asked.setdefault(kwargs["start_s"], []).append((began, time.monotonic()))

    def imported(name: str, read_ahead: int) -> tuple[ImportResult, dict[str, object], int]:
        monkeypatch.setattr("gpufleet.integrations.prometheus.run.READ_AHEAD", read_ahead)
        in_flight[:] = [0, 0]
        asked.clear()
        config = load_config(data_dir=data_dir_with_config(tmp_path / name), environ={})
        result = import_prometheus(
            config, url=stack.url, since=utc(history.start), until=utc(history.end)
        )
        files: dict[str, object] = {
            str(path.relative_to(config.data_dir)): (
                pq.read_table(path) if path.suffix == ".parquet" else path.read_bytes()
            )
            for path in sorted(config.data_dir.rglob("*"))
            if path.is_file()
        }
        return result, files, in_flight[1]

    monkeypatch.setattr(PrometheusApi, "query_range", timed)
    one_result, one_files, one_most = imported("one", 1)
    many_result, many_files, many_most = imported("many", READ_AHEAD)
    assert one_most == 1 and 1 < many_most <= READ_AHEAD
    starts = sorted(asked)
    assert len(starts) >= 4
    for before, start in itertools.pairwise(starts):  # asked before the last one answered
        assert min(a for a, _ in asked[start]) < max(b for _, b in asked[before])
    assert many_result == one_result and many_result.rows > 0
    assert many_files.keys() == one_files.keys()
    for name, content in one_files.items():
        if isinstance(content, pa.Table):
            assert content.equals(many_files[name]), name
        else:
            assert content == many_files[name], name


def test_a_window_whose_hosts_cannot_be_listed_fails_after_the_one_before_is_written(
    stack: PrometheusStack, tmp_path: Path
) -> None:
    """The next window's series are checked and its hosts listed while a window is read: a
    failure there is raised in its turn, once the window before it is written and recorded."""
    bad_start, bad_end = stack.history.bad_stretches()["UUID"]
    since = (bad_start // 3600 - 1) * 3600  # a whole window before the bad series
    config = Config(data_dir=tmp_path / "data", prometheus=PrometheusConfig(delay_seconds=0))
    windows: list[str] = []
    with pytest.raises(GpufleetError) as failure:
        import_prometheus(
            config, url=stack.url, since=utc(since), until=utc(bad_end), progress=windows.append
        )
    assert "has no 'UUID' label" in str(failure.value)
    assert len(windows) == 1
    state = json.loads((config.data_dir / "imports" / "prometheus.json").read_text())
    assert state == {stack.url: [[since, since + 3600]]}


# Host names a regex would misread unescaped: "n.1" would match "nx1", "a|b" "a" and "b".
ODD_HOSTS = ("n.1", "nx1", "a|b", "a", "b", "c+", "cc", "(d)", "d", "e\\f", "g h", "é*", "^z$")


@pytest.fixture(scope="module")
def odd_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A Prometheus with ten minutes of one GPU on each of ODD_HOSTS, the i-th at a
    utilization of 5 i + 1; its URL and the ten minutes' start."""
    workdir = tmp_path_factory.mktemp("odd-hosts")
    start = int(time.time()) // 3600 * 3600 - 3 * 3600
    lines = [f"# TYPE {GPU_UTIL} gauge"]
    for i, host in enumerate(ODD_HOSTS):
        quoted = host.replace("\\", "\\\\").replace('"', '\\"')
        labels = f'Hostname="{quoted}",UUID="GPU-odd-{i}",gpu="0",modelName="{MODEL}"'
        lines += [f"{GPU_UTIL}{{{labels}}} {5 * i + 1} {t}" for t in range(start, start + 600, 15)]
    source = workdir / "history.om"
    source.write_text("\n".join([*lines, "# EOF"]) + "\n", encoding="utf-8")
    tsdb = workdir / "backfilled"
    command = ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(tsdb)]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    server = start_prometheus(workdir / "server", tsdb, free_port())
    try:
        yield server.url, start
    finally:
        server.stop()


@pytest.mark.parametrize("per_query", [1, 4, 32])
def test_hosts_asked_in_batches_get_their_own_rows_whatever_their_names(
    odd_hosts: tuple[str, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_query: int
) -> None:
    """A query asks for a batch of hosts by a regex of their names: each host, whatever
    characters its name holds, gets its own GPU's rows, all of them, and no other host's."""
    monkeypatch.setattr("gpufleet.integrations.prometheus.queries.HOSTS_PER_QUERY", per_query)
    url, start = odd_hosts
    config = Config(data_dir=tmp_path / "data", prometheus=PrometheusConfig(delay_seconds=0))
    result = import_prometheus(config, url=url, since=utc(start), until=utc(start + 600))
    assert result.hosts == len(ODD_HOSTS) and result.rows == 10 * len(ODD_HOSTS)
    files = ds.dataset(config.data_dir / "raw" / "samples", format="parquet")  # the rows' host
    rows = files.to_table(columns=["host", "gpu_uuid", "gpu_util_pct", "ts"]).to_pylist()
    got = sorted((r["host"], r["gpu_uuid"], r["gpu_util_pct"], r["ts"]) for r in rows)
    assert got == sorted(
        (host, f"GPU-odd-{i}", 5.0 * i + 1, utc(start + 60 * step))
        for i, host in enumerate(ODD_HOSTS)
        for step in range(10)
    )


def test_a_mig_enabled_gpu_is_a_row_per_mig_device_and_one_of_its_own(
    stack: PrometheusStack, tmp_path: Path
) -> None:
    """dcgm-exporter's default `-d f` exports a MIG-enabled GPU's series once per MIG device
    (GPU instance), with `GPU_I_ID` and `GPU_I_PROFILE` and the GPU's UUID. Each MIG device
    is a row of its own (an id from its GPU's UUID and GPU instance, its GPU, profile and
    share, its utilization, memory and SM activity); the GPU's own row holds power,
    temperature and health, its MIG columns null; the series it lacks leave columns null."""
    history = stack.history
    a, b = (history.start + m * 60 for m in MIG_MIN)
    config = load_config(data_dir=data_dir_with_config(tmp_path), environ={})
    import_prometheus(config, url=stack.url, since=utc(a), until=utc(b + STEP_S))
    gpu = history.mig_gpu
    by_step: dict[tuple[str | None, int], list[Scrape]] = {}
    for scrape in history.mig_scrapes():
        ts = math.ceil(scrape.t / STEP_S) * STEP_S
        by_step.setdefault((scrape.mig and scrape.mig[0], ts), []).append(scrape)
    samples = sample_table(config.data_dir)
    steps = sorted({ts for _, ts in by_step})
    assert len(steps) == 21  # the stretch's first scrape is at a minute's end: a step alone
    assert sorted((s["gpu_uuid"], int(s["ts"].timestamp())) for s in samples) == sorted(
        [(f"MIG-{gpu.uuid}/{gi}", ts) for gi, *_ in MIG_DEVICES for ts in steps]
        + [(gpu.uuid, ts) for ts in steps]
    )
    common = {"host": gpu.host, "gpu_index": 0, "gpu_name": MODEL, "status": "ok"}
    for sample in samples:
        ts = int(sample["ts"].timestamp())
        assert sample == sample | common | {"mig_enabled": True, "processes": None}
        if sample["gpu_uuid"] == gpu.uuid:  # the GPU's own row: each MIG device's series
            scrapes = by_step[("2", ts)] + by_step[("9", ts)]
            power = sum(s.values["DCGM_FI_DEV_POWER_USAGE"] for s in scrapes) / len(scrapes)
            assert sample == sample | V1_2_NULLS | {
                "power_w": pytest.approx(power),
                "temp_gpu_c": round(
                    sum(s.values["DCGM_FI_DEV_GPU_TEMP"] for s in scrapes) / len(scrapes)
                ),
                "xid_errors": [],
                "mig_enabled": True,
                "gpu_util_pct": None,
                "mem_used_bytes": None,
                "mem_total_bytes": None,
            }
            assert MIG_POWER_W <= sample["power_w"] <= MIG_POWER_W + 3
            continue
        gi, profile, *_ = next(d for d in MIG_DEVICES if sample["gpu_uuid"].endswith(f"/{d[0]}"))
        scrapes = by_step[(gi, ts)]
        engine = sum(s.values[ENGINE_ACTIVE] for s in scrapes) / len(scrapes)
        used = sum(s.values["DCGM_FI_DEV_FB_USED"] for s in scrapes) / len(scrapes)
        free = sum(s.values["DCGM_FI_DEV_FB_FREE"] for s in scrapes) / len(scrapes)
        assert sample == sample | V1_2_NULLS | {
            "parent_gpu_uuid": gpu.uuid,
            "mig_profile": profile,
            "mig_slice_fraction": pytest.approx(int(profile[0]) / 7),
            "mig_enabled": True,
            "gpu_util_pct": pytest.approx(engine * 100, rel=1e-6),
            "sm_active_pct": pytest.approx(engine * 80, rel=1e-6),
            "mem_used_bytes": round(used * MIB),
            "mem_total_bytes": round(used * MIB) + round(free * MIB),
            "power_w": None,
            "temp_gpu_c": None,
        }, sample


@pytest.mark.parametrize("label", ["UUID", "Hostname"])
def test_a_series_without_uuid_or_hostname_fails_naming_the_query(
    stack: PrometheusStack, tmp_path: Path, label: str
) -> None:
    start, end = stack.history.bad_stretches()[label]
    config = Config(data_dir=tmp_path / "data", prometheus=PrometheusConfig(delay_seconds=0))
    with pytest.raises(GpufleetError) as failure:
        import_prometheus(config, url=stack.url, since=utc(start), until=utc(end))
    message = str(failure.value)
    assert "\n" not in message
    assert f'{label}=""' in message and f"has no '{label}' label" in message
    assert not (config.data_dir / "raw").exists()


def test_unreachable_server_and_http_error_fail_in_one_line_writing_nothing(
    stack: PrometheusStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    closed = f"http://127.0.0.1:{free_port()}"
    assert main(["import", "prometheus", "--url", closed, "--data-dir", str(data)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpufleet: error: values of label '__name__': cannot reach ")
    assert "\n" not in err
    assert (
        main(
            [
                "import",
                "prometheus",
                "--url",
                f"{stack.url}/no/such/prefix",
                "--data-dir",
                str(data),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert "values of label '__name__': HTTP 404" in err and "\n" not in err
    assert not data.exists()


class _FakeApi(http.server.BaseHTTPRequestHandler):
    """A server that answers like Prometheus, but with a value that is not a number."""

    def do_GET(self) -> None:
        path = urllib.parse.urlparse(self.path).path
        data: object = {
            "/api/v1/label/__name__/values": [GPU_UTIL],
            "/api/v1/label/Hostname/values": ["gpu-a"],
            "/api/v1/series": [],
        }.get(path)
        if path == "/api/v1/query_range":
            metric = {"Hostname": "gpu-a", "UUID": "GPU-1", "gpu": "0"}
            data = {
                "resultType": "matrix",
                "result": [{"metric": metric, "values": [[1.7e9, "12,5"]]}],
            }
        body = json.dumps({"status": "success", "data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_range_querys_points_are_left_alone_by_the_garbage_collector(
    stack: PrometheusStack,
) -> None:
    """A window's answers hold hundreds of thousands of points: each is decoded as a pair the
    garbage collector stops tracking (a list per point made its collections as slow as the
    parse), with the same times and values as any JSON parser reads."""
    api = PrometheusApi(url=stack.url, timeout_s=30)
    start = stack.history.start + 3600
    query = f'{GPU_UTIL}{{Hostname="gpu-a"}}'
    answer = api.query_range(query, start_s=start, end_s=start + 600, step_s=60)
    gc.collect()
    points = [point for series in answer for point in series["values"]]
    assert len(points) == 2 * 11 and not any(gc.is_tracked(point) for point in points)
    params = {"query": query, "start": start, "end": start + 600, "step": 60}
    address = f"{stack.url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(address, timeout=30) as response:
        plain = json.loads(response.read())["data"]["result"]
    assert [[(float(t), v) for t, v in s["values"]] for s in plain] == [
        [(t, v) for t, v in s["values"]] for s in answer
    ]


def test_a_value_that_is_not_a_number_fails_naming_the_query(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = Config(data_dir=tmp_path / "data", prometheus=PrometheusConfig(delay_seconds=0))
        with pytest.raises(GpufleetError) as failure:
            import_prometheus(
                config,
                url=f"http://127.0.0.1:{server.server_address[1]}",
                since=utc(1.7e9 - 3600),
                until=utc(1.7e9),
            )
    finally:
        server.shutdown()
        server.server_close()
    message = str(failure.value)
    assert message.startswith(
        "query 'sum by (Hostname, UUID, gpu, modelName, GPU_I_ID, GPU_I_PROFILE) (sum_over_time("
    )
    assert message.endswith("a value that is not a number: '12,5'")
    assert not (config.data_dir / "raw").exists()


class _Dribble(http.server.BaseHTTPRequestHandler):
    """A server that answers every request one byte a second: its headers at once and then
    its body (`part = "body"`), or the headers too (`part = "headers"`)."""

    part = "body"
    stop = threading.Event()

    def do_GET(self) -> None:
        body = json.dumps({"status": "success", "data": []}).encode()
        headers = (
            f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        fast, slow = (headers, body) if self.part == "body" else (b"", headers + body)
        self.wfile.write(fast)
        for byte in slow:
            if self.stop.wait(1):
                return
            self.wfile.write(bytes([byte]))

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_server_that_answers_a_byte_a_second_fails_within_the_timeout(
    stack: PrometheusStack, tmp_path: Path, capsys: pytest.CaptureFixture[str], part: str
) -> None:
    """`timeout_seconds` bounds a whole request, not each read of the socket: a server that
    dribbles its answer fails the import in one line in about that time (not the half minute
    the answer takes), writing nothing; the same data directory then imports from a good
    server, each of its requests given the same few seconds."""
    data = data_dir_with_config(tmp_path, timeout_seconds=3)
    handler = type("Dribble", (_Dribble,), {"part": part, "stop": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    slow = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        started = time.monotonic()
        assert main(["import", "prometheus", "--url", slow, "--data-dir", str(data)]) == 1
        took = time.monotonic() - started
    finally:
        handler.stop.set()
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err.strip()
    assert err == f"gpufleet: error: values of label '__name__': {slow} timed out after 3 s"
    assert 3 <= took < 3 + 3  # the answer would take 31 s (headers: 100 s)
    assert not (data / "raw").exists() and not (data / "imports").exists()

    history = stack.history
    span = ["--since", iso(history.start), "--until", iso(history.start + 3600)]
    assert main(["import", "prometheus", "--url", stack.url, *span, "--data-dir", str(data)]) == 0
    assert len(sample_table(data)) > 0


def test_team_from_a_label_and_user_label(stack: PrometheusStack, tmp_path: Path) -> None:
    """`[kubernetes] team_from` naming a label the series lack falls back to namespaces.csv
    and the namespace; a `user_label` they lack leaves users null."""
    history = stack.history
    data = data_dir_with_config(tmp_path)
    config = load_config(data_dir=data, environ={})
    config = replace(
        config, kubernetes=KubernetesConfig(team_from="label_team", user_label="label_user")
    )
    import_prometheus(
        config, url=stack.url, since=utc(history.start), until=utc(history.start + 3600)
    )
    # (one file a UTC day: the hour may cross midnight)
    files = [p.read_text().splitlines() for p in (data / "raw" / "allocations").glob("*.csv")]
    assert {lines[0] for lines in files} == {
        "job_id,user,team,host,gpu_index,start_ts,end_ts,cluster"
    }
    assert {line.split(",")[2] for lines in files for line in lines[1:]} == {"vision", "ml-infer"}
