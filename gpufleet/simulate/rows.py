"""Vectorised sample rows of one simulated host over a time window, as an Arrow table.

Every value is a function of (GPU, tick) and the GPU's timeline piece at that tick, so a
window computes the same rows whether it is generated alone or as part of a longer one.
The rows are ordered as the host's collector writes them: by flush window, then GPU (in
uuid order, a MIG device's `MIG-...` after the GPUs), then tick.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from gpufleet.collectors.schema import PROCESS_TYPE, SAMPLE_SCHEMA, STATUS_LOST, STATUS_OK
from gpufleet.collectors.schema import schema_with_metadata as _schema_with_metadata
from gpufleet.simulate.health import activity_columns, health_columns
from gpufleet.simulate.layout import GpuPlan, HostPlan
from gpufleet.simulate.mig import MigDevice
from gpufleet.simulate.noise import (
    NOISE_CLOCK,
    NOISE_MEM_UTIL,
    NOISE_PCIE,
    NOISE_POWER,
    NOISE_SM,
    NOISE_TEMP,
    NOISE_TEMP_MEM,
    NOISE_TENSOR,
    NOISE_UTIL,
    unit_noise,
)
from gpufleet.simulate.scenario import Scenario

SCHEMA = _schema_with_metadata()
_STATUS = pa.array([STATUS_OK, STATUS_LOST], type=pa.string())


@dataclass(frozen=True)
class HostWindow:
    """One host's rows over [start, end), sorted by (flush window, gpu_uuid, ts)."""

    table: pa.Table
    # Per flush window: (first row, row count, window start epoch s, window end epoch s).
    files: list[tuple[int, int, int, int]]


@dataclass(frozen=True)
class _Rows:
    """What each row is: its GPU (position in `gpus`), tick, timestamp, timeline piece and
    flush window; one numpy array per field, in row order."""

    gpus: list[GpuPlan]
    gpu: np.ndarray
    tick: np.ndarray
    ts_us: np.ndarray
    piece: np.ndarray
    window: np.ndarray


def host_window(
    scn: Scenario, host: HostPlan, start_us: int, end_us: int, flush_us: int
) -> HostWindow | None:
    """The host's samples with ts in [start_us, end_us) (within one UTC day), or None."""
    rows = _rows(scn, host, start_us, end_us, flush_us)
    if rows is None:
        return None
    table = pa.table(_columns(scn, host, rows), schema=SCHEMA)
    window = rows.window
    devices = [(j, d) for j, g in enumerate(rows.gpus) for d in scn.mig.get(g.ordinal, ())]
    if devices:
        table, window = _with_mig_rows(scn, host, rows, devices, table)
    return HostWindow(table=table, files=_flush_files(window, start_us, end_us, flush_us))


def _rows(scn: Scenario, host: HostPlan, start_us: int, end_us: int, flush_us: int) -> _Rows | None:
    """The host's ticks in the window (none while its collector is silent) for every GPU."""
    iv = scn.interval_us
    phase = host.phase_us
    ticks = np.arange(-((phase - start_us) // iv), -((phase - end_us) // iv), dtype=np.int64)
    ts = ticks * iv + phase
    heard = ~scn.events.silent(host.name, ts)
    ticks, ts = ticks[heard], ts[heard]
    n_ticks = len(ticks)
    if n_ticks == 0:
        return None
    gpus = scn.host_gpus(host)
    n_gpus = len(gpus)
    tl = scn.timelines
    window = ts // flush_us
    order = np.argsort(np.tile(window, n_gpus), kind="stable")
    by_gpu = np.empty((n_gpus, n_ticks), dtype=np.int64)
    for j, gpu in enumerate(gpus):
        lo, hi = tl.offsets[gpu.ordinal], tl.offsets[gpu.ordinal + 1]
        by_gpu[j] = lo + np.searchsorted(tl.start_tick[lo:hi], ticks, side="right") - 1
    return _Rows(
        gpus=gpus,
        gpu=np.repeat(np.arange(n_gpus), n_ticks)[order],
        tick=np.tile(ticks, n_gpus)[order],
        ts_us=np.tile(ts, n_gpus)[order],
        piece=by_gpu.ravel()[order],
        window=np.tile(window, n_gpus)[order],
    )


def _columns(scn: Scenario, host: HostPlan, rows: _Rows) -> dict[str, pa.Array]:
    """The schema's columns; a lost GPU's rows have status 'lost' and null metrics."""
    tl = scn.timelines
    piece = rows.piece
    model = host.model
    values = _metrics(scn, host, rows)
    lost = tl.lost[piece]
    mask = lost if lost.any() else None
    n = len(piece)
    mig_gpu = np.array([g.ordinal in scn.mig for g in rows.gpus], dtype=np.bool_)[rows.gpu]
    no_util = lost | mig_gpu  # a MIG GPU's own row has no utilization nor activity

    def const(value: object, kind: pa.DataType) -> pa.Array:
        return pa.repeat(pa.scalar(value, type=kind), n)

    def metric(name: str, kind: pa.DataType) -> pa.Array:
        return pa.array(values[name], type=kind, mask=mask)

    def util(name: str) -> pa.Array:
        return pa.array(values[name], type=pa.float32(), mask=no_util if no_util.any() else None)

    def level(value: object, dtype: npt.DTypeLike, kind: pa.DataType) -> pa.Array:
        return pa.array(np.full(n, value, dtype), type=kind, mask=mask)

    uuids = pa.array([g.uuid for g in rows.gpus], type=pa.string())
    return {
        "ts": pa.array(rows.ts_us, type=pa.timestamp("us", tz="UTC")),
        "interval_s": const(scn.interval_us / 1e6, pa.float32()),
        "host": const(host.name, pa.string()),
        "gpu_index": pa.array(np.array([g.index for g in rows.gpus], dtype=np.uint16)[rows.gpu]),
        "gpu_uuid": uuids.take(pa.array(rows.gpu)),
        "gpu_name": const(model.name, pa.string()),
        "status": _STATUS.take(pa.array(lost.astype(np.int8))),
        "gpu_util_pct": util("gpu_util_pct"),
        "mem_util_pct": util("mem_util_pct"),
        "mem_used_bytes": pa.array(tl.mem_used_bytes[piece], type=pa.int64(), mask=mask),
        "mem_total_bytes": level(model.mem_total_bytes, np.int64, pa.int64()),
        "power_w": metric("power_w", pa.float32()),
        "power_limit_w": level(model.power_limit_w, np.float32, pa.float32()),
        "energy_mj": metric("energy_mj", pa.int64()),
        "temp_gpu_c": metric("temp_gpu_c", pa.int16()),
        "temp_mem_c": (
            metric("temp_mem_c", pa.int16()) if model.has_hbm_temp else pa.nulls(n, pa.int16())
        ),
        "sm_clock_mhz": metric("sm_clock_mhz", pa.int32()),
        "sm_clock_max_mhz": level(model.sm_clock_max_mhz, np.int32, pa.int32()),
        "mem_clock_mhz": level(model.mem_clock_mhz, np.int32, pa.int32()),
        "clock_event_mask": pa.array(tl.clock_event_mask[piece], type=pa.uint64(), mask=mask),
        "thermal_violation_ns": metric("thermal_violation_ns", pa.int64()),
        "power_violation_ns": metric("power_violation_ns", pa.int64()),
        "mig_enabled": pa.array(mig_gpu, mask=mask),
        "processes": _processes(scn, piece, ~lost, mask),
        **_holders(scn, rows),
        **activity_columns(scn, host, rows, values, no_util),
        **health_columns(scn, rows, lost),
        "parent_gpu_uuid": pa.nulls(n, pa.string()),
        "mig_profile": pa.nulls(n, pa.string()),
        "mig_slice_fraction": pa.nulls(n, pa.float32()),
    }


def _with_mig_rows(
    scn: Scenario,
    host: HostPlan,
    rows: _Rows,
    devices: list[tuple[int, MigDevice]],
    table: pa.Table,
) -> tuple[pa.Table, np.ndarray]:
    """The table with a row per MIG device at each tick its GPU reports, in the collector's
    order, and the rows' flush windows."""
    heard = ~scn.timelines.lost[rows.piece]
    at = [np.flatnonzero((rows.gpu == j) & heard) for j, _ in devices]
    which = np.repeat(np.arange(len(devices)), [len(a) for a in at])
    picked = np.concatenate(at)
    mig = pa.table(_mig_columns(scn, host, rows, [d for _, d in devices], which, picked))
    window = np.concatenate([rows.window, rows.window[picked]])
    merged = pa.concat_tables([table, mig.cast(SCHEMA)]).append_column("window", pa.array(window))
    merged = merged.sort_by(
        [("window", "ascending"), ("gpu_uuid", "ascending"), ("ts", "ascending")]
    )
    return merged.drop_columns(["window"]), merged["window"].to_numpy()


def _mig_columns(
    scn: Scenario,
    host: HostPlan,
    rows: _Rows,
    devices: list[MigDevice],
    which: np.ndarray,
    picked: np.ndarray,
) -> dict[str, pa.Array]:
    """The MIG devices' rows: their memory, process, activity and slice; no power, clocks
    nor health (their GPU's row has them), no utilization (NVML has none for MIG)."""
    n = len(which)
    tick = rows.tick[picked]
    keys = np.array([d.noise_key for d in devices], dtype=np.uint64)[which]
    level = np.array([d.sm_active_pct for d in devices])[which]
    sm = np.clip(level + 6.0 * (2 * unit_noise(keys, tick, NOISE_SM) - 1), 0, 100)
    sm[level == 0] = 0.0
    tensor = sm * (0.4 + 0.2 * unit_noise(keys, tick, NOISE_TENSOR))
    pcie = (0.01 + 0.4 * sm / 100 * unit_noise(keys, tick, NOISE_PCIE)) * 1e9
    has = np.array([d.user is not None for d in devices])[which]
    procs = pa.array(
        [
            {"pid": d.pid, "user": d.user, "used_mem_bytes": d.mem_used_bytes, "job_id": None}
            for d in devices
        ],
        type=PROCESS_TYPE,
    )
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(has, out=offsets[1:])
    columns: dict[str, pa.Array] = {
        "ts": pa.array(rows.ts_us[picked], type=pa.timestamp("us", tz="UTC")),
        "interval_s": pa.repeat(pa.scalar(scn.interval_us / 1e6, pa.float32()), n),
        "host": pa.repeat(pa.scalar(host.name), n),
        "gpu_index": pa.array(
            np.array([g.index for g in rows.gpus], dtype=np.uint16)[rows.gpu[picked]]
        ),
        "gpu_uuid": pa.array([d.uuid for d in devices]).take(pa.array(which)),
        "gpu_name": pa.repeat(pa.scalar(host.model.name), n),
        "status": pa.repeat(pa.scalar(STATUS_OK), n),
        "mem_used_bytes": pa.array(
            np.array([d.mem_used_bytes + 16 * 2**20 for d in devices], dtype=np.int64)[which]
        ),
        "mem_total_bytes": pa.array(
            np.array([d.mem_total_bytes for d in devices], dtype=np.int64)[which]
        ),
        "mig_enabled": pa.repeat(pa.scalar(True), n),
        "processes": pa.ListArray.from_arrays(pa.array(offsets), procs.take(pa.array(which[has]))),
        "sm_active_pct": pa.array(sm, type=pa.float32()),
        "sm_occupancy_pct": pa.array(0.6 * sm, type=pa.float32()),
        "tensor_active_pct": pa.array(tensor, type=pa.float32()),
        "dram_active_pct": pa.array(0.7 * sm, type=pa.float32()),
        "pcie_rx_bytes_s": pa.array(pcie),
        "pcie_tx_bytes_s": pa.array(0.55 * pcie),
        "parent_gpu_uuid": pa.array([g.uuid for g in rows.gpus]).take(pa.array(rows.gpu[picked])),
        "mig_profile": pa.array([d.profile for d in devices]).take(pa.array(which)),
        "mig_slice_fraction": pa.array(
            np.array([d.slice_fraction for d in devices], dtype=np.float32)[which]
        ),
    }
    return {field.name: columns.get(field.name, pa.nulls(n, field.type)) for field in SAMPLE_SCHEMA}


def _metrics(scn: Scenario, host: HostPlan, rows: _Rows) -> dict[str, np.ndarray]:
    """The metrics that move from tick to tick: levels plus noise, and the counters."""
    tl = scn.timelines
    piece, tick = rows.piece, rows.tick
    keys = np.array([g.noise_key for g in rows.gpus], dtype=np.uint64)[rows.gpu]

    def noise(stream: int, at: np.ndarray = tick) -> np.ndarray:
        return unit_noise(keys, at, stream)

    iv_s = scn.interval_us / 1e6
    iv_ns = scn.interval_us * 1000
    amp = host.model.power_noise_w
    h_now = noise(NOISE_POWER)
    since = tick - tl.start_tick[piece]
    util = tl.util_pct[piece] + tl.util_amp_pct[piece] * (2 * noise(NOISE_UTIL) - 1)
    mem_util = tl.mem_util_pct[piece] + tl.mem_util_amp_pct[piece] * (2 * noise(NOISE_MEM_UTIL) - 1)
    power = tl.power_w[piece] + amp * (h_now - noise(NOISE_POWER, tick - 1))
    energy = tl.energy_base_mj[piece] + 1000.0 * iv_s * (tl.power_w[piece] * since + amp * h_now)
    temp = np.rint(tl.temp_gpu_c[piece] + 3.0 * (noise(NOISE_TEMP) - 0.5)).astype(np.int16)
    clock_steps = np.floor(noise(NOISE_CLOCK) * (tl.sm_clock_amp_mhz[piece] // 15 + 1))
    sm_clock = tl.sm_clock_mhz[piece] - 15 * clock_steps.astype(np.int64)
    return {
        "gpu_util_pct": np.clip(util, 0, 100).astype(np.float32),
        "mem_util_pct": np.clip(mem_util, 0, 100).astype(np.float32),
        "power_w": power.astype(np.float32),
        "energy_mj": np.floor(energy).astype(np.int64),
        "temp_gpu_c": temp,
        "temp_mem_c": (temp + 6 + np.floor(noise(NOISE_TEMP_MEM) * 3)).astype(np.int16),
        "sm_clock_mhz": sm_clock.astype(np.int32),
        "thermal_violation_ns": (
            tl.thermal_base_ns[piece] + iv_ns * tl.thermal_flag[piece] * (since + 1)
        ),
        "power_violation_ns": (
            tl.power_viol_base_ns[piece] + iv_ns * tl.power_viol_flag[piece] * (since + 1)
        ),
    }


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


def _holders(scn: Scenario, rows: _Rows) -> dict[str, pa.Array]:
    """`alloc_job_id` and `alloc_user`: the job that holds each row's GPU per jobstats'
    prolog files (the collector's --slurm-gpustat), whether or not a process runs."""
    holder = np.full(len(rows.gpu), -1, dtype=np.int32)
    for position, gpu in enumerate(rows.gpus):
        at = np.flatnonzero(rows.gpu == position)
        holder[at] = scn.holders.at(gpu.ordinal, rows.ts_us[at])
    none = holder < 0
    if none.all():
        nulls = pa.nulls(len(holder), pa.string())
        return {"alloc_job_id": nulls, "alloc_user": nulls, "cluster": nulls}
    index = pa.array(np.where(none, 0, holder), mask=none)
    return {
        "alloc_job_id": pa.array(scn.holders.job_ids, type=pa.string()).take(index),
        "alloc_user": pa.array(scn.holders.users, type=pa.string()).take(index),
        "cluster": pa.nulls(len(holder), pa.string()),
    }


def _flush_files(
    window: np.ndarray, start_us: int, end_us: int, flush_us: int
) -> list[tuple[int, int, int, int]]:
    """Contiguous runs of equal flush window in row order: one file each, its span clipped
    to [start, end) in whole seconds."""
    n = len(window)
    cuts = np.flatnonzero(np.diff(window)) + 1
    firsts = np.concatenate(([0], cuts))
    counts = np.diff(np.concatenate((firsts, [n])))
    files = []
    for first, count in zip(firsts.tolist(), counts.tolist(), strict=True):
        w = int(window[first])
        w_start = max(w * flush_us, start_us)
        w_end = min((w + 1) * flush_us, end_us)
        files.append((first, count, w_start // 1_000_000, -(-w_end // 1_000_000)))
    return files
