"""The Prometheus import's speed: a day of a 1,000-GPU fleet scraped every 30 s, backfilled
into a real Prometheus (Debian's, with promtool), imported with `gpufleet import prometheus`,
against the time Prometheus itself takes to answer the same queries.

    python -m bench.prometheus_import                       # 1,000 GPUs, 24 h, 30 s (long)
    python -m bench.prometheus_import --gpus 64 --hours 6   # a quick run

The backfilled TSDB is kept under --workdir for the next run with the same fleet (promtool
writes about 40,000 samples a second: the default fleet's 32 million take a quarter of an
hour, once). Run it on a quiet machine: the figures are wall-clock times. Figures:
- "Prometheus alone": every query of the import (the same PromQL, windows, hosts and
  read-ahead), its answer read but not parsed;
- "import": `import_prometheus` into an empty data directory (parse, rows, files);
- the import's own CPU time, and its peak RSS.
"""

from __future__ import annotations

import argparse
import datetime as dt
import resource
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpufleet.config import Config, PrometheusConfig
from gpufleet.integrations.prometheus import PrometheusApi, import_prometheus
from gpufleet.integrations.prometheus.queries import (
    METRICS,
    PRESENCE_COLUMN,
    name_matcher,
    pod_query,
    step_query,
)
from gpufleet.integrations.prometheus.run import READ_AHEAD, series_names

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
            raise RuntimeError(f"promtool failed: {process.args}")
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


def prometheus_alone(api: PrometheusApi, config: Config, start: int, end: int) -> float:
    """Seconds Prometheus takes to answer the import's queries, read but not parsed."""
    settings = config.prometheus
    chosen = series_names(api, config)
    step, window_s = settings.step_seconds, settings.window_minutes * 60
    queries: list[tuple[str, int, int]] = []
    began = time.monotonic()
    for window in range(start, end, window_s):
        last = min(window + window_s, end) - step
        hosts = api.label_values(
            settings.host_label,
            matchers=[name_matcher(sorted(set(chosen.values())))],
            start_s=window - step,
            end_s=last,
        )
        for host in sorted(hosts):
            for metric in METRICS:
                if metric.column in chosen:
                    query = step_query(
                        metric, chosen[metric.column], host=host, prometheus=settings
                    )
                    queries.append((query, window, last))
            presence = chosen[PRESENCE_COLUMN]
            pods = pod_query(presence, host=host, prometheus=settings, kubernetes=config.kubernetes)
            queries.append((pods, window, last))

    def ask(item: tuple[str, int, int]) -> int:
        query, first, last = item
        params = {"query": query, "start": first, "end": last, "step": step}
        url = f"{api.url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=600) as response:
            return len(response.read())

    with ThreadPoolExecutor(max_workers=READ_AHEAD) as pool:
        answered = sum(pool.map(ask, queries))
    log(f"prometheus alone: {len(queries):,} queries, {answered / 1e6:,.0f} MB of answers")
    return time.monotonic() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--scrape", type=int, default=30, help="scrape interval, seconds")
    parser.add_argument("--step", type=int, default=60, help="[prometheus] step_seconds")
    parser.add_argument("--window", type=int, default=60, help="[prometheus] window_minutes")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/gpufleet-bench-prometheus"))
    parser.add_argument("--port", type=int, default=19191)
    args = parser.parse_args()
    # A fixed day in the past, whole hours, so that the TSDB can be reused.
    start = 1_790_000_000 // 86400 * 86400
    workdir = args.workdir / f"{args.gpus}gpus-{args.hours}h-{args.scrape}s"
    tsdb = backfill(workdir, args.gpus, args.hours, args.scrape, start)
    process = start_prometheus(workdir, tsdb, args.port)
    try:
        url = f"http://127.0.0.1:{args.port}"
        data_dir = workdir / "data"
        shutil.rmtree(data_dir, ignore_errors=True)
        config = Config(
            data_dir=data_dir,
            prometheus=PrometheusConfig(
                url=url, step_seconds=args.step, window_minutes=args.window, delay_seconds=0
            ),
        )
        end = start + args.hours * 3600
        alone = prometheus_alone(PrometheusApi(url=url, timeout_s=600), config, start, end)
        cpu = time.process_time()
        began = time.monotonic()
        result = import_prometheus(
            config,
            since=dt.datetime.fromtimestamp(start, dt.UTC),
            until=dt.datetime.fromtimestamp(end, dt.UTC),
        )
        wall = time.monotonic() - began
        cpu = time.process_time() - cpu
    finally:
        process.terminate()
        process.wait()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(result)
    print(
        f"| {args.gpus} GPUs, {args.hours} h at {args.scrape} s, step {args.step} s | "
        f"prometheus alone {alone:.1f} s | import {wall:.1f} s ({wall / alone:.2f}x) | "
        f"import CPU {cpu:.1f} s | peak RSS {rss_mb:.0f} MB |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
