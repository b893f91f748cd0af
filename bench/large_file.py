"""One very large sample file, as a collector (or an import) could write it: many GPUs of
one host over one day in a single file, sorted by (gpu_uuid, ts), every column filled, one
process per sample. Ingest must load it within the memory it keeps for any batch.

    python -m bench.large_file --data-dir DIR --rows 5000000
    python -m bench.step ingest --data-dir DIR      # prints its wall time and peak RSS
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpufleet.collectors.schema import PROCESS_TYPE, STATUS_OK, V1_2_FIELDS, schema_with_metadata

INTERVAL_S = 10
DAY_SAMPLES = 86400 // INTERVAL_S


def large_table(rows: int, day: dt.date, *, host: str = "big") -> pa.Table:
    """`rows` samples of one host on `day` (UTC): as many GPUs as a day at 10 s needs, each
    GPU's samples in time order, GPUs in name order."""
    gpus = -(-rows // DAY_SAMPLES)
    per_gpu = -(-rows // gpus)
    start_us = int(dt.datetime.combine(day, dt.time(), dt.UTC).timestamp() * 1e6)
    gpu = np.repeat(np.arange(gpus), per_gpu)[:rows]
    step = np.tile(np.arange(1, per_gpu + 1), gpus)[:rows]
    rng = np.random.default_rng(5)
    util = rng.uniform(0, 100, rows).astype(np.float32)
    uuids = pa.array([f"GPU-{host}-{number:08d}-0000-0000-000000000000" for number in range(gpus)])
    processes = pa.ListArray.from_arrays(
        pa.array(np.arange(rows + 1, dtype=np.int32)),
        pa.StructArray.from_arrays(
            [
                pa.array((1000 + gpu).astype(np.uint32)),
                pa.array(["alice", "bob"]).take(pa.array(gpu % 2)),
                pa.array(np.full(rows, 1 << 30, np.int64)),
                pa.array([str(job) for job in range(gpus)]).take(pa.array(gpu)),
            ],
            fields=list(PROCESS_TYPE),
        ),
    )

    def same(value: object, kind: pa.DataType) -> pa.Array:
        return pa.array([value], kind).take(pa.array(np.zeros(rows, np.int32)))

    columns = {
        "ts": pa.array(start_us + step * INTERVAL_S * 1_000_000, pa.timestamp("us", "UTC")),
        "interval_s": pa.array(np.full(rows, INTERVAL_S, np.float32)),
        "host": same(host, pa.string()),
        "gpu_index": pa.array(gpu.astype(np.uint16)),
        "gpu_uuid": uuids.take(pa.array(gpu)),
        "gpu_name": same("NVIDIA H100 80GB HBM3", pa.string()),
        "status": same(STATUS_OK, pa.string()),
        "gpu_util_pct": pa.array(util),
        "mem_util_pct": pa.array(util / 2),
        "mem_used_bytes": pa.array(np.full(rows, 40 << 30, np.int64)),
        "mem_total_bytes": pa.array(np.full(rows, 80 << 30, np.int64)),
        "power_w": pa.array(100 + util * 5),
        "power_limit_w": pa.array(np.full(rows, 700, np.float32)),
        "energy_mj": pa.array(step * 5_000),
        "temp_gpu_c": pa.array((40 + util / 4).astype(np.int16)),
        "temp_mem_c": pa.array((45 + util / 4).astype(np.int16)),
        "sm_clock_mhz": pa.array(np.full(rows, 1980, np.int32)),
        "sm_clock_max_mhz": pa.array(np.full(rows, 1980, np.int32)),
        "mem_clock_mhz": pa.array(np.full(rows, 2619, np.int32)),
        "clock_event_mask": pa.array(np.zeros(rows, np.uint64)),
        "thermal_violation_ns": pa.array(np.zeros(rows, np.int64)),
        "power_violation_ns": pa.array(np.zeros(rows, np.int64)),
        "mig_enabled": same(False, pa.bool_()),
        "processes": processes,
        "alloc_job_id": pa.nulls(rows, pa.string()),
        "alloc_user": pa.nulls(rows, pa.string()),
        "cluster": pa.nulls(rows, pa.string()),
        **{field.name: pa.nulls(rows, field.type) for field in V1_2_FIELDS},
    }
    return pa.table(columns, schema=schema_with_metadata())


def write_large_file(data_dir: Path, rows: int, day: dt.date) -> Path:
    """The file, at raw/samples/date=DAY/host=big/big.parquet below `data_dir`."""
    directory = data_dir / "raw" / "samples" / f"date={day.isoformat()}" / "host=big"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "big.parquet"
    pq.write_table(large_table(rows, day), path, compression="zstd")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--day", type=dt.date.fromisoformat, default=dt.date(2026, 11, 16))
    args = parser.parse_args()
    path = write_large_file(args.data_dir, args.rows, args.day)
    print(f"{path}: {args.rows:,} rows, {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
