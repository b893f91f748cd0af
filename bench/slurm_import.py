"""The Slurm import's memory and time against the number of jobs: a saved `sacct --json`
of N jobs (Slurm 22.05's shape, each job a copy of one of tests/slurm_fixtures' recorded
jobs, about 2 KB of JSON) imported by `gpufleet import slurm --sacct-json` into an empty
data directory, in a process of its own.

    python -m bench.slurm_import                        # 10,000 and 100,000 jobs
    python -m bench.slurm_import --jobs 1000 --jobs 5000

Figures per size: the JSON's size, the import's wall and CPU time, the child's whole wall
time (Python's start included) and its peak RSS (VmHWM), and the peak's growth per job
between the sizes: what the import holds per job beyond what it holds anyway. Not part of
`make bench`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.proc import status_kb

FIXTURE = Path(__file__).parent.parent / "tests" / "slurm_fixtures" / "sacct-22.05.json"
DAYS = 30  # the jobs start over this many days before the import's clock
NODES = 250  # 8 GPUs each
USERS = 400
ACCOUNTS = 40


def write_sacct(path: Path, jobs: int, now: dt.datetime, *, jobs_first: bool = False) -> int:
    """`sacct --json` of `jobs` jobs that started over the DAYS before `now`, each ending
    within 12 hours (one in a hundred still running); returns the file's size in bytes.
    `jobs_first`: `meta` and `errors` after the jobs, where the data_parser releases
    (23.02 on) print them, rather than before, as 22.05 does."""
    recorded = json.loads(FIXTURE.read_text())
    templates = recorded["jobs"]
    first = int(now.timestamp()) - DAYS * 86400
    spacing = DAYS * 86400 / jobs
    header = '"meta": ' + json.dumps(recorded["meta"]) + ', "errors": []'
    with path.open("w") as out:
        out.write('{"jobs": [\n' if jobs_first else "{" + header + ', "jobs": [\n')
        for number in range(jobs):
            job: dict[str, Any] = json.loads(json.dumps(templates[number % len(templates)]))
            job_id = 1000 + number
            start = first + int(number * spacing)
            running = number % 100 == 99
            end = 0 if running else start + 60 + (number * 7919) % (12 * 3600)
            job["job_id"] = job_id
            job["array"].update(job_id=0, task_id=None)
            job["het"].update(job_id=0, job_offset=None)
            job["user"] = f"user{number % USERS:03d}"
            job["account"] = f"acct{number % ACCOUNTS:02d}"
            job["nodes"] = f"gpu-node{number % NODES + 1:03d}"
            job["state"]["current"] = "RUNNING" if running else "COMPLETED"
            job["time"].update(
                start=start, end=end, eligible=start, submission=start, elapsed=max(end - start, 0)
            )
            gpus = 1 + number % 8
            for entry in job["tres"]["allocated"]:
                if entry["type"] == "gres":
                    entry["count"] = gpus
            out.write(("," if number else "") + json.dumps(job) + "\n")
        out.write("], " + header + "}\n" if jobs_first else "]}\n")
    return path.stat().st_size


def child(sacct: Path, data_dir: Path, now: str) -> None:
    """The measured import, in this process: one JSON line of its figures."""
    from gpufleet.config import load_config
    from gpufleet.integrations.slurm import import_slurm

    config = load_config(data_dir=str(data_dir), environ={})
    began, cpu = time.monotonic(), time.process_time()
    result = import_slurm(
        config, sacct_json=sacct, now=dt.datetime.fromisoformat(now), warn=lambda _: None
    )
    seconds, cpu = time.monotonic() - began, time.process_time() - cpu
    figures = {
        "seconds": round(seconds, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(status_kb("VmHWM") / 1024, 1),
        "jobs": result.jobs,
        "job_records": result.job_records,
        "job_files": len(result.job_files),
    }
    print(json.dumps(figures))


def measure(workdir: Path, jobs: int, now: dt.datetime, jobs_first: bool) -> dict[str, Any]:
    sacct = workdir / f"sacct-{jobs}.json"
    size = write_sacct(sacct, jobs, now, jobs_first=jobs_first)
    data_dir = workdir / f"data-{jobs}"
    began = time.monotonic()
    command = [sys.executable, "-m", "bench.slurm_import", "--now", now.isoformat()]
    done = subprocess.run(
        [*command, "--child", str(sacct), str(data_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - began
    if done.returncode:
        raise RuntimeError(f"the import of {jobs} jobs failed: {done.stderr.strip()[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"jobs_asked": jobs, "json_mb": round(size / 1e6, 1), "process_s": round(wall, 2)} | (
        figures
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, action="append", help="sizes (default 10k, 100k)")
    parser.add_argument("--now", default="2026-11-28T00:00:00+00:00")
    parser.add_argument(
        "--jobs-first", action="store_true", help="meta after the jobs, as 23.02 and later print"
    )
    parser.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.now)
        return 0
    now = dt.datetime.fromisoformat(args.now)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-slurm-") as workdir:
        for jobs in args.jobs or [10_000, 100_000]:
            rows.append(measure(Path(workdir), jobs, now, args.jobs_first))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| jobs | sacct JSON | import (wall) | import (CPU) | process | peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['jobs_asked']:,} | {row['json_mb']} MB | {row['seconds']} s | "
            f"{row['cpu_s']} s | {row['process_s']} s | {row['peak_rss_mb']} MB |"
        )
    if len(rows) > 1:
        small, large = rows[0], rows[-1]
        per_job = (
            (large["peak_rss_mb"] - small["peak_rss_mb"])
            * 1e6
            / (large["jobs_asked"] - small["jobs_asked"])
        )
        print(f"peak RSS growth: {per_job:,.0f} bytes a job between the smallest and largest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
