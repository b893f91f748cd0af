"""A second fleet for the benchmark, from a generator of its own (not `gpufleet simulate`).

Its shape differs from the simulator's on purpose, so a speed tuned on one generator shows:
other GPU models (H200, L4, A10) on 4- and 8-GPU hosts, six hosts per rack, allocations
turning over every few hours (one GPU each), a quarter of the jobs running two processes,
clock events in most samples (idle, power cap, thermal in two hot racks), and hosts that
join late or leave early. Files are laid out as collectors write them: one per host per
flush, under raw/samples/date=D/host=H/, with the reference files and the allocations.

    python -m bench.churn_fleet --data-dir DIR --gpus 1000 --start 2026-11-16 --days 7
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpufleet.collectors.schema import PROCESS_TYPE, STATUS_OK, V1_2_FIELDS, schema_with_metadata

MIB = 1024 * 1024
SCHEMA = schema_with_metadata()
HOSTS_PER_RACK = 6
TEAMS = ("search", "speech", "robotics", "ads", "genomics", "infra")
HOUR_S = 3600


@dataclass(frozen=True)
class Model:
    name: str
    per_host: int
    mem_total: int
    power_limit: float
    idle_power: float
    clock_max: int
    mem_clock: int
    usd: float


MODELS = (
    Model("NVIDIA H200", 8, 143771 * MIB, 700.0, 80.0, 1980, 3201, 3.40),
    Model("NVIDIA L4", 4, 23034 * MIB, 72.0, 16.0, 2040, 6251, 0.55),
    Model("NVIDIA A10", 4, 23028 * MIB, 150.0, 22.0, 1695, 6251, 0.75),
)


@dataclass
class Host:
    name: str
    rack: int
    model: Model
    uuids: list[str]
    first_s: int  # joins (its collector starts)
    last_s: int  # leaves (exclusive)
    phase_s: float


@dataclass
class Jobs:
    """One GPU's allocations: start, end (s), job id, user number, processes, kind."""

    start: np.ndarray
    end: np.ndarray
    job: np.ndarray
    user: np.ndarray
    procs: np.ndarray  # 1 or 2
    kind: np.ndarray  # 0 busy, 1 light, 2 holds memory without work


def plan_hosts(rng: np.random.Generator, gpus: int, start_s: int, end_s: int) -> list[Host]:
    hosts: list[Host] = []
    left = gpus
    while left > 0:
        model = MODELS[rng.choice(3, p=(0.5, 0.3, 0.2))]
        count = min(model.per_host, left)
        number = len(hosts)
        rack = number // HOSTS_PER_RACK + 1
        span = end_s - start_s
        first = start_s + (int(rng.uniform(0.1, 0.5) * span) if rng.random() < 0.12 else 0)
        last = end_s - (int(rng.uniform(0.1, 0.4) * span) if rng.random() < 0.1 else 0)
        uuids = [f"GPU-{rng.bytes(8).hex()}-{rng.bytes(4).hex()}" for _ in range(count)]
        name = f"{model.name.split()[-1].lower()}-{rack:03d}-{number % HOSTS_PER_RACK}"
        hosts.append(Host(name, rack, model, uuids, first, last, float(rng.uniform(0, 10))))
        left -= count
    return hosts


def plan_jobs(rng: np.random.Generator, start_s: int, end_s: int, next_job: int) -> Jobs:
    starts, ends = [], []
    t = start_s - int(rng.uniform(0, 3 * HOUR_S))
    while t < end_s:
        length = int(rng.exponential(3 * HOUR_S)) + 300
        starts.append(t)
        ends.append(t + length)
        t += length + int(rng.exponential(0.6 * HOUR_S))
    n = len(starts)
    return Jobs(
        start=np.array(starts, np.int64),
        end=np.array(ends, np.int64),
        job=np.arange(next_job, next_job + n),
        user=rng.integers(0, 48, n),
        procs=np.where(rng.random(n) < 0.25, 2, 1),
        kind=rng.choice(3, n, p=(0.6, 0.25, 0.15)),
    )


def plan_fleet_jobs(
    rng: np.random.Generator, hosts: list[Host], *, next_job: int
) -> dict[str, list[Jobs]]:
    """Each host's jobs, GPU by GPU in order, numbered on from `next_job`."""
    jobs: dict[str, list[Jobs]] = {}
    for host in hosts:
        jobs[host.name] = []
        for _ in host.uuids:
            gpu_jobs = plan_jobs(rng, host.first_s, host.last_s, next_job)
            next_job += len(gpu_jobs.job)
            jobs[host.name].append(gpu_jobs)
    return jobs


def _gpu_rows(
    rng: np.random.Generator, host: Host, jobs: Jobs, ts: np.ndarray, interval: float
) -> dict[str, np.ndarray]:
    """One GPU's metrics at times `ts` (s)."""
    model = host.model
    n = len(ts)
    at = np.searchsorted(jobs.start, ts, side="right") - 1
    inside = (at >= 0) & (ts < jobs.end[np.maximum(at, 0)])
    kind = np.where(inside, jobs.kind[np.maximum(at, 0)], 3)
    base = np.array([88.0, 22.0, 0.0, 0.0])[kind]
    util = np.clip(base + rng.normal(0, 6, n) * (kind < 2), 0, 100).astype(np.float32)
    power = (model.idle_power + (model.power_limit - model.idle_power) * util / 100 * 0.95).astype(
        np.float32
    ) + rng.normal(0, 2, n).astype(np.float32)
    hot = host.rack % 7 in (2, 5)
    temp = (32 + util * 0.45 + (12 if hot else 0) + rng.normal(0, 1, n)).astype(np.int16)
    thermal = hot & (util > 60) & (rng.random(n) < 0.6)
    mask = np.where(util < 1, 0x1, 0) | np.where(util > 70, 0x4, 0) | np.where(thermal, 0x20, 0)
    mask = np.where((mask == 0) & (rng.random(n) < 0.5), 0x4, mask)
    clock = np.where(util < 1, 210, model.clock_max - np.where(thermal, 300, 0)).astype(np.int32)
    held = np.where(kind == 3, 500 * MIB, model.mem_total * np.array([0.8, 0.3, 0.6, 0])[kind])
    return {
        "util": util,
        "mem_util": (util * 0.6).astype(np.float32),
        "mem_used": held.astype(np.int64),
        "power": power,
        "energy": np.cumsum(power.astype(np.int64) * int(interval * 1000)),
        "temp": temp,
        "clock": clock,
        "mask": mask.astype(np.uint64),
        "thermal_ns": np.cumsum(thermal * int(interval * 1e9)),
        "power_ns": np.cumsum((mask & 0x4 > 0) * int(interval * 5e8)),
        "job_at": np.where(inside, at, -1),
    }


def _processes(jobs: Jobs, job_at: np.ndarray, mem_used: np.ndarray, users: pa.Array) -> pa.Array:
    """Each row's processes: none outside a job, else the job's one or two."""
    at = np.maximum(job_at, 0)
    counts = np.where(job_at >= 0, jobs.procs[at], 0)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    row = np.repeat(np.arange(len(job_at)), counts)
    k = np.arange(offsets[-1]) - offsets[:-1][row]
    job = jobs.job[at[row]]
    values = pa.StructArray.from_arrays(
        [
            pa.array((10000 + job % 50000 + k).astype(np.uint32)),
            users.take(pa.array(jobs.user[at[row]])),
            pa.array(mem_used[row] // counts[row]),
            pa.array(job).cast(pa.string()),
        ],
        fields=list(PROCESS_TYPE),
    )
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def write_host(
    rng: np.random.Generator,
    host: Host,
    jobs: list[Jobs],
    users: pa.Array,
    out: Path,
    interval: float,
    flush: int,
) -> int:
    """The host's files over its whole life, rows by (flush window, GPU, ts); rows written."""
    ts = np.arange(host.first_s + host.phase_s, host.last_s, interval)
    n, gpus = len(ts), len(host.uuids)
    parts = [_gpu_rows(rng, host, gpu_jobs, ts, interval) for gpu_jobs in jobs]
    model = host.model

    def joined(key: str) -> np.ndarray:
        return np.concatenate([part[key] for part in parts])

    def full(value: object, dtype: type) -> pa.Array:
        return pa.array(np.full(n * gpus, value, dtype))

    table = pa.table(
        {
            "ts": pa.array(np.tile((ts * 1e6).astype(np.int64), gpus), pa.timestamp("us", "UTC")),
            "interval_s": full(interval, np.float32),
            "host": pa.array([host.name]).take(pa.array(np.zeros(n * gpus, np.int32))),
            "gpu_index": pa.array(np.repeat(np.arange(gpus, dtype=np.uint16), n)),
            "gpu_uuid": pa.array(host.uuids).take(pa.array(np.repeat(np.arange(gpus), n))),
            "gpu_name": pa.array([model.name]).take(pa.array(np.zeros(n * gpus, np.int32))),
            "status": pa.array([STATUS_OK]).take(pa.array(np.zeros(n * gpus, np.int32))),
            "gpu_util_pct": joined("util"),
            "mem_util_pct": joined("mem_util"),
            "mem_used_bytes": joined("mem_used"),
            "mem_total_bytes": full(model.mem_total, np.int64),
            "power_w": joined("power"),
            "power_limit_w": full(model.power_limit, np.float32),
            "energy_mj": joined("energy"),
            "temp_gpu_c": joined("temp"),
            "temp_mem_c": pa.nulls(n * gpus, pa.int16()),
            "sm_clock_mhz": joined("clock"),
            "sm_clock_max_mhz": full(model.clock_max, np.int32),
            "mem_clock_mhz": full(model.mem_clock, np.int32),
            "clock_event_mask": joined("mask"),
            "thermal_violation_ns": joined("thermal_ns"),
            "power_violation_ns": joined("power_ns"),
            "mig_enabled": full(False, np.bool_),
            "processes": pa.concat_arrays(
                [
                    _processes(gpu_jobs, part["job_at"], part["mem_used"], users)
                    for gpu_jobs, part in zip(jobs, parts, strict=True)
                ]
            ),
            "alloc_job_id": pa.nulls(n * gpus, pa.string()),
            "alloc_user": pa.nulls(n * gpus, pa.string()),
            "cluster": pa.nulls(n * gpus, pa.string()),
            **{field.name: pa.nulls(n * gpus, field.type) for field in V1_2_FIELDS},
        },
        schema=SCHEMA,
    )
    window = np.tile((ts // flush).astype(np.int64), gpus)
    order = np.argsort(window, kind="stable")
    table = table.take(pa.array(order))
    window = window[order]
    cuts = np.flatnonzero(np.diff(window)) + 1
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(window)], strict=True):
        first = dt.datetime.fromtimestamp(int(window[a]) * flush, dt.UTC)
        directory = out / "raw" / "samples" / f"date={first.date()}" / f"host={host.name}"
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{host.name}-{int(window[a]) * flush}.parquet"
        pq.write_table(table.slice(a, b - a), directory / f".{name}.tmp", compression="zstd")
        os.replace(directory / f".{name}.tmp", directory / name)
    return table.num_rows


def _iso(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


def write_references(out: Path, hosts: list[Host], jobs: dict[str, list[Jobs]], users: list[str]):
    ref = out / "ref"
    ref.mkdir(parents=True, exist_ok=True)
    with (ref / "users.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["user", "team", "email"])
        w.writerows((u, TEAMS[i % len(TEAMS)], f"{u}@example.org") for i, u in enumerate(users))
    with (ref / "teams.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["team", "lead_email", "cc"])
        w.writerows((t, f"{t}-lead@example.org", "") for t in TEAMS)
    with (ref / "hosts.csv").open("w", newline="") as f:
        csv.writer(f).writerows([["host_glob", "team"], ["l4-00[1-3]-*", "infra"]])
    with (ref / "prices.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu_glob", "usd_per_gpu_hour"])
        w.writerows((f"{m.name}*", f"{m.usd:.2f}") for m in MODELS)
    by_day: dict[str, list[list[object]]] = {}
    for host in hosts:
        for index, gpu_jobs in enumerate(jobs[host.name]):
            for start, end, job, user in zip(
                gpu_jobs.start, gpu_jobs.end, gpu_jobs.job, gpu_jobs.user, strict=True
            ):
                day = dt.datetime.fromtimestamp(int(start), dt.UTC).date().isoformat()
                row = [int(job), users[int(user)], "", host.name, index, _iso(int(start))]
                by_day.setdefault(day, []).append([*row, _iso(int(end))])
    allocations = out / "raw" / "allocations"
    allocations.mkdir(parents=True, exist_ok=True)
    for day, rows in sorted(by_day.items()):
        with (allocations / f"churn-{day}.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["job_id", "user", "team", "host", "gpu_index", "start_ts", "end_ts"])
            w.writerows(rows)


def generate(
    out: Path, *, gpus: int, start: dt.date, days: int, interval: float = 10.0, flush: int = 600
) -> tuple[int, int]:
    """Write the fleet under `out`; (hosts, samples)."""
    rng = np.random.default_rng(20261125)
    start_s = int(dt.datetime.combine(start, dt.time(), dt.UTC).timestamp())
    end_s = start_s + days * 86400
    hosts = plan_hosts(rng, gpus, start_s, end_s)
    users = [f"u{n:02d}{chr(97 + n % 26)}" for n in range(48)]
    jobs = plan_fleet_jobs(rng, hosts, next_job=900000)
    write_references(out, hosts, jobs, users)
    rows = 0
    for number, host in enumerate(hosts, start=1):
        rows += write_host(rng, host, jobs[host.name], pa.array(users), out, interval, flush)
        if number % 25 == 0 or number == len(hosts):
            print(f"churn fleet: {number}/{len(hosts)} hosts, {rows:,} samples", flush=True)
    return len(hosts), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--start", type=dt.date.fromisoformat, required=True)
    parser.add_argument("--days", type=int, default=7)
    args = parser.parse_args()
    generate(args.data_dir, gpus=args.gpus, start=args.start, days=args.days)


if __name__ == "__main__":
    main()
