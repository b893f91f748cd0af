"""The collector's cost for 8 GPUs on the fake NVML.

    .venv/bin/python -m bench.collector            # prints a markdown table

Measured in a fresh subprocess, so that its peak RSS is the collector's own:

- CPU per tick: `time.process_time` (user + system, so the spool's write and fdatasync count)
  around `Collector.tick()`, minus the CPU spent inside the fake NVML functions (timed
  around each call), amortising the Parquet flush every 60 ticks;
- peak RSS: `ru_maxrss` of that process (imports of pyarrow and pynvml included), with
  and without numpy importable (pyarrow imports it when present);
- bytes per sample: the Parquet files' size over their rows, 60 ticks (10 min at 10 s) a file.

The fake NVML fills each GPU's utilization sample buffer at 6 samples/s, so every tick
averages 60 samples per kind, as on a real GPU with a 10 s interval.
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.proc import status_kb

GPUS = 8
TICKS_PER_FILE = 60
FILES = 3
INTERVAL_S = 10.0
REPO = Path(__file__).resolve().parents[1]


def _child(data_dir: Path) -> dict[str, Any]:
    """Runs in the subprocess: FILES x TICKS_PER_FILE ticks of a GPUS-GPU host."""
    import pynvml

    from gpufleet.collectors.collect import Collector
    from tests.fake_nvml import FakeNvml, ManualClock, fleet_scenario

    mono = ManualClock(10_000.0)
    wall = ManualClock(1_795_000_000.0)  # 2026-11-18T11:06:40Z, far from midnight
    scenario = fleet_scenario(GPUS)
    for index, gpu in enumerate(scenario["gpus"]):
        gpu["compute_processes"] = [
            {"pid": os.getpid(), "used_mem_bytes": 20_000_000_000 + index},
            {"pid": 4_000_000 + index, "used_mem_bytes": 1_000_000_000},
        ]
    fake = FakeNvml(scenario, clock_us=mono.us)
    nvml_ns = [0]

    def timed(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                nvml_ns[0] += time.process_time_ns() - start

        return call

    fake.install(lambda module, name, fn: setattr(module, name, timed(fn)))
    collector = Collector(
        data_dir=data_dir,
        interval_s=INTERVAL_S,
        flush_s=INTERVAL_S * TICKS_PER_FILE,
        host="bench-host",
        wall_clock=wall,
        monotonic=mono,
        stderr=io.StringIO(),
    )
    collector.start()
    tick_ns: list[int] = []
    tick_nvml_ns: list[int] = []
    for _ in range(FILES * TICKS_PER_FILE):
        mono.advance(INTERVAL_S)
        wall.advance(INTERVAL_S)
        nvml_ns[0] = 0
        start = time.process_time_ns()
        collector.tick()
        tick_ns.append(time.process_time_ns() - start)
        tick_nvml_ns.append(nvml_ns[0])
    collector.close()
    pynvml.nvmlShutdown()

    own_ms = sorted((t - n) / 1e6 for t, n in zip(tick_ns, tick_nvml_ns, strict=True))
    files = sorted((data_dir / "raw" / "samples").rglob("*.parquet"))
    import pyarrow.parquet as pq

    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    size = sum(f.stat().st_size for f in files)
    return {
        "gpus": GPUS,
        "ticks": len(tick_ns),
        "cpu_ms_per_tick": sum(own_ms) / len(own_ms),
        "cpu_ms_per_tick_p50": own_ms[len(own_ms) // 2],
        "cpu_ms_per_tick_max": own_ms[-1],  # a tick that also wrote a Parquet file
        "nvml_fake_ms_per_tick": sum(tick_nvml_ns) / len(tick_nvml_ns) / 1e6,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_anon_mb": status_kb("RssAnon") / 1024,
        "files": len(files),
        "rows": rows,
        "bytes_per_sample": size / rows if rows else float("nan"),
    }


def _run_child(*, without_numpy: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-collector-") as tmp:
        mode = "--child-without-numpy" if without_numpy else "--child"
        completed = subprocess.run(
            [sys.executable, "-m", "bench.collector", mode, tmp],
            cwd=REPO,
            # as `gpufleet collect` runs it (cli/collect.py), unless the caller says otherwise
            env={"ARROW_DEFAULT_MEMORY_POOL": "system", **os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=False,
        )
    if completed.returncode != 0:
        raise RuntimeError(f"collector benchmark failed:\n{completed.stderr}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def run_collector_bench() -> dict[str, Any]:
    """Run the benchmark in fresh processes; returns its figures (see the module doc).

    `max_rss_mb` is measured as this environment is installed: pyarrow imports numpy when
    it is present (the pipeline extra installs it). `max_rss_mb_without_numpy` is the same
    run with numpy hidden, as on a GPU host with only `pip install gpufleet`.
    """
    result = _run_child(without_numpy=False)
    result["max_rss_mb_without_numpy"] = _run_child(without_numpy=True)["max_rss_mb"]
    return result


def markdown(result: dict[str, Any]) -> str:
    cpu = result["cpu_ms_per_tick"]
    rss = result["max_rss_mb"]
    return "\n".join(
        [
            f"Collector, {result['gpus']} GPUs on the fake NVML, {result['ticks']} ticks, "
            f"{result['files']} files of {TICKS_PER_FILE} ticks:",
            "",
            "| figure | measured | target |",
            "|---|---|---|",
            f"| CPU per tick, excluding NVML (mean, flush amortised) | {cpu:.3f} ms | <= 2 ms |",
            f"| CPU per tick, median / max (max = a tick that flushes) | "
            f"{result['cpu_ms_per_tick_p50']:.3f} / {result['cpu_ms_per_tick_max']:.1f} ms | |",
            f"| CPU inside the fake NVML per tick (excluded) | "
            f"{result['nvml_fake_ms_per_tick']:.3f} ms | |",
            f"| peak RSS (pyarrow imports numpy, as in this venv) | {rss:.1f} MB | <= 80 MB |",
            f"| peak RSS without numpy (`pip install gpufleet` only) | "
            f"{result['max_rss_mb_without_numpy']:.1f} MB | <= 80 MB |",
            f"| Parquet bytes per sample | {result['bytes_per_sample']:.1f} B | |",
        ]
    )


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] in ("--child", "--child-without-numpy"):
        if argv[0] == "--child-without-numpy":
            sys.modules["numpy"] = None  # type: ignore[assignment]  # import numpy fails
        print(json.dumps(_child(Path(argv[1]))))
        return 0
    result = run_collector_bench()
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
