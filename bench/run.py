"""`make bench`: measure gpufleet and write bench/results.md.

python -m bench.run                     # collector + the 1,000-GPU pipeline
python -m bench.run --suite collector   # the collector alone (seconds)
python -m bench.run --gpus 128 --repeat 1   # a quick pipeline run
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from bench.pipeline import Figure, PipelineBench, machine_description

RESULTS = Path(__file__).resolve().parent / "results.md"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def collector_figures() -> list[Figure]:
    from bench.collector import run_collector_bench

    result = run_collector_bench()
    return [
        Figure(
            "collector CPU per tick, 8 GPUs (fake NVML)",
            "<= 2 ms",
            (float(result["cpu_ms_per_tick"]),),
            "ms",
            float(result["cpu_ms_per_tick"]) <= 2.0,
        ),
        Figure(
            "collector peak RSS",
            "<= 80 MB",
            (float(result["max_rss_mb"]),),
            "MB",
            float(result["max_rss_mb"]) <= 80.0,
        ),
        Figure(
            "collector memory of its own at the end (RssAnon: the peak RSS above also counts "
            "the pages of pyarrow's libraries it maps, which depend on the page cache)",
            "",
            (float(result["rss_anon_mb"]),),
            "MB",
            None,
        ),
        Figure("collector files", "", (float(result["bytes_per_sample"]),), "bytes/sample", None),
    ]


def write_results(
    figures: list[Figure],
    notes: list[str],
    title: str,
    *,
    quiet: bool = False,
    output: Path = RESULTS,
) -> None:
    lines = [
        "# Benchmark results",
        "",
        f"{title}, measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on "
        f"{machine_description()}.",
        "",
        "| figure | median | min / max | runs | target | |",
        "|---|---|---|---|---|---|",
        *(figure.row() for figure in figures),
        "",
        *(f"- {note}" for note in notes),
        "",
        "The measurements behind design choices in the code, moved from its comments:"
        " [notes.md](notes.md) (kept by hand; not rewritten here).",
        "",
    ]
    output.write_text("\n".join(lines))
    if not quiet:
        log(f"wrote {output}")
        print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--suite", choices=("all", "collector", "pipeline"), default="all")
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--heavy-repeat",
        type=int,
        help="runs of the backfill ingest and the full build (default: --repeat)",
    )
    parser.add_argument("--history-weeks", type=int, default=4)
    parser.add_argument(
        "--fleet",
        choices=("all", "simulated", "churn", "foreign"),
        default="all",
        help="the simulator's fleet (every figure), the second fleet of bench/churn_fleet.py, "
        "the third of bench/foreign_fleet.py (files of other writers; for these two the "
        "backfill and full builds), or all three (default)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(__file__).resolve().parent / "work",
        help="scratch directory (kept between runs: the simulated week is reused)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=RESULTS,
        help="the page of results to write (default: bench/results.md)",
    )
    args = parser.parse_args(argv)

    figures: list[Figure] = []
    notes: list[str] = []
    if args.suite in ("all", "collector"):
        log("collector bench (8 GPUs on the fake NVML)")
        figures += collector_figures()
    fleets = ("simulated", "churn", "foreign") if args.fleet == "all" else (args.fleet,)
    title = (
        f"{args.gpus} GPUs x {args.days} days at 10 s" if args.suite != "collector" else "Collector"
    )
    for fleet in fleets if args.suite in ("all", "pipeline") else ():
        bench = PipelineBench(
            work=args.work,
            gpus=args.gpus,
            days=args.days,
            repeat=args.repeat,
            heavy_repeat=args.heavy_repeat,
            history_weeks=args.history_weeks,
            fleet=fleet,
            log=log,
        )
        done, done_notes = list(figures), list(notes)
        bench.on_figure = lambda bench=bench, done=done, done_notes=done_notes: write_results(
            done + bench.figures,
            [*done_notes, *bench.notes, "(run in progress)"],
            title,
            quiet=True,
            output=args.output,
        )
        if fleet in ("churn", "foreign"):
            bench.run_churn()
        else:
            bench.run()
        figures += bench.figures
        notes += bench.notes
    write_results(figures, notes, title, output=args.output)
    return 0 if all(figure.passed is not False for figure in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
