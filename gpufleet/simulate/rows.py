"""Vectorised sample rows of one simulated host over a time window, and their Parquet files.

Every value is a function of (GPU, tick) and the GPU's timeline piece at that tick, so a
window computes the same rows whether it is generated alone or as part of a longer one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from collectors.schema import PROCESS_TYPE, STATUS_LOST, STATUS_OK, partition_dir
from collectors.schema import schema_with_metadata as _schema_with_metadata
from gpufleet.simulate.scenario import (
    NOISE_CLOCK,
    NOISE_MEM_UTIL,
    NOISE_POWER,
    NOISE_TEMP,
    NOISE_TEMP_MEM,
    NOISE_UTIL,
    HostPlan,
    Scenario,
    unit_noise,
)

SCHEMA = _schema_with_metadata()
_STATUS = pa.array([STATUS_OK, STATUS_LOST], type=pa.string())
# Dictionary-encode the repetitive strings only: it halves the per-file encoding cost.
_DICTIONARY_COLUMNS = ["host", "gpu_uuid", "gpu_name", "status"]


@dataclass(frozen=True)
class HostWindow:
    """One host's rows over [start, end), sorted by (flush window, gpu_uuid, ts)."""

    table: pa.Table
    # Per flush window: (first row, row count, window start epoch s, window end epoch s).
    files: list[tuple[int, int, int, int]]


def host_window(
    scn: Scenario, host: HostPlan, start_us: int, end_us: int, flush_us: int
) -> HostWindow | None:
    """The host's samples with ts in [start_us, end_us) (within one UTC day), or None."""
    iv = scn.interval_us
    phase = host.phase_us
    k0 = -((phase - start_us) // iv)
    k1 = -((phase - end_us) // iv)
    ticks = np.arange(k0, k1, dtype=np.int64)
    ts = ticks * iv + phase
    ev = scn.events
    if host.name == ev.gap_host:
        silent = (ts >= ev.gap_start_s * 1_000_000) & (ts < ev.gap_end_s * 1_000_000)
        ticks, ts = ticks[~silent], ts[~silent]
    n_ticks = len(ticks)
    if n_ticks == 0:
        return None
    gpus = scn.host_gpus(host)
    n_gpus = len(gpus)
    tl = scn.timelines

    # Rows ordered by (flush window, GPU in uuid order, tick).
    window = ts // flush_us
    order = np.argsort(np.tile(window, n_gpus), kind="stable")
    row_gpu = np.repeat(np.arange(n_gpus), n_ticks)[order]
    row_tick = np.tile(ticks, n_gpus)[order]
    row_ts = np.tile(ts, n_gpus)[order]
    piece = np.empty(n_gpus * n_ticks, dtype=np.int64)
    by_gpu = np.empty((n_gpus, n_ticks), dtype=np.int64)
    for j, gpu in enumerate(gpus):
        lo, hi = tl.offsets[gpu.ordinal], tl.offsets[gpu.ordinal + 1]
        by_gpu[j] = lo + np.searchsorted(tl.start_tick[lo:hi], ticks, side="right") - 1
    piece[:] = by_gpu.ravel()[order]
    keys = np.array([g.noise_key for g in gpus], dtype=np.uint64)[row_gpu]

    def noise(stream: int, tick: np.ndarray = row_tick) -> np.ndarray:
        return unit_noise(keys, tick, stream)

    model = host.model
    lost = tl.lost[piece]
    ok = ~lost
    mask = lost if lost.any() else None
    iv_s = iv / 1e6
    util = np.clip(
        tl.util_pct[piece] + tl.util_amp_pct[piece] * (2 * noise(NOISE_UTIL) - 1), 0, 100
    )
    mem_util = np.clip(
        tl.mem_util_pct[piece] + tl.mem_util_amp_pct[piece] * (2 * noise(NOISE_MEM_UTIL) - 1),
        0,
        100,
    )
    amp = model.power_noise_w
    h_now = noise(NOISE_POWER)
    power = tl.power_w[piece] + amp * (h_now - noise(NOISE_POWER, row_tick - 1))
    since = row_tick - tl.start_tick[piece]
    energy = np.floor(
        tl.energy_base_mj[piece] + 1000.0 * iv_s * (tl.power_w[piece] * since + amp * h_now)
    ).astype(np.int64)
    temp = np.rint(tl.temp_gpu_c[piece] + 3.0 * (noise(NOISE_TEMP) - 0.5)).astype(np.int16)
    clock_steps = np.floor(noise(NOISE_CLOCK) * (tl.sm_clock_amp_mhz[piece] // 15 + 1))
    sm_clock = (tl.sm_clock_mhz[piece] - 15 * clock_steps.astype(np.int64)).astype(np.int32)
    iv_ns = iv * 1000
    thermal_ns = tl.thermal_base_ns[piece] + iv_ns * tl.thermal_flag[piece] * (since + 1)
    power_viol_ns = tl.power_viol_base_ns[piece] + iv_ns * tl.power_viol_flag[piece] * (since + 1)
    n = len(piece)

    def const(value: object, kind: pa.DataType) -> pa.Array:
        return pa.repeat(pa.scalar(value, type=kind), n)

    def metric(values: np.ndarray, kind: pa.DataType) -> pa.Array:
        return pa.array(values, type=kind, mask=mask)

    if model.has_hbm_temp:
        temp_mem = (temp + 6 + np.floor(noise(NOISE_TEMP_MEM) * 3)).astype(np.int16)
        temp_mem_col = metric(temp_mem, pa.int16())
    else:
        temp_mem_col = pa.nulls(n, pa.int16())
    uuids = pa.array([g.uuid for g in gpus], type=pa.string())
    columns = {
        "ts": pa.array(row_ts, type=pa.timestamp("us", tz="UTC")),
        "interval_s": const(iv_s, pa.float32()),
        "host": const(host.name, pa.string()),
        "gpu_index": pa.array(np.array([g.index for g in gpus], dtype=np.uint16)[row_gpu]),
        "gpu_uuid": uuids.take(pa.array(row_gpu)),
        "gpu_name": const(model.name, pa.string()),
        "status": _STATUS.take(pa.array(lost.astype(np.int8))),
        "gpu_util_pct": metric(util.astype(np.float32), pa.float32()),
        "mem_util_pct": metric(mem_util.astype(np.float32), pa.float32()),
        "mem_used_bytes": metric(tl.mem_used_bytes[piece], pa.int64()),
        "mem_total_bytes": metric(np.full(n, model.mem_total_bytes, np.int64), pa.int64()),
        "power_w": metric(power.astype(np.float32), pa.float32()),
        "power_limit_w": metric(np.full(n, model.power_limit_w, np.float32), pa.float32()),
        "energy_mj": metric(energy, pa.int64()),
        "temp_gpu_c": metric(temp, pa.int16()),
        "temp_mem_c": temp_mem_col,
        "sm_clock_mhz": metric(sm_clock, pa.int32()),
        "sm_clock_max_mhz": metric(np.full(n, model.sm_clock_max_mhz, np.int32), pa.int32()),
        "mem_clock_mhz": metric(np.full(n, model.mem_clock_mhz, np.int32), pa.int32()),
        "clock_event_mask": metric(tl.clock_event_mask[piece], pa.uint64()),
        "thermal_violation_ns": metric(thermal_ns, pa.int64()),
        "power_violation_ns": metric(power_viol_ns, pa.int64()),
        "mig_enabled": metric(np.zeros(n, dtype=bool), pa.bool_()),
        "processes": _processes(scn, piece, ok, mask),
    }
    table = pa.table(columns, schema=SCHEMA)

    # Flush windows: contiguous runs of equal `window` in row order.
    row_window = window[np.searchsorted(ts, row_ts)]
    cuts = np.flatnonzero(np.diff(row_window)) + 1
    firsts = np.concatenate(([0], cuts))
    counts = np.diff(np.concatenate((firsts, [n])))
    files = []
    for first, count in zip(firsts.tolist(), counts.tolist(), strict=True):
        w = int(row_window[first])
        w_start = max(w * flush_us, start_us)
        w_end = min((w + 1) * flush_us, end_us)
        files.append((first, count, w_start // 1_000_000, -(-w_end // 1_000_000)))
    return HostWindow(table=table, files=files)


def _processes(
    scn: Scenario, piece: np.ndarray, ok: np.ndarray, mask: np.ndarray | None
) -> pa.Array:
    """The processes list column, built from offsets (no Python list per row)."""
    tl = scn.timelines
    counts = np.where(ok, tl.proc_count[piece], 0)
    offsets = np.zeros(len(piece) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    total = int(offsets[-1])
    child = np.repeat(tl.proc_start[piece] - offsets[:-1], counts) + np.arange(total)
    job = tl.proc_job[child]
    users = pa.array(tl.proc_users, type=pa.string())
    job_ids = pa.array(tl.proc_job_ids, type=pa.string())
    values = pa.StructArray.from_arrays(
        [
            pa.array(tl.proc_pid[child], type=pa.uint32()),
            users.take(pa.array(tl.proc_user[child])),
            pa.array(tl.proc_mem_bytes[child], type=pa.int64()),
            job_ids.take(pa.array(np.where(job < 0, 0, job), mask=job < 0)),
        ],
        fields=list(PROCESS_TYPE),
    )
    return pa.ListArray.from_arrays(
        pa.array(offsets),
        values,
        type=pa.list_(PROCESS_TYPE),
        mask=None if mask is None else pa.array(mask),
    )


def write_host_window(samples_dir: Path, host: str, date_iso: str, window: HostWindow) -> int:
    """Write one Parquet file per flush window, as a collector does; returns files written."""
    directory = Path(partition_dir(str(samples_dir), date_iso, host))
    directory.mkdir(parents=True, exist_ok=True)
    for first, count, start_s, end_s in window.files:
        name = f"{host}-{start_s}-{end_s}.parquet"
        temporary = directory / f".{name}.tmp"
        pq.write_table(
            window.table.slice(first, count),
            temporary,
            compression="zstd",
            compression_level=1,
            use_dictionary=_DICTIONARY_COLUMNS,
        )
        os.replace(temporary, directory / name)
    return len(window.files)
