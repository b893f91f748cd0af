"""One measured step of the pipeline benchmark, run as its own process by bench.pipeline.

Prints one JSON line: {"seconds": wall time of the step, "max_rss_mb": peak RSS, ...}.
The steps call the same plain functions the flows call, without a Prefect server.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from bench.proc import status_kb
from gpufleet.config import Config, load_config


def _config(data_dir: str) -> Config:
    return load_config(data_dir=data_dir, environ={})


def simulation_spec(config: Config, gpus: int, start: dt.date, days: int, flush_s: float) -> Any:
    """The simulated fleet the benches build: 8 GPUs a host, 10 s samples, seed 7."""
    from gpufleet.simulate.fleet import SimulationSpec

    return SimulationSpec.from_cli(
        config=config,
        gpus=gpus,
        gpus_per_host=8,
        week=None,
        start=start,
        days=days,
        interval_s=10.0,
        flush_s=flush_s,
        seed=7,
    )


def step_simulate(args: argparse.Namespace) -> dict[str, Any]:
    from gpufleet.simulate.fleet import simulate_fleet

    config = _config(args.data_dir)
    spec = simulation_spec(
        config, args.gpus, dt.date.fromisoformat(args.start), args.days, args.flush
    )
    summary = simulate_fleet(spec, data_dir=config.data_dir, progress=lambda _: None)
    return {"summary": str(summary)}


def step_flush(args: argparse.Namespace) -> dict[str, Any]:
    """Write the 10-minute flush that starts at --at for every host of the week that
    starts at --start, as its collectors would write next (not timed); with --until, every
    flush from --at to then."""
    from gpufleet.simulate.fleet import simulate_window

    config = _config(args.data_dir)
    at = dt.datetime.fromisoformat(args.at)
    until = dt.datetime.fromisoformat(args.until) if args.until else at + dt.timedelta(minutes=10)
    spec = simulation_spec(config, args.gpus, dt.date.fromisoformat(args.start), args.days, 600.0)
    simulate_window(spec, data_dir=config.data_dir, start=at, end=until)
    return {}


def step_ingest(args: argparse.Namespace) -> dict[str, Any]:
    from gpufleet.warehouse.ingest import ingest

    result = ingest(_config(args.data_dir), compact=not args.no_compact)
    return {
        "files": result.files_loaded,
        "samples": result.samples_loaded,
        "steps": [[name, seconds] for name, seconds in result.step_seconds],
        "alongside": [[name, seconds] for name, seconds in result.alongside_seconds],
    }


def step_build(args: argparse.Namespace) -> dict[str, Any]:
    from gpufleet.warehouse.build import build

    config = _config(args.data_dir)
    result = build(config, full=args.full)
    return {
        "models": len(result.models),
        "mode": result.mode,
        "reason": result.reason,
        # each step's wall and CPU seconds and rows, as build_state.build_steps keeps them
        "steps": [[s.name, s.seconds, s.cpu_s, s.rows] for s in result.steps],
    }


def step_cycle(args: argparse.Namespace) -> dict[str, Any]:
    """What the 15-minute deployment does: ingest, then build when something was loaded."""
    from gpufleet.warehouse.cycle import ingest_then_build

    config = _config(args.data_dir)
    # The simulated flush is "now": its day is today, not a completed day to compact.
    days = [
        p.name.removeprefix("date=") for p in (config.data_dir / "raw" / "samples").glob("date=*")
    ]
    today = dt.date.fromisoformat(max(days)) if days else None
    ingested, built = ingest_then_build(config, today=today)
    return {
        "samples": ingested.samples_loaded,
        "build": built.mode if built else None,
        "build_s": round(built.seconds, 2) if built else None,
    }


def step_report(args: argparse.Namespace) -> dict[str, Any]:
    from gpufleet.reports.weekly import write_report

    files = write_report(_config(args.data_dir), args.week)
    return {"page_bytes": Path(files.page_path).stat().st_size}


def step_peer(args: argparse.Namespace) -> dict[str, Any]:
    """The one-statement DuckDB load a user would run instead (bench/floor.py)."""
    from bench.floor import peer_load

    return peer_load(Path(args.data_dir))


STEPS = {
    "simulate": step_simulate,
    "flush": step_flush,
    "ingest": step_ingest,
    "build": step_build,
    "cycle": step_cycle,
    "report": step_report,
    "peer": step_peer,
}


def peak_rss_kb() -> int:
    """This process's peak RSS since exec (VmHWM). Not ru_maxrss: Linux carries that over
    fork and exec, so a child would report its parent's peak (the bench's bare scan)."""
    return status_kb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.step")
    parser.add_argument("step", choices=sorted(STEPS))
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--start")
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--flush", type=float, default=600.0)
    parser.add_argument("--at")
    parser.add_argument("--until")
    parser.add_argument("--week")
    parser.add_argument("--no-compact", action="store_true")
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    output = STEPS[args.step](args)
    output["seconds"] = round(time.perf_counter() - started, 3)
    output["max_rss_mb"] = round(peak_rss_kb() / 1024, 1)
    print(json.dumps(output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
