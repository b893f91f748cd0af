"""The Prometheus import's speed: a day of a 1,000-GPU fleet scraped every 30 s, backfilled
into a real Prometheus (Debian's, with promtool), imported with `gpufleet import prometheus`,
against the time Prometheus itself takes to answer the same requests.

    python -m bench.prometheus_import                       # 1,000 GPUs, 24 h, 30 s (long)
    python -m bench.prometheus_import --gpus 64 --hours 6   # a quick run

The backfilled TSDB is kept under --workdir for the next run with the same fleet (promtool
writes about 30,000-40,000 samples a second: the default fleet's 32 million take 12-17
minutes, once). Run it on a quiet machine: the figures are wall-clock times. In one run,
after one untimed query over every sample (so that neither reads a cold TSDB):
- "import": `import_prometheus` into an empty data directory, in a process of its own
  (parse, rows, files): its wall and CPU time, the process's, and its peak RSS (VmHWM);
  every URL it asks is recorded;
- "Prometheus alone": those recorded requests replayed (the same URLs in the same order,
  READ_AHEAD at a time, as the import keeps its range queries in flight), each answer read
  to its end and not parsed;
- the ratio of the two, against the target of 1.5x;
- with `--also-replay FILE`, Prometheus alone on another recorded set of requests (the
  `asked.txt` a run of an earlier version left in the workdir, copied aside): an import that
  asks fewer, larger queries changes Prometheus' side too, and this times both sets alike;
- Prometheus' own CPU time (/proc) while it answers alone and during the import: on a
  machine shared with other work, the wall times depend on the share each gets.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.proc import status_kb
from gpufleet.config import Config, PrometheusConfig
from gpufleet.integrations.prometheus import PrometheusApi, import_prometheus
from gpufleet.integrations.prometheus.run import READ_AHEAD

GPUS_PER_HOST = 8
SERIES = (  # dcgm-exporter's default counters that the import reads
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
)
POD_HOURS = 2  # each GPU holds a pod every other two hours
TARGET = 1.5  # the import's time over Prometheus' own to answer its requests


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def write_history(path: Path, hosts: range, start: int, hours: int, scrape_s: int) -> int:
    """OpenMetrics text of `hosts`' GPUs; returns the number of samples."""
    samples = 0
    times = range(start, start + hours * 3600, scrape_s)
    with path.open("w") as out:
        for name in SERIES:
            out.write(f"# TYPE {name} gauge\n")
            for host in hosts:
                for gpu in range(GPUS_PER_HOST):
                    base = (
                        f'gpu="{gpu}",UUID="GPU-{host:05d}-{gpu}",'
                        'modelName="NVIDIA H100 80GB HBM3",'
                        f'Hostname="node{host:04d}",job="dcgm",instance="node{host:04d}:9400"'
                    )
                    for block in range(hours // POD_HOURS + 1):
                        a, b = (
                            start + block * POD_HOURS * 3600,
                            start + (block + 1) * POD_HOURS * 3600,
                        )
                        chunk = [t for t in times if a <= t < b]
                        if not chunk:
                            continue
                        labels = base
                        if block % 2 == 0:
                            labels += f',namespace="team{host % 10}",pod="job-{host}-{gpu}-{block}"'
                        value = (host * 7 + gpu * 13 + block * 29) % 100
                        out.write("".join(f"{name}{{{labels}}} {value} {t}\n" for t in chunk))
                        samples += len(chunk)
        out.write("# EOF\n")
    return samples


def backfill(workdir: Path, gpus: int, hours: int, scrape_s: int, start: int) -> Path:
    """The backfilled TSDB of the fleet (built once, then reused)."""
    tsdb = workdir / "tsdb"
    if (workdir / "done").exists():
        return tsdb
    shutil.rmtree(workdir, ignore_errors=True)
    tsdb.mkdir(parents=True)
    hosts = gpus // GPUS_PER_HOST
    # One promtool: blocks of several would overlap in time (disjoint series), and Prometheus
    # merges overlapping blocks at query time until it compacts them, which no site's
    # long-running server does.
    parts = 1
    began = time.monotonic()
    samples = 0
    commands = []
    for part in range(parts):
        text = workdir / f"history-{part}.om"
        samples += write_history(text, range(part, hosts, parts), start, hours, scrape_s)
        out = workdir / f"part-{part}"
        commands.append(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(text), str(out)]
        )
    log(f"history: {samples:,} samples written in {time.monotonic() - began:.0f} s")
    began = time.monotonic()
    for process in [subprocess.Popen(c, stdout=subprocess.DEVNULL) for c in commands]:
        if process.wait():
            raise RuntimeError(f"promtool failed: {process.args!r}")
    for part in range(parts):
        for block in (workdir / f"part-{part}").iterdir():
            block.rename(tsdb / block.name)
        (workdir / f"history-{part}.om").unlink()
    (workdir / "done").write_text(f"{samples}\n")
    log(f"backfill: {time.monotonic() - began:.0f} s")
    return tsdb


def start_prometheus(workdir: Path, tsdb: Path, port: int) -> subprocess.Popen[bytes]:
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 30s\n")
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tsdb}",
            "--storage.tsdb.retention.time=3650d",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stderr=(workdir / "prometheus.log").open("wb"),
    )
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1):
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise RuntimeError("prometheus was not ready within 5 minutes")


def child(url: str, data_dir: Path, args: argparse.Namespace, start: int, record: Path) -> None:
    """`import_prometheus` in this process (run by `measure`): one JSON line of its figures,
    and every URL it asked Prometheus, in order, written to `record` as it is asked (not
    held: the peak RSS is the import's)."""
    plain_get = PrometheusApi._get
    lock = threading.Lock()
    asked = record.open("w")

    def recorded(api: PrometheusApi, path: str, params: list[tuple[str, str]], **kw: Any) -> Any:
        with lock:
            asked.write(f"{api.url}{path}?{urllib.parse.urlencode(params)}\n")
        return plain_get(api, path, params, **kw)

    PrometheusApi._get = recorded  # type: ignore[method-assign, assignment]
    config = Config(
        data_dir=data_dir,
        prometheus=PrometheusConfig(
            url=url, step_seconds=args.step, window_minutes=args.window, delay_seconds=0
        ),
    )
    cpu, began = time.process_time(), time.monotonic()
    with asked:
        result = import_prometheus(
            config,
            since=dt.datetime.fromtimestamp(start, dt.UTC),
            until=dt.datetime.fromtimestamp(start + (args.span or args.hours) * 3600, dt.UTC),
        )
    wall, cpu = time.monotonic() - began, time.process_time() - cpu
    figures = {"seconds": wall, "cpu_s": cpu, "peak_rss_mb": status_kb("VmHWM") / 1024}
    print(json.dumps(figures | {"result": str(result)}))


def measure_import(url: str, workdir: Path, args: argparse.Namespace, start: int) -> dict[str, Any]:
    """The import in a process of its own, into an empty data directory."""
    data_dir, record = workdir / "data", workdir / "asked.txt"
    shutil.rmtree(data_dir, ignore_errors=True)
    command = [sys.executable, "-m", "bench.prometheus_import", "--child", url, str(data_dir)]
    options = ["--gpus", str(args.gpus), "--hours", str(args.hours), "--scrape", str(args.scrape)]
    options += ["--step", str(args.step), "--window", str(args.window), "--record", str(record)]
    options += ["--span", str(args.span or args.hours)]
    began = time.monotonic()
    done = subprocess.run([*command, *options], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"the import failed: {done.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures | {"process_s": time.monotonic() - began, "asked": record}


def replay(record: Path, url: str) -> tuple[float, int, int]:
    """Prometheus alone: every request the import made (the same URLs, in the same order,
    READ_AHEAD at a time, as the import keeps its range queries in flight), each answer
    read to its end and not parsed, asked of the Prometheus at `url`. Returns the seconds,
    the requests and the bytes."""
    urls = [url + address[address.index("/api/") :] for address in record.read_text().split()]

    def ask(url: str) -> int:
        with urllib.request.urlopen(url, timeout=600) as response:
            return len(response.read())

    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=READ_AHEAD) as pool:
        answered = sum(pool.map(ask, urls))
    return time.monotonic() - began, len(urls), answered


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user and system, /proc/PID/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def warm(url: str, start: int, hours: int) -> None:
    """Untimed queries over every sample, so that neither measurement reads a cold TSDB."""
    for name in SERIES:
        query = urllib.parse.urlencode({"query": f"sum(count_over_time({name}[1h]))"})
        for hour in range(hours):
            moment = start + (hour + 1) * 3600
            with urllib.request.urlopen(f"{url}/api/v1/query?{query}&time={moment}") as answer:
                answer.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--scrape", type=int, default=30, help="scrape interval, seconds")
    parser.add_argument("--step", type=int, default=60, help="[prometheus] step_seconds")
    parser.add_argument("--window", type=int, default=60, help="[prometheus] window_minutes")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/gpufleet-bench-prometheus"))
    parser.add_argument("--port", type=int, default=19191)
    parser.add_argument(
        "--span", type=int, help="hours imported, from the first (default: --hours): memory"
    )
    parser.add_argument(
        "--also-replay",
        type=Path,
        help="another run's recorded requests (its asked.txt), timed alone after this run's",
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)  # URL, data directory
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # A fixed day in the past, whole hours, so that the TSDB can be reused.
    start = 1_790_000_000 // 86400 * 86400
    if args.child:
        assert args.record is not None
        child(args.child[0], Path(args.child[1]), args, start, args.record)
        return 0
    workdir = args.workdir / f"{args.gpus}gpus-{args.hours}h-{args.scrape}s"
    tsdb = backfill(workdir, args.gpus, args.hours, args.scrape, start)
    process = start_prometheus(workdir, tsdb, args.port)
    try:
        url = f"http://127.0.0.1:{args.port}"
        warm(url, start, args.hours)
        before = cpu_seconds(process.pid)
        imported = measure_import(url, workdir, args, start)
        between = cpu_seconds(process.pid)
        alone, requests, answered = replay(imported["asked"], url)
        served = {"import": between - before, "alone": cpu_seconds(process.pid) - between}
        if args.also_replay:
            before = cpu_seconds(process.pid)
            other = replay(args.also_replay, url)
            served["other"] = cpu_seconds(process.pid) - before
    finally:
        process.terminate()
        process.wait()
    wall = imported["seconds"]
    print(imported["result"])
    log(f"prometheus alone: {requests:,} requests, {answered / 1e6:,.0f} MB of answers")
    log(
        f"Prometheus' own CPU: {served['alone']:.1f} s to answer them alone, "
        f"{served['import']:.1f} s during the import"
    )
    if args.also_replay:
        log(
            f"{args.also_replay}: {other[1]:,} requests, {other[2] / 1e6:,.0f} MB of answers, "
            f"Prometheus alone {other[0]:.1f} s (its CPU {served['other']:.1f} s)"
        )
    print(
        f"| {args.gpus} GPUs, {args.span or args.hours} h at {args.scrape} s, "
        f"step {args.step} s | "
        f"prometheus alone {alone:.1f} s | import {wall:.1f} s ({wall / alone:.2f}x, "
        f"target <= {TARGET}x) | import CPU {imported['cpu_s']:.1f} s | "
        f"process {imported['process_s']:.1f} s | peak RSS {imported['peak_rss_mb']:.0f} MB | "
        f"Prometheus CPU {served['alone']:.1f} s alone, {served['import']:.1f} s in the import |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
