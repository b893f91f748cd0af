"""The full build embedded and fanned out over Dask (`[compute] dask`, docs/dask.md).

python -m bench.dask_build --gpus 128 --days 2        # a quick run (minutes)
python -m bench.dask_build --gpus 1000 --days 7       # the bench fleet's week (a quiet machine)
python -m bench.dask_build --gpus 256 --days 2 --backfill  # a backfill's ingest instead

Simulates the fleet (once per data folder), backfills it (its days go to the lake), then
times full builds embedded, on `local:1` and on `local:2`, each partition's worker time and
bytes, where each build's wall and CPU time went (the per-series models or their fan-out:
inputs, partitions, the workers' start, the load of the partials; the rest of the build;
the machine's load average beside), and projects the time at 8, 32 and 128 workers for
10,000 and 50,000 GPUs x 90 days from what it measured, with the assumptions printed beside
the figures. Without PREFECT_API_URL it starts a temporary Prefect server that the workers
report to. The workers' CPU is that of the processes a build starts: the `local:N` workers
and the forkserver they are forked from (gpufleet/flows/local_cluster.py), which is
stopped after each build, so that each build pays its imports as a new process does.

With --backfill it times instead the backfill of the simulated fleet's files (every day of
it over, none loaded yet), each on a copy of the same data folder: embedded (most host-days
written from the load's rows on the pipeline host) and on `local:1` and `local:2` (every
host-day compacted from its files by the workers), with the tasks' times.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from bench.step import simulation_spec
from gpufleet.config import ComputeConfig, Config, load_config

SAMPLES_PER_GPU_DAY = 8640  # one sample per 10 s
LAKE_BYTES_PER_SAMPLE = 11.0  # the compacted lake (bench/results.md)
WORKER_READ_MB_S = 100.0  # assumed: each worker reads the lake at 100 MB/s (S3 or NFS)
CLUSTER_START_S = 30.0  # assumed: workers already running; connecting and warming up


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fleet(config: Config, gpus: int, days: int) -> int:
    """Simulate and backfill the fleet unless done; its samples."""
    from gpufleet.simulate.fleet import simulate_fleet
    from gpufleet.warehouse.build import build
    from gpufleet.warehouse.ingest import ingest
    from gpufleet.warehouse.publish import connect_read_only

    if not config.warehouse_path.exists():
        start = dt.date.today() - dt.timedelta(days=days + 7)
        spec = simulation_spec(config, gpus, start, days, flush_s=86400.0)
        log(f"simulating {gpus} GPUs x {days} days in {config.data_dir}")
        simulate_fleet(spec, data_dir=config.data_dir, progress=lambda _: None)
        ingest(config)
        build(config)
    with connect_read_only(config) as con:
        row = con.execute("select count(*) from samples").fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def _prefect_server() -> Iterator[None]:
    if os.environ.get("PREFECT_API_URL"):
        yield
        return
    from prefect.testing.utilities import prefect_test_harness

    log("starting a temporary Prefect server")
    with prefect_test_harness(server_startup_timeout=180):
        yield


class Timed(NamedTuple):
    """One full build: its wall time and where the CPU went."""

    seconds: float
    report: Any  # the fan-out's report (None embedded)
    result: Any  # the BuildResult: each step's wall and CPU time on the pipeline host
    host_cpu_s: float  # this process: the build, the Prefect client, the Dask scheduler
    workers_cpu_s: float  # the processes it started and reaped: the local:N workers (and
    # the forkserver they are forked from, which imports their modules)
    load_average: tuple[float, float]  # the machine's 1-minute load at the start and end


def _time_build(config: Config, dask: str) -> Timed:
    """One full build, embedded or on `dask`."""
    load = os.getloadavg()[0]
    own, children = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result, report = _build(config, dask)
    seconds = time.perf_counter() - started
    _stop_forkserver()
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    workers = reaped.ru_utime + reaped.ru_stime - children.ru_utime - children.ru_stime
    return Timed(
        seconds, report, result, time.process_time() - own, workers, (load, os.getloadavg()[0])
    )


def _stop_forkserver() -> None:
    """Stop the forkserver that `local:N` forks its workers from (gpufleet/flows/
    local_cluster.py) and reap it: its CPU and its workers' (which it reaped) are then this
    process's reaped children's, and the next build starts one as a new process would.
    `_stop` is the standard library's own (its tests use it), not a public API."""
    from multiprocessing import forkserver

    forkserver._forkserver._stop()  # type: ignore[attr-defined]


def _build(config: Config, dask: str) -> tuple[Any, Any]:
    """One full build's result, and the fan-out's report (None embedded)."""
    from gpufleet.warehouse.build import build

    if not dask:
        return build(config, full=True), None
    from prefect import flow

    from gpufleet.flows.fanout import dask_fan_out

    on_dask = replace(config, compute=ComputeConfig(dask=dask))
    fan_out = dask_fan_out(on_dask)

    @flow(name="bench-dask-build")
    def full_build() -> Any:
        return build(on_dask, full=True, fan_out=fan_out)

    return full_build(), fan_out.last


def _where(dask: str, timed: Timed) -> list[str]:
    """Where a build's time and CPU went: the per-series models (embedded) or their
    fan-out (inputs, partitions, the load of the partials), and the rest of the build."""
    from gpufleet.warehouse.build.full import CHUNKED_MODELS

    lines = [
        f"  {dask or 'embedded'}: {timed.seconds:.1f} s wall; CPU {timed.host_cpu_s:.1f} s "
        f"pipeline host + {timed.workers_cpu_s:.1f} s workers; load average "
        f"{timed.load_average[0]:.1f} -> {timed.load_average[1]:.1f}"
    ]
    steps = timed.result.steps
    series = [step for step in steps if set(step.name.split("+")) & CHUNKED_MODELS.keys()]
    rest = [step for step in steps if step not in series]
    for step in series:
        lines.append(f"    {step.name}: {step.seconds:.1f} s wall, {step.cpu_s:.1f} s CPU here")
    report = timed.report
    if report is not None:
        longest = max((result.seconds for result in report.results), default=0.0)
        partitions_cpu = sum(result.cpu_seconds for result in report.results)
        lines.append(
            f"      the workers' CPU: {partitions_cpu:.1f} s in the partitions, "
            f"{timed.workers_cpu_s - partitions_cpu:.1f} s starting and running the tasks"
        )
        lines.append(
            f"      of which: inputs written {report.export_seconds:.1f} s "
            f"({report.input_bytes / 1e6:.1f} MB); partitions {report.run_seconds:.1f} s, "
            f"the cluster's start and Prefect's task runs ~{report.run_seconds - longest:.1f} s "
            f"of it (beyond the longest partition); partials loaded {report.load_seconds:.1f} s "
            f"wall, {report.load_cpu_seconds:.1f} s CPU"
        )
    wall = sum(step.seconds for step in rest)
    cpu = sum(step.cpu_s for step in rest)
    lines.append(f"    the rest of the build: {wall:.1f} s wall, {cpu:.1f} s CPU here")
    return lines


def _partitions(report: Any) -> list[str]:
    lines = []
    for partition, result in zip(report.partitions, report.results, strict=True):
        written = ", ".join(
            f"{name} {result.rows[name]:,} rows {result.bytes[name] / 1e6:.1f} MB"
            for name in result.rows
        )
        lines.append(
            f"    {partition.label.split(' (')[0]}: {result.seconds:.2f} s "
            f"({result.cpu_seconds:.2f} s CPU); {written}"
        )
    return lines


def _projection(
    worker_s_per_sample: float, load_s_per_sample: float, embedded_s_per_sample: float
) -> list[str]:
    from gpufleet.warehouse.build.full import FULL_BUILD_CHUNK_SAMPLES

    lines = [
        "projection (a model, not a measurement): time = start + rounds x partition + load,",
        f"  start {CLUSTER_START_S:.0f} s (assumed: workers running, the cluster connected);",
        f"  partitions of {FULL_BUILD_CHUNK_SAMPLES:,} samples, at least one per worker;",
        f"  a partition's work at the measured {worker_s_per_sample * 1e6:.2f} worker-s per",
        "  million samples (local:1, this machine's cores per worker), plus reading its",
        f"  {LAKE_BYTES_PER_SAMPLE:.0f} bytes/sample of lake at {WORKER_READ_MB_S:.0f} MB/s "
        "per worker (assumed: S3 or NFS, the store not the limit);",
        f"  the host's load of the partials at the measured {load_s_per_sample * 1e6:.2f} s per",
        "  million samples, serial on the pipeline host (the part more workers do not shrink)",
    ]
    for gpus in (10_000, 50_000):
        total = gpus * 90 * SAMPLES_PER_GPU_DAY
        per_partition = FULL_BUILD_CHUNK_SAMPLES
        partition_s = per_partition * (
            worker_s_per_sample + LAKE_BYTES_PER_SAMPLE / (WORKER_READ_MB_S * 1e6)
        )
        cells = []
        for workers in (8, 32, 128):
            partitions = max(workers, -(-total // per_partition))
            rounds = -(-partitions // workers)
            seconds = CLUSTER_START_S + rounds * partition_s + total * load_s_per_sample
            cells.append(f"{workers} workers {seconds / 3600:.1f} h")
        cells.append(f"embedded on one such host {total * embedded_s_per_sample / 3600:.1f} h")
        lines.append(
            f"  {gpus:,} GPUs x 90 days ({total / 1e9:.1f} billion samples): " + "; ".join(cells)
        )
    return lines


def _raw_fleet(folder: Path, gpus: int, days: int) -> Path:
    """A data folder holding a simulated fleet's collector files, none loaded (simulated
    unless done)."""
    from gpufleet.simulate.fleet import simulate_fleet

    config = load_config(data_dir=folder, environ={})
    if not (config.data_dir / "raw" / "samples").is_dir():
        start = dt.date.today() - dt.timedelta(days=days + 7)
        spec = simulation_spec(config, gpus, start, days, flush_s=600.0)
        log(f"simulating {gpus} GPUs x {days} days in {config.data_dir}")
        simulate_fleet(spec, data_dir=config.data_dir, progress=lambda _: None)
    return config.data_dir


def _time_backfill(raw: Path, dask: str) -> tuple[float, Any, Any]:
    """The backfill's wall time on a copy of `raw`, its compaction, the fan-out's report."""
    from prefect import flow

    from gpufleet.flows.compact import dask_compact_fan_out, dask_load_fan_out
    from gpufleet.warehouse.ingest.run import load_new_files

    copy = raw.with_name(f"{raw.name}-{dask.replace(':', '') or 'embedded'}")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(raw, copy)
    config = replace(load_config(data_dir=copy, environ={}), compute=ComputeConfig(dask=dask))
    fan_out = dask_compact_fan_out(config) if dask else None
    load_fan_out = dask_load_fan_out(config) if dask else None

    @flow(name="bench-dask-backfill")
    def backfill() -> Any:
        return load_new_files(config, compact_fan_out=fan_out, load_fan_out=load_fan_out)

    started = time.perf_counter()
    result = backfill()
    seconds = time.perf_counter() - started
    shutil.rmtree(copy, ignore_errors=True)
    reports = (load_fan_out.last, fan_out.last) if load_fan_out and fan_out else None
    return seconds, result, reports


def _backfill(args: argparse.Namespace, data_dir: Path) -> int:
    raw = _raw_fleet(data_dir, args.gpus, args.days)
    files = sum(1 for _ in (raw / "raw" / "samples").rglob("*.parquet"))
    lines = [
        f"backfill of {args.gpus} GPUs x {args.days} days ({files:,} files), {os.cpu_count()} cores"
    ]
    with _prefect_server():
        for dask in ("", "local:1", "local:2"):
            seconds, result, reports = _time_backfill(raw, dask)
            log(f"{dask or 'embedded'}: {seconds:.1f} s")
            steps = ", ".join(f"{name} {value:.1f} s" for name, value in result.step_seconds)
            lines.append(f"  {dask or 'embedded'}: {seconds:.1f} s ingest; {result.compaction}")
            lines.append(f"    steps on the pipeline host: {steps}")
            for what, report in zip(("load", "compaction"), reports or (None, None), strict=True):
                if report is None:
                    continue
                worker_s = ", ".join(f"{task.seconds:.1f}" for task in report.results)
                lines.append(
                    f"    {what}: {report.tasks} tasks in {report.run_seconds:.1f} s (cluster "
                    f"start included), each on its worker {worker_s} s"
                )
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=128)
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument(
        "--backfill", action="store_true", help="time a backfill's ingest, not a full build"
    )
    args = parser.parse_args(argv)
    data_dir = (
        args.data_dir or Path(tempfile.gettempdir()) / f"gpufleet-dask-{args.gpus}x{args.days}"
    )
    if args.backfill:
        return _backfill(args, data_dir.with_name(f"{data_dir.name}-raw"))
    config = load_config(data_dir=data_dir, environ={})
    samples = _fleet(config, args.gpus, args.days)
    lines = [
        f"full build of {args.gpus} GPUs x {args.days} days ({samples:,} samples), "
        f"{os.cpu_count()} cores"
    ]
    walls: dict[str, float] = {}
    reports: dict[str, Any] = {}
    where: list[str] = ["where the time went (the last run of each):"]
    with _prefect_server():
        for dask in ("", "local:1", "local:2"):
            times = []
            for _ in range(args.repeat):
                timed = _time_build(config, dask)
                times.append(timed.seconds)
                reports[dask] = timed.report
            walls[dask] = statistics.median(times)
            where += _where(dask, timed)
            log(f"{dask or 'embedded'}: {walls[dask]:.1f} s")
    lines.append(f"  embedded: {walls['']:.1f} s")
    for dask in ("local:1", "local:2"):
        report = reports[dask]
        lines.append(
            f"  {dask}: {walls[dask]:.1f} s ({walls[dask] / walls['']:.2f}x embedded): host "
            f"writes inputs {report.export_seconds:.1f} s ({report.input_bytes / 1e6:.1f} MB), "
            f"partitions {report.run_seconds:.1f} s (cluster start included), host loads "
            f"partials {report.load_seconds:.1f} s"
        )
        lines += _partitions(report)
    one = reports["local:1"]
    worker_s = sum(result.seconds for result in one.results) / max(samples, 1)
    lines += where
    lines += _projection(worker_s, one.load_seconds / max(samples, 1), walls[""] / max(samples, 1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
