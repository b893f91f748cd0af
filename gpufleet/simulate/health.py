"""The simulated samples' v1.2 columns of a GPU's own rows: GPM activity and PCIe/NVLink
rates (GPUs whose model has GPM), and the health counters the scenario's events set."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from gpufleet.simulate.layout import HostPlan
from gpufleet.simulate.noise import (
    NOISE_DRAM,
    NOISE_NVLINK,
    NOISE_PCIE,
    NOISE_SM,
    NOISE_TENSOR,
    unit_noise,
)
from gpufleet.simulate.scenario import Scenario

if TYPE_CHECKING:
    from gpufleet.simulate.rows import _Rows as Rows


def activity_columns(
    scn: Scenario, host: HostPlan, rows: Rows, values: dict[str, np.ndarray], none: np.ndarray
) -> dict[str, pa.Array]:
    """GPM's activity and PCIe/NVLink rates (H100s only; null on others, where `none`)."""
    names = (
        ("sm_active_pct", pa.float32()),
        ("sm_occupancy_pct", pa.float32()),
        ("tensor_active_pct", pa.float32()),
        ("dram_active_pct", pa.float32()),
        ("pcie_rx_bytes_s", pa.float64()),
        ("pcie_tx_bytes_s", pa.float64()),
        ("nvlink_rx_bytes_s", pa.float64()),
        ("nvlink_tx_bytes_s", pa.float64()),
    )
    n = len(rows.piece)
    if not host.model.has_gpm or none.all():
        return {name: pa.nulls(n, kind) for name, kind in names}
    tl = scn.timelines
    keys = np.array([g.noise_key for g in rows.gpus], dtype=np.uint64)[rows.gpu]

    def noise(stream: int) -> np.ndarray:
        return unit_noise(keys, rows.tick, stream)

    util = values["gpu_util_pct"].astype(np.float64)
    sm = np.clip(util * tl.sm_ratio[rows.piece] * (0.92 + 0.16 * noise(NOISE_SM)), 0, 100)
    tensor = sm * tl.tensor_ratio[rows.piece] * (0.9 + 0.2 * noise(NOISE_TENSOR))
    dram = np.clip(values["mem_util_pct"] * (0.85 + 0.3 * noise(NOISE_DRAM)), 0, 100)
    pcie = (0.02 + 3.0 * util / 100 * noise(NOISE_PCIE)) * 1e9
    nvlink = tensor / 100 * 120e9 * (0.8 + 0.4 * noise(NOISE_NVLINK))
    out = (sm, 0.6 * sm, tensor, dram, pcie, 0.55 * pcie, nvlink, 0.97 * nvlink)
    mask = none if none.any() else None
    return {
        name: pa.array(value, type=kind, mask=mask)
        for (name, kind), value in zip(names, out, strict=True)
    }


def health_columns(scn: Scenario, rows: Rows, lost: np.ndarray) -> dict[str, pa.Array]:
    """The GPU's health counters: clean but for the events' failing GPUs (`events`), and
    XID 79 on the lost GPU's last sample before it fell off the bus."""
    ev = scn.events
    n = len(rows.piece)
    uuids = np.array([g.uuid for g in rows.gpus], dtype=object)[rows.gpu]
    ts = rows.ts_us
    mask = lost if lost.any() else None
    xid79 = (
        (uuids == ev.lost_gpu_uuid)
        & (ts < ev.lost_start_s * 1_000_000)
        & (ts >= ev.lost_start_s * 1_000_000 - scn.interval_us)
    )
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(xid79, out=offsets[1:])
    xids = pa.array(np.full(int(offsets[-1]), 79, dtype=np.int32))
    ecc = np.zeros(n, dtype=np.int64)
    if ev.ecc_gpu_uuid is not None:
        on = uuids == ev.ecc_gpu_uuid
        ecc[on] = np.searchsorted(np.array(ev.ecc_times_s) * 1_000_000, ts[on], side="right")
    remap = (uuids == ev.remap_gpu_uuid) & (ts >= ev.remap_start_s * 1_000_000)
    return {
        "xid_errors": pa.ListArray.from_arrays(
            pa.array(offsets), xids, type=pa.list_(pa.int32()), mask=pa.array(lost)
        ),
        "ecc_uncorrected_volatile": pa.array(ecc, type=pa.int64(), mask=mask),
        "ecc_corrected_volatile": pa.array(4 * ecc, type=pa.int64(), mask=mask),
        "remapped_rows_pending": pa.array(remap, type=pa.bool_(), mask=mask),
        "remapped_rows_failure": pa.array(np.zeros(n, dtype=np.bool_), mask=mask),
        "retired_pages_pending": pa.nulls(n, pa.bool_()),  # row remapping, no page retirement
        "pcie_replay_count": pa.array(np.zeros(n, dtype=np.int64), mask=mask),
    }
