"""A third fleet for the benchmark, whose files gpufleet's collector did not write.

Every file is valid under the contract, but written as another program writes Parquet:
`pyarrow.parquet.write_table` of a table built with pyarrow's default fields (every
column nullable, no gpufleet metadata), by three writers in turn, host by host: one with
every column, one without the three nullable violation and MIG columns (an older tool),
and one with float64 utilizations and int64 GPU indices and temperatures (a pandas or
Spark job). Its shape is its own too: A100 and H100 hosts of 8 GPUs, allocations of one to
eight GPUs turning over every few hours, jobs that hold GPUs idle for hours, and racks
that run hot, with short thermal throttles most hours. One file per host per 10-minute
flush, under raw/samples/date=D/host=H/, with the reference files and the allocations.

    python -m bench.foreign_fleet --data-dir DIR --gpus 1000 --start 2026-11-16 --days 7
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.churn_fleet import (
    MIB,
    Host,
    Jobs,
    Model,
    _processes,
    plan_fleet_jobs,
    write_references,
)
from gpufleet.collectors.schema import STATUS_OK

GPUS_PER_HOST = 8
HOSTS_PER_RACK = 4
MODELS = (
    Model("NVIDIA A100-SXM4-80GB", 8, 81920 * MIB, 400.0, 55.0, 1410, 1593, 1.80),
    Model("NVIDIA H100 80GB HBM3", 8, 81559 * MIB, 700.0, 70.0, 1980, 2619, 2.90),
)
WRITERS = ("every column", "without violation and MIG columns", "float64 and int64 columns")


def plan_hosts(rng: np.random.Generator, gpus: int, start_s: int, end_s: int) -> list[Host]:
    hosts: list[Host] = []
    for number in range(-(-gpus // GPUS_PER_HOST)):
        model = MODELS[number % 3 == 0]
        count = min(GPUS_PER_HOST, gpus - number * GPUS_PER_HOST)
        rack = number // HOSTS_PER_RACK + 1
        uuids = [
            f"GPU-{rng.bytes(4).hex()}-{rng.bytes(2).hex()}-{number:04x}" for _ in range(count)
        ]
        name = f"gpu{rack:02d}n{number % HOSTS_PER_RACK + 1}"
        hosts.append(Host(name, rack, model, uuids, start_s, end_s, float(rng.uniform(0, 10))))
    return hosts


def _gpu_rows(
    rng: np.random.Generator, host: Host, jobs: Jobs, ts: np.ndarray, interval: float
) -> dict[str, np.ndarray]:
    """One GPU's metrics at times `ts` (s): busy, light or idle-holding jobs, idle between
    them; in a hot rack, a throttle of a few minutes in most busy hours."""
    model, n = host.model, len(ts)
    at = np.searchsorted(jobs.start, ts, side="right") - 1
    inside = (at >= 0) & (ts < jobs.end[np.maximum(at, 0)])
    kind = np.where(inside, jobs.kind[np.maximum(at, 0)], 3)
    util = np.clip(
        np.array([93.0, 35.0, 0.5, 0.0])[kind] + rng.normal(0, 4, n) * (kind < 2), 0, 100
    )
    hot = host.rack % 5 in (1, 3)
    minute = (ts // 60).astype(np.int64)
    burst = ((minute * 2654435761 + host.rack * 97) % 60) < 6  # 6 minutes of each hour
    thermal = hot & burst & (util > 50)
    power = model.idle_power + (model.power_limit - model.idle_power) * util / 100
    power = np.where(thermal, power * 0.8, power) + rng.normal(0, 3, n)
    temp = 30 + util * 0.5 + np.where(hot, 10, 0) + np.where(thermal, 8, 0) + rng.normal(0, 1, n)
    mask = np.where(util < 1, 0x1, 0) | np.where(thermal, 0x40, 0) | np.where(util > 85, 0x4, 0)
    held = model.mem_total * np.array([0.9, 0.4, 0.7, 0.0])[kind]
    return {
        "util": util,
        "mem_util": util * 0.7,
        "mem_used": held.astype(np.int64),
        "power": np.maximum(power, 0),
        "energy": np.cumsum(np.maximum(power, 0).astype(np.int64) * int(interval * 1000)),
        "temp": temp.astype(np.int64),
        "clock": np.where(util < 1, 345, model.clock_max - np.where(thermal, 420, 0)),
        "mask": mask.astype(np.uint64),
        "thermal_ns": np.cumsum(thermal * int(interval * 1e9)),
        "power_ns": np.cumsum((mask & 0x4 > 0) * int(interval * 2e8)),
        "job_at": np.where(inside, at, -1),
    }


def _table(
    rng: np.random.Generator, host: Host, jobs: list[Jobs], users: pa.Array, interval: float
) -> pa.Table:
    """The host's rows over its whole life by (GPU, ts), as the foreign job builds them: a
    `pa.table` of plain arrays (default fields, all nullable), float64 and int64 numbers."""
    ts = np.arange(host.first_s + host.phase_s, host.last_s, interval)
    n, gpus = len(ts), len(host.uuids)
    parts = [_gpu_rows(rng, host, gpu_jobs, ts, interval) for gpu_jobs in jobs]

    def joined(key: str) -> np.ndarray:
        return np.concatenate([part[key] for part in parts])

    def same(value: object, kind: pa.DataType) -> pa.Array:
        return pa.array([value], kind).take(pa.array(np.zeros(n * gpus, np.int32)))

    return pa.table(
        {
            "ts": pa.array(np.tile((ts * 1e6).astype(np.int64), gpus), pa.timestamp("us", "UTC")),
            "interval_s": same(interval, pa.float64()),
            "host": same(host.name, pa.string()),
            "gpu_index": pa.array(np.repeat(np.arange(gpus, dtype=np.int64), n)),
            "gpu_uuid": pa.array(host.uuids).take(pa.array(np.repeat(np.arange(gpus), n))),
            "gpu_name": same(host.model.name, pa.string()),
            "status": same(STATUS_OK, pa.string()),
            "gpu_util_pct": joined("util"),
            "mem_util_pct": joined("mem_util"),
            "mem_used_bytes": joined("mem_used"),
            "mem_total_bytes": same(host.model.mem_total, pa.int64()),
            "power_w": joined("power"),
            "power_limit_w": same(host.model.power_limit, pa.float64()),
            "energy_mj": joined("energy"),
            "temp_gpu_c": joined("temp"),
            "temp_mem_c": joined("temp") + 6,
            "sm_clock_mhz": joined("clock"),
            "sm_clock_max_mhz": same(host.model.clock_max, pa.int64()),
            "mem_clock_mhz": same(host.model.mem_clock, pa.int64()),
            "clock_event_mask": joined("mask"),
            "thermal_violation_ns": joined("thermal_ns"),
            "power_violation_ns": joined("power_ns"),
            "mig_enabled": same(False, pa.bool_()),
            "processes": pa.concat_arrays(
                [
                    _processes(gpu_jobs, part["job_at"], part["mem_used"], users)
                    for gpu_jobs, part in zip(jobs, parts, strict=True)
                ]
            ),
        }
    )


# Each writer's columns: the contract's names, each with the type it writes (None: left out).
_NARROW = {
    "interval_s": pa.float32(),
    "gpu_util_pct": pa.float32(),
    "mem_util_pct": pa.float32(),
    "power_w": pa.float32(),
    "power_limit_w": pa.float32(),
    "gpu_index": pa.uint16(),
    "temp_gpu_c": pa.int16(),
    "temp_mem_c": pa.int16(),
    "sm_clock_mhz": pa.int32(),
    "sm_clock_max_mhz": pa.int32(),
    "mem_clock_mhz": pa.int32(),
}
_WIDE = {"gpu_util_pct", "mem_util_pct", "gpu_index", "temp_gpu_c", "temp_mem_c"}
_OLDER_TOOL_LACKS = ("thermal_violation_ns", "power_violation_ns", "mig_enabled")


def as_written(table: pa.Table, writer: str) -> pa.Table:
    """The host's table as `writer` writes it (every field stays nullable)."""
    if writer == WRITERS[1]:
        table = table.drop_columns(list(_OLDER_TOOL_LACKS))
    for name, kind in _NARROW.items():
        if writer == WRITERS[2] and name in _WIDE:
            continue  # float64 utilizations, int64 indices and temperatures, as built
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, table.column(name).cast(kind))
    return table


def write_host(
    rng: np.random.Generator,
    host: Host,
    number: int,
    jobs: list[Jobs],
    users: pa.Array,
    out: Path,
    interval: float,
    flush: int,
) -> int:
    """The host's files, one per flush, by its writer; rows written."""
    table = as_written(_table(rng, host, jobs, users, interval), WRITERS[number % len(WRITERS)])
    micros = table.column("ts").cast(pa.int64()).to_numpy()
    window = micros // (flush * 1_000_000)
    order = np.argsort(window, kind="stable")
    table, window = table.take(pa.array(order)), window[order]
    cuts = np.flatnonzero(np.diff(window)) + 1
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(window)], strict=True):
        first = dt.datetime.fromtimestamp(int(window[a]) * flush, dt.UTC)
        directory = out / "raw" / "samples" / f"date={first.date()}" / f"host={host.name}"
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{host.name}_{first:%Y%m%dT%H%M}.parquet"
        pq.write_table(table.slice(a, b - a), directory / f".{name}.tmp")
        os.replace(directory / f".{name}.tmp", directory / name)
    return table.num_rows


def generate(
    out: Path, *, gpus: int, start: dt.date, days: int, interval: float = 10.0, flush: int = 600
) -> tuple[int, int]:
    """Write the fleet under `out`; (hosts, samples)."""
    rng = np.random.default_rng(20261139)
    start_s = int(dt.datetime.combine(start, dt.time(), dt.UTC).timestamp())
    end_s = start_s + days * 86400
    hosts = plan_hosts(rng, gpus, start_s, end_s)
    users = [f"user{n:02d}" for n in range(64)]
    jobs = plan_fleet_jobs(rng, hosts, next_job=5_000_000)
    write_references(out, hosts, jobs, users)
    rows = 0
    for number, host in enumerate(hosts):
        rows += write_host(
            rng, host, number, jobs[host.name], pa.array(users), out, interval, flush
        )
        if (number + 1) % 25 == 0 or number + 1 == len(hosts):
            print(f"foreign fleet: {number + 1}/{len(hosts)} hosts, {rows:,} samples", flush=True)
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
