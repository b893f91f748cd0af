"""Sizing: what a day of GPUs costs, and the steady cycle at 1,000 / 5,000 / 10,000 GPUs.

python -m bench.sizing                          # 1,000, 5,000 and 10,000 GPUs (about an hour)
python -m bench.sizing --gpus 1000 --history-days 2

For each fleet size, in its own data folder under bench/work/ (with
`[retention] samples_days = 28`): simulates `--history-days` days (one file per host and
day) before `--cycle-day` (default: yesterday), backfills them and runs a full build (timed:
the per-day cost of a day of that fleet), then the cycle day as its collectors write it
(10-minute files) until 23:00,
loaded untimed, and times `--repeat` steady cycles (one more 10-minute flush from every
host, then `ingest` + incremental build in one transaction: what the 15-minute deployment
runs) at the end of that day, when its GPU-day rows are fullest. Prints the figures as a
Markdown table and writes them to bench/sizing.md.

Each step runs in a child process (`bench/step.py`), as in `bench.run`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import statistics
import sys
from pathlib import Path

import duckdb

from bench.pipeline import PipelineBench, directory_bytes

ROOT = Path(__file__).resolve().parents[1]
RETENTION_DAYS = 28


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def measure(
    gpus: int,
    history_days: int,
    repeat: int,
    work: Path,
    *,
    cycle_day: dt.date,
    keep: bool = False,
) -> dict[str, float]:
    """One fleet size's figures (see the module's docstring)."""
    folder = work / f"sizing-{gpus}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "gpufleet.toml").write_text(f"[retention]\nsamples_days = {RETENTION_DAYS}\n")
    # The cycles' flushes go on from the history's fleet (the same hosts, GPUs and jobs).
    bench = PipelineBench(work=work, gpus=gpus, days=history_days, repeat=repeat, log=log)
    start = cycle_day - dt.timedelta(days=history_days)
    log(f"sizing: {gpus} GPUs, {history_days} days of history from {start}")
    bench.simulate(folder, start=start, days=history_days, flush_s=86400)
    raw_bytes = directory_bytes(folder / "raw" / "samples", ".parquet")
    ingest = bench.step("ingest", "--data-dir", str(folder))
    samples = int(ingest.output.get("samples", 0))
    lake_bytes = directory_bytes(folder / "raw" / "samples", ".parquet")
    build = bench.step("build", "--data-dir", str(folder), "--full")
    history_end = dt.datetime.combine(
        start + dt.timedelta(days=history_days), dt.time(), tzinfo=dt.UTC
    )
    cycles, _ = bench.cycles(folder, history_end, fleet_start=start)
    # the cycles' day holds the flushes to 23:00 (138) and one for each cycle, untimed too
    flushes = 23 * 6 + repeat + 2
    day_files = sum(
        1 for _ in (folder / "raw" / "samples" / f"date={history_end.date()}").rglob("*.parquet")
    )
    warehouse_bytes = (folder / "warehouse.duckdb").stat().st_size
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "gpus": gpus,
        "samples per day": samples / history_days,
        "collector files per day (10-minute files)": day_files / flushes * 24 * 6,
        "raw bytes per sample (daily files)": raw_bytes / samples,
        "lake bytes per sample": lake_bytes / samples,
        # the history's samples and the cycles' day's (not compacted yet: in the file)
        "warehouse bytes per sample": warehouse_bytes
        / (samples / history_days * (history_days + 1)),
        "backfill s per day": ingest.wall_s / history_days,
        "full build s per day": build.wall_s / history_days,
        "backfill peak MB": ingest.max_rss_mb,
        "full build peak MB": build.max_rss_mb,
        "steady cycle s (median)": statistics.median(cycles),
        "steady cycle s (max)": max(cycles),
    }


def table(rows: list[dict[str, float]]) -> str:
    names = [name for name in rows[0] if name != "gpus"]
    lines = [
        "| figure | " + " | ".join(f"{int(row['gpus']):,} GPUs" for row in rows) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for name in names:
        cells = " | ".join(f"{row[name]:,.1f}" for row in rows)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--history-days", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "work")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "sizing.md")
    parser.add_argument(
        "--keep", action="store_true", help="keep each size's data folder (to look into it)"
    )
    parser.add_argument(
        "--cycle-day",
        type=dt.date.fromisoformat,
        default=dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1),
        help="the UTC day of the cycles, the history the days before it (default: yesterday, "
        "so that retention, which counts from the real date, keeps the history's days)",
    )
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    rows: list[dict[str, float]] = []
    for gpus in args.gpus:  # the file is written after each size: a long run shows progress
        rows.append(
            measure(
                gpus,
                args.history_days,
                args.repeat,
                args.work,
                cycle_day=args.cycle_day,
                keep=args.keep,
            )
        )
        text = render(rows, started, args)
        args.output.write_text(text)
    print(text)
    return 0


def render(rows: list[dict[str, float]], started: dt.datetime, args: argparse.Namespace) -> str:
    return "\n".join(
        [
            f"# Sizing, {started:%Y-%m-%d %H:%M} UTC",
            "",
            f"`python -m bench.sizing --history-days {args.history_days} --repeat "
            f"{args.repeat}` on {os.cpu_count()} cores ({platform.processor() or 'cpu'}), "
            f"Python {platform.python_version()}, DuckDB {duckdb.__version__}; "
            f"`[retention] samples_days = {RETENTION_DAYS}`, {args.history_days} day(s) of "
            "history before the cycles' day. Per-day figures are of the history's backfill "
            "and full build; the steady cycle is one 10-minute flush from every host, then "
            f"ingest and incremental build, at 23:00 of the day after the history "
            f"({args.cycle_day}; retention counts from the real date).",
            "",
            table(rows),
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
