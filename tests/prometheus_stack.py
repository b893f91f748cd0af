"""A real Prometheus (Debian's `prometheus` 2.42 package) scraping a dcgm-exporter stand-in.

- `FleetHistory`: hours of scrapes of a small Kubernetes GPU fleet, every value known to the
  test: two hosts of two GPUs, pods that come and go (their `namespace`/`pod`/`container`
  labels on the GPU while they hold it, as dcgm-exporter writes them in Kubernetes mode), an
  idle pod, an idle GPU without a pod, an exporter outage, a thermal slowdown; gpu-a's
  exporter also has the profiling and health series (XIDs, ECC counts, remapped rows),
  gpu-b's not; and, far before it, a stretch of series without `UUID`, one without
  `Hostname`, and one of a MIG-enabled GPU (`MIG_MIN`: two MIG devices, as dcgm-exporter's
  default `-d f` exports them, every series with `GPU_I_ID` and `GPU_I_PROFILE`).
- The history is backfilled with `promtool tsdb create-blocks-from openmetrics` before
  Prometheus starts, with the `job` and `instance` labels of the live scrape.
- `StandInExporter`: a small http.server serving the exporter's text format, live, with the
  same names and labels; a test sets a GPU's utilization and pod while Prometheus scrapes it.
- `PrometheusServer`: the `prometheus` process on 127.0.0.1 at a free port, started on a
  copy of the backfilled data (`start_prometheus`), so a test can stop one mid-run.

`ensure_prometheus()` installs Debian's package when `prometheus` or `promtool` is missing
(`make prometheus` does the same before the test suite).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.ports import free_port

JOB = "dcgm"
MODEL = "NVIDIA H100 80GB HBM3"
SCRAPE_S = 15  # the history's scrape interval
HISTORY_HOURS = 4
MIB = 1024 * 1024
POWER_LIMIT_W = 700.0

# The series the stand-in exports: dcgm-exporter's names (the older throttle-reasons name,
# so that the importer's fallback to it is exercised; no profiling metrics).
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
METRIC_NAMES = (
    GPU_UTIL,
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
)
# gpu-a's too: DCGM's profiling ratios (0-1) and rates (bytes/s), and its health series.
PROFILING_NAMES = (
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "DCGM_FI_PROF_NVLINK_RX_BYTES",
)
XID = "DCGM_FI_DEV_XID_ERRORS"
HEALTH_NAMES = (
    XID,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
)
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # the MIG devices' utilization
ALL_NAMES = (*METRIC_NAMES, *PROFILING_NAMES, *HEALTH_NAMES, ENGINE_ACTIVE)


@dataclass(frozen=True)
class Gpu:
    host: str
    index: int

    @property
    def uuid(self) -> str:
        return f"GPU-{self.host}-{self.index:04d}-0000-0000-000000000000"


GPUS = (Gpu("gpu-a", 0), Gpu("gpu-a", 1), Gpu("gpu-b", 0), Gpu("gpu-b", 1))


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    gpu: Gpu
    start_min: int  # minutes after the history's start: it holds the GPU in (start, end]
    end_min: int
    busy_pct: float  # its utilization while it computes
    idle_from_min: int | None = None  # from here to its end it holds the GPU at 0 %


PODS = (
    # Computes for 90 minutes, then holds the GPU idle for 50: waste, attributed to it.
    Pod("ml-train", "trainer-0", GPUS[0], 10, 150, 85.0, idle_from_min=100),
    # Crosses several import windows; busy throughout.
    Pod("ml-train", "trainer-1", GPUS[1], 30, 200, 60.0),
    # Holds its GPU the whole history and beyond (the live scrape carries it on).
    Pod("ml-infer", "server-7", GPUS[2], -10, 100_000, 50.0),
)
OUTAGE_MIN = (120, 135)  # gpu-b's exporter does not answer: no scrapes, a gap
THERMAL_MIN = (60, 66)  # gpu-b:0 slows down (HW thermal, 0x40)
# gpu-b:0 (server-7) idles at 3 % for 20 minutes: idle, but too short to be waste.
SHORT_IDLE_MIN = (40, 60)
# XID codes (dcgm-exporter's gauge of the last one seen) from a minute (exclusive) on:
# gpu-a:0 shows 79, then 13 from a scrape in the middle of a step; gpu-a:1 two codes in
# one step. gpu-a:1's row remapping is pending, and an uncorrected ECC error counted, later.
XID_FROM_MIN = {0: ((70.0, 79), (90.4, 13)), 1: ((50.0, 31), (50.6, 43))}
REMAP_PENDING_MIN = 121.0
# The MIG-enabled GPU's stretch (minutes after the history's start, far before it), and its
# MIG devices: (GPU_I_ID, GPU_I_PROFILE, engine activity 0-1, FB_USED MiB, FB_FREE MiB).
MIG_MIN = (-14 * 60, -14 * 60 + 20)
MIG_GPU_HOST = "gpu-m"
MIG_DEVICES = (("2", "3g.40gb", 0.6, 30_000.0, 10_000.0), ("9", "1g.10gb", 0.1, 2_000.0, 7_000.0))
MIG_POWER_W = 350.0


@dataclass(frozen=True)
class Scrape:
    t: int  # seconds since the epoch
    gpu: Gpu
    pod: Pod | None
    values: dict[str, float]
    mig: tuple[str, str] | None = None  # a MIG device's GPU_I_ID and GPU_I_PROFILE


def labels_of(
    gpu: Gpu, pod: Pod | None, instance: str, mig: tuple[str, str] | None = None
) -> dict[str, str]:
    """The labels dcgm-exporter (Kubernetes mode) and the scrape put on a GPU's series."""
    labels = {
        "gpu": str(gpu.index),
        "UUID": gpu.uuid,
        "pci_bus_id": f"00000000:{0x18 + gpu.index:02X}:00.0",
        "device": f"nvidia{gpu.index}",
        "modelName": MODEL,
    }
    if mig is not None:
        labels |= {"GPU_I_PROFILE": mig[1], "GPU_I_ID": mig[0]}
    labels["Hostname"] = gpu.host
    if pod is not None:
        labels |= {"namespace": pod.namespace, "pod": pod.name, "container": "main"}
    return labels | {"job": JOB, "instance": instance}


def xid_at(gpu: Gpu, minute: float) -> float:
    """gpu-a's XID gauge at a minute of the history (0: none since the driver loaded)."""
    code = 0
    for since, value in XID_FROM_MIN.get(gpu.index, ()) if gpu.host == "gpu-a" else ():
        if minute > since:
            code = value
    return float(code)


def health_and_activity(gpu: Gpu, util: float, minute: float, tick: int) -> dict[str, float]:
    """The profiling and health series of a gpu-a GPU at a scrape."""
    ratio = util / 100
    return {
        "DCGM_FI_PROF_SM_ACTIVE": ratio * 0.9,
        "DCGM_FI_PROF_SM_OCCUPANCY": ratio * 0.4 + 0.01 * (tick % 2),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ratio * 0.3,
        "DCGM_FI_PROF_DRAM_ACTIVE": ratio * 0.2 + 0.05,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 1.0e9 * (1 + tick % 3),
        "DCGM_FI_PROF_PCIE_RX_BYTES": 2.5e8 * (1 + tick % 2),
        "DCGM_FI_PROF_NVLINK_TX_BYTES": 4.0e10 * ratio,
        "DCGM_FI_PROF_NVLINK_RX_BYTES": 3.0e10 * ratio + 1.0e6,
        XID: xid_at(gpu, minute),
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": float(int(minute) // 10 + gpu.index),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1.0 if gpu.index == 1 and minute > 120 else 0.0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": (
            1.0 if gpu.index == 1 and minute > REMAP_PENDING_MIN else 0.0
        ),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": float(tick // 40),
    }


def _util(gpu: Gpu, pod: Pod | None, minute: float, tick: int) -> float:
    if pod is None:
        return 0.0
    if pod.idle_from_min is not None and minute > pod.idle_from_min:
        return 0.0
    if gpu == GPUS[2] and SHORT_IDLE_MIN[0] < minute <= SHORT_IDLE_MIN[1]:
        return 3.0
    return pod.busy_pct + (-5.0, 0.0, 5.0, 0.0)[tick % 4]  # a mean that is not every value


@dataclass
class FleetHistory:
    """Every scrape of the backfilled history, `[start, end)` at `SCRAPE_S` seconds."""

    start: int  # a whole minute
    instance: str  # the live scrape's `instance` label: 127.0.0.1:<exporter port>
    scrapes: list[Scrape] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.start + HISTORY_HOURS * 3600

    def pod_at(self, gpu: Gpu, t: int) -> Pod | None:
        for pod in PODS:
            if (
                pod.gpu == gpu
                and self.start + pod.start_min * 60 < t <= self.start + pod.end_min * 60
            ):
                return pod
        return None

    def build(self) -> FleetHistory:
        energy = {gpu: 1_000_000_000.0 for gpu in GPUS}
        violation = {gpu: [0.0, 0.0] for gpu in GPUS}
        for tick, t in enumerate(range(self.start, self.end, SCRAPE_S)):
            minute = (t - self.start) / 60
            for gpu in GPUS:
                if gpu.host == "gpu-b" and OUTAGE_MIN[0] < minute <= OUTAGE_MIN[1]:
                    continue
                pod = self.pod_at(gpu, t)
                util = _util(gpu, pod, minute, tick)
                power = 80.0 + 6.0 * util
                energy[gpu] += power * SCRAPE_S * 1000
                thermal = gpu == GPUS[2] and THERMAL_MIN[0] < minute <= THERMAL_MIN[1]
                violation[gpu][0] += SCRAPE_S * 1e6 if thermal else 0.0
                violation[gpu][1] += SCRAPE_S * 1e6 if util > 80 else 0.0
                used_mib = 20_000.0 + 100 * (tick % 3) if pod else 0.0
                extra = health_and_activity(gpu, util, minute, tick) if gpu.host == "gpu-a" else {}
                self.scrapes.append(
                    Scrape(
                        t,
                        gpu,
                        pod,
                        extra
                        | {
                            GPU_UTIL: util,
                            "DCGM_FI_DEV_MEM_COPY_UTIL": util / 4,
                            "DCGM_FI_DEV_FB_USED": used_mib,
                            "DCGM_FI_DEV_FB_FREE": 81_559.0 - used_mib,
                            "DCGM_FI_DEV_POWER_USAGE": power,
                            "DCGM_FI_DEV_POWER_MGMT_LIMIT": POWER_LIMIT_W,
                            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": energy[gpu],
                            "DCGM_FI_DEV_GPU_TEMP": 40.0 + util / 4 + (tick % 2),
                            "DCGM_FI_DEV_MEMORY_TEMP": 38.0 + util / 5,
                            "DCGM_FI_DEV_SM_CLOCK": 1400.0 if thermal else 1980.0,
                            "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
                            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x40 if thermal else 0.0,
                            "DCGM_FI_DEV_THERMAL_VIOLATION": violation[gpu][0],
                            "DCGM_FI_DEV_POWER_VIOLATION": violation[gpu][1],
                        },
                    )
                )
        self.scrapes.extend(self.mig_scrapes())
        return self

    @property
    def mig_gpu(self) -> Gpu:
        return Gpu(MIG_GPU_HOST, 0)

    def mig_scrapes(self) -> list[Scrape]:
        """The MIG-enabled GPU's stretch: each MIG device's series, the GPU's own values
        (power, temperature, XID) on both as DCGM gives them for a GPU instance."""
        scrapes = []
        a, b = (self.start + m * 60 for m in MIG_MIN)
        for tick, t in enumerate(range(a, b, SCRAPE_S)):
            for gi, profile, engine, used, free in MIG_DEVICES:
                busy = engine + (-0.05, 0.05)[tick % 2]
                values = {
                    ENGINE_ACTIVE: busy,
                    "DCGM_FI_PROF_SM_ACTIVE": busy * 0.8,
                    "DCGM_FI_DEV_FB_USED": used + tick,
                    "DCGM_FI_DEV_FB_FREE": free - tick,
                    "DCGM_FI_DEV_POWER_USAGE": MIG_POWER_W + tick % 4,
                    "DCGM_FI_DEV_GPU_TEMP": 50.0 + tick % 2,
                    XID: 0.0,
                }
                scrapes.append(Scrape(t, self.mig_gpu, None, values, (gi, profile)))
        return scrapes

    def bad_stretches(self) -> dict[str, tuple[int, int]]:
        """Spans (far before the history, in blocks of their own) where a GPU's series
        lacks a key label: {"UUID": (start, end), "Hostname": (start, end)}."""
        return {
            "UUID": (self.start - 6 * 3600, self.start - 6 * 3600 + 600),
            "Hostname": (self.start - 10 * 3600, self.start - 10 * 3600 + 600),
        }

    def openmetrics(self) -> str:
        """The history as OpenMetrics text for `promtool tsdb create-blocks-from`."""
        lines: list[str] = []
        for name in ALL_NAMES:
            lines.append(f"# TYPE {name} gauge")
            by_series: dict[str, list[str]] = {}
            for scrape in self.scrapes:
                if name not in scrape.values:
                    continue
                value = scrape.values[name]
                labels = labels_of(scrape.gpu, scrape.pod, self.instance, scrape.mig)
                if name == XID:  # dcgm-exporter names the code in labels too (3.3.5 on)
                    labels |= {"err_code": str(int(value)), "err_msg": f"XID {int(value)}"}
                key = _label_text(labels)
                by_series.setdefault(key, []).append(f"{value!r} {scrape.t}")
            if name == GPU_UTIL:
                for missing, (a, b) in self.bad_stretches().items():
                    labels = labels_of(GPUS[3], None, self.instance)
                    del labels[missing]
                    key = _label_text(labels)
                    by_series[key] = [f"1 {t}" for t in range(a, b, SCRAPE_S)]
            for key, points in by_series.items():
                lines.extend(f"{name}{key} {point}" for point in points)
        lines.append("# EOF")
        return "\n".join(lines) + "\n"


def _label_text(labels: dict[str, str]) -> str:
    return "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items()) + "}"


class StandInExporter:
    """dcgm-exporter's /metrics, live: each GPU's current utilization and pod."""

    def __init__(self, port: int, instance: str) -> None:
        self.instance = instance
        self.lock = threading.Lock()
        self.state: dict[Gpu, tuple[float, Pod | None]] = {gpu: (0.0, None) for gpu in GPUS}
        self.state[GPUS[2]] = (PODS[2].busy_pct, PODS[2])  # server-7 goes on
        self.energy = 2_000_000_000.0
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def set(self, gpu: Gpu, util: float, pod: Pod | None) -> None:
        with self.lock:
            self.state[gpu] = (util, pod)

    def text(self) -> str:
        with self.lock:
            state = dict(self.state)
            self.energy += 1000.0
        lines = []
        for name in METRIC_NAMES:
            lines.append(f"# HELP {name} {name}.")
            lines.append(f"# TYPE {name} gauge")
            for gpu, (util, pod) in state.items():
                labels = labels_of(gpu, pod, self.instance)
                del labels["job"], labels["instance"]
                value = {
                    GPU_UTIL: util,
                    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": self.energy,
                    "DCGM_FI_DEV_POWER_MGMT_LIMIT": POWER_LIMIT_W,
                }.get(name, 1.0)
                lines.append(f"{name}{_label_text(labels)} {value:g}")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def ensure_prometheus() -> None:
    """Install Debian's `prometheus` (with `promtool`) when either is missing."""
    if shutil.which("prometheus") and shutil.which("promtool"):
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "prometheus"],
    ):
        subprocess.run([*sudo, *command], check=True, env=env, capture_output=True, timeout=600)
    # The package's init script may have started the system's own Prometheus (port 9090):
    # these tests start their own, on ports of their own, and leave that one alone.


def backfill(history: FleetHistory, tsdb: Path) -> None:
    tsdb.mkdir(parents=True, exist_ok=True)
    source = tsdb.parent / "history.om"
    source.write_text(history.openmetrics())
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(tsdb)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    source.unlink()


@dataclass
class PrometheusServer:
    """One `prometheus` process on 127.0.0.1."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result, now."""
        return self.query_at(promql, None)

    def query_at(self, promql: str, at_s: float | None) -> list[dict[str, Any]]:
        """An instant query's result at `at_s` (a range selector gives the raw samples)."""
        params = {"query": promql} | ({} if at_s is None else {"time": str(at_s)})
        address = f"{self.url}/api/v1/query?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(address, timeout=5) as response:
            return list(json.loads(response.read())["data"]["result"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_prometheus(workdir: Path, tsdb_source: Path, exporter_port: int) -> PrometheusServer:
    """A Prometheus on a copy of the backfilled TSDB, scraping the stand-in every second;
    returns once it is ready (the first scrape comes later: `wait_for_scrape`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    tsdb = workdir / "tsdb"
    shutil.copytree(tsdb_source, tsdb)
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: {JOB}\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n"
    )
    port = free_port()
    log = workdir / "prometheus.log"
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tsdb}",
            "--storage.tsdb.retention.time=30d",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    server = PrometheusServer(process, port, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited: {log.read_text()[-2000:]}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as response,
        ):
            if response.status == 200:
                return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"prometheus was not ready within 30 s: {log.read_text()[-2000:]}")


def wait_for_scrape(server: PrometheusServer, timeout_s: float = 30.0) -> None:
    """Until the stand-in has been scraped (`up == 1`; the first scrape comes seconds after
    Prometheus is ready)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        up = server.query(f'up{{job="{JOB}"}}')
        if up and up[0]["value"][1] == "1":
            return
        time.sleep(0.2)
    raise RuntimeError("prometheus did not scrape the stand-in exporter")


@dataclass
class PrometheusStack:
    """The session's history, its backfilled TSDB, the live stand-in and a Prometheus."""

    history: FleetHistory
    tsdb: Path  # the backfilled blocks, copied by each Prometheus started on them
    exporter: StandInExporter
    exporter_port: int
    server: PrometheusServer
    workdir: Path

    @property
    def url(self) -> str:
        return self.server.url

    def another_prometheus(self, name: str) -> PrometheusServer:
        """A second Prometheus on the same history (for a test that stops it)."""
        return start_prometheus(self.workdir / name, self.tsdb, self.exporter_port)


@contextlib.contextmanager
def prometheus_stack(workdir: Path) -> Iterator[PrometheusStack]:
    ensure_prometheus()
    exporter_port = free_port()
    instance = f"127.0.0.1:{exporter_port}"
    now = int(time.time())
    history = FleetHistory(start=now // 60 * 60 - 60 - HISTORY_HOURS * 3600, instance=instance)
    history.build()
    tsdb = workdir / "backfilled"
    backfill(history, tsdb)
    exporter = StandInExporter(exporter_port, instance)
    try:
        server = start_prometheus(workdir / "main", tsdb, exporter_port)
        try:
            wait_for_scrape(server)
            yield PrometheusStack(history, tsdb, exporter, exporter_port, server, workdir)
        finally:
            server.stop()
    finally:
        exporter.close()
