"""The collector's per-GPU reader: the GPUs NVML sees, and one `GpuSample` per GPU (and per
MIG device) per tick.

Every query goes through the one `Nvml` wrapper of safenvml.py, which turns NVML's errors into
nulls, older APIs, `GpuLostError` or `NvmlUninitializedError`. The plain readings are data
(`METRICS` in metrics.py), which `GpuReader.read` loops over; it reads the rest (utilization,
MIG, memory, memory temperature, processes, remapped rows) itself, GPM activity through gpm.py,
XID events through events.py, MIG devices through mig.py and processes through processes.py.

A MIG-enabled GPU gives one row for the GPU (power, energy, temperatures, clocks, health, and
its memory and processes summed over its MIG devices, as before MIG rows existed) and one row
per MIG device (its UUID, `parent_gpu_uuid`, `mig_profile`, `mig_slice_fraction`, its own
memory, processes and GPM activity).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpufleet.collectors import events
from gpufleet.collectors.events import XidWatch
from gpufleet.collectors.gpm import GPM_FIELDS, Gpm, GpmSeries, free_series
from gpufleet.collectors.metrics import METRICS, GpuSample, Metric
from gpufleet.collectors.mig import MigDevice, max_slices, mig_device, mig_handles, slice_fraction
from gpufleet.collectors.processes import merged, owned, process_memory
from gpufleet.collectors.procinfo import ProcessInfo
from gpufleet.collectors.safenvml import (
    LOST_ERRORS,
    UNSUPPORTED_ERRORS,
    GpuLostError,
    Nvml,
    NvmlUnavailableError,
    NvmlUninitializedError,
    init_nvml,
    shutdown_nvml,
)
from gpufleet.collectors.schema import STATUS_LOST, STATUS_OK
from gpufleet.collectors.values import clamp_pct, sample_pairs, value_member

__all__ = [
    "GPU_SAMPLES",
    "MEMORY_SAMPLES",
    "GpuLostError",
    "GpuReader",
    "GpuSample",
    "GpuState",
    "MigDevice",
    "Nvml",
    "NvmlUnavailableError",
    "NvmlUninitializedError",
    "init_nvml",
    "list_gpus",
    "sample_pairs",
    "shutdown_nvml",
]

GPU_SAMPLES = pynvml.NVML_GPU_UTILIZATION_SAMPLES
MEMORY_SAMPLES = pynvml.NVML_MEMORY_UTILIZATION_SAMPLES


@dataclass(slots=True)
class GpuState:
    """What the collector knows about one GPU between ticks. Keyed by UUID, never by handle."""

    uuid: str
    index: int
    name: str | None
    handle: Any  # a pynvml device handle; None while the GPU is lost
    cursors_us: dict[int, int] = field(default_factory=dict)  # NVML's µs stamps, by sample type
    lost: bool = False
    # Its MIG devices' UUIDs at the last read, in NVML's order
    mig_uuids: tuple[str, ...] = ()
    # GPM: whether the GPU has it (None: not known yet), and its series by GPU or MIG UUID
    gpm_supported: bool | None = None
    gpm: dict[str, GpmSeries] = field(default_factory=dict)
    xids: XidWatch = field(default_factory=XidWatch)
    # Per MIG device UUID: (GPU instance id, profile, slices), which stay while it exists
    mig_devices: dict[str, MigDevice] = field(default_factory=dict)
    max_slices: int | None = None  # the GPU's largest GPU instance profile; 0: unknown


def list_gpus() -> list[GpuState]:
    """The GPUs NVML sees now, by index. GPUs this process may not open are left out."""
    gpus: list[GpuState] = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
        except (*UNSUPPORTED_ERRORS, *LOST_ERRORS):
            continue
        try:
            name: str | None = pynvml.nvmlDeviceGetName(handle)
        except pynvml.NVMLError:
            name = None
        gpus.append(GpuState(uuid=str(uuid), index=index, name=name, handle=handle))
    return gpus


class GpuReader:
    """Reads one `GpuSample` per GPU per tick through an `Nvml` wrapper."""

    def __init__(self, *, nvml: Nvml, procinfo: ProcessInfo, host: str) -> None:
        if not host:
            raise ValueError("host must be a non-empty string")
        self._nvml = nvml
        self._procinfo = procinfo
        self._host = host
        self._gpm = Gpm(nvml=nvml)

    def prime(self, gpu: GpuState) -> None:
        """Set the sample-buffer cursors to the newest sample, and take a first GPM sample,
        so the next read covers only the interval from now. A cursor from before a re-init
        is kept unless NVML's clock went back (a driver reload)."""
        try:
            for kind in (GPU_SAMPLES, MEMORY_SAMPLES):
                newest = self._newest_sample_us(gpu, kind)
                old = gpu.cursors_us.get(kind)
                if newest is not None and (old is None or newest < old):
                    gpu.cursors_us[kind] = newest
            self._gpu_activity(gpu)
        except (GpuLostError, NvmlUninitializedError):
            return  # the next read says so, and is handled there

    def release(self, gpu: GpuState) -> None:
        """Free the GPU's GPM samples and event set, before nvmlShutdown (a re-init or the
        end): NVML's handles do not outlive it. The next read opens them again."""
        for series in gpu.gpm.values():
            free_series(series)
        gpu.gpm.clear()
        events.close(gpu.xids)
        gpu.gpm_supported = None
        gpu.mig_devices.clear()
        gpu.max_slices = None

    def _newest_sample_us(self, gpu: GpuState, kind: int) -> int | None:
        result = self._samples(gpu, kind, 0)
        if not result or not result[1]:
            return None
        return max(int(s.timeStamp) for s in result[1])

    def _samples(self, gpu: GpuState, kind: int, cursor: int) -> Any:
        """(value type, samples newer than `cursor`) of one sample buffer; None if unsupported."""
        return self._nvml.call(
            gpu.uuid,
            f"samples.{kind}",
            ("nvmlDeviceGetSamples",),
            gpu.handle,
            kind,
            cursor,
            not_found=(0, []),
        )

    def lost_sample(self, gpu: GpuState, *, ts_us: int, interval_s: float) -> GpuSample:
        """The row of a GPU that is lost this tick: null metrics, but the XIDs drained before
        it was lost (XID 79: fallen off the bus), if any."""
        return GpuSample(
            ts=ts_us,
            interval_s=interval_s,
            host=self._host,
            gpu_index=gpu.index,
            gpu_uuid=gpu.uuid,
            gpu_name=gpu.name,
            status=STATUS_LOST,
            xid_errors=events.take(gpu.xids) or None,
        )

    def read(self, gpu: GpuState, *, ts_us: int, interval_s: float) -> list[GpuSample]:
        """The rows of one GPU: its own, then one per MIG device when MIG is on.
        Raises GpuLostError / NvmlUninitializedError."""
        u, h = gpu.uuid, gpu.handle
        sample = self._row(gpu, u, ts_us=ts_us, interval_s=interval_s)
        events.drain(self._nvml, u, h, gpu.xids)  # first: a GPU about to be lost says why
        mig_mode = self._nvml.call(u, "mig_mode", ("nvmlDeviceGetMigMode",), h)
        mig_enabled = bool(mig_mode) and mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        sample.mig_enabled = mig_enabled
        # Utilization (rates and sample buffers) is NotSupported on a MIG-enabled GPU; memory
        # and processes are read per MIG device, the rest from the parent GPU.
        if not mig_enabled:
            sample.gpu_util_pct, sample.mem_util_pct = self._utilization(gpu)
        handles = mig_handles(self._nvml, u, h) if mig_enabled else [(u, h)]
        memory = [self._memory_info(key, handle) for key, handle in handles]
        processes = [process_memory(self._nvml, key, handle) for key, handle in handles]
        sample.mem_used_bytes, sample.mem_total_bytes = _summed_memory(memory)
        for metric in METRICS:
            setattr(sample, metric.field, self._metric(u, h, metric))
        sample.temp_mem_c = self._memory_temp(u, h)
        sample.remapped_rows_pending, sample.remapped_rows_failure = self._remapped_rows(u, h)
        sample.processes = owned(self._procinfo, merged(processes))
        _set_activity(sample, self._gpu_activity(gpu))
        rows = [sample]
        if mig_enabled:
            rows += self._mig_rows(gpu, handles, memory, processes, ts_us, interval_s)
        else:
            gpu.mig_uuids = ()
            self._forget_mig_devices(gpu, set())
        sample.xid_errors = events.take(gpu.xids)
        return rows

    def _row(self, gpu: GpuState, uuid: str, *, ts_us: int, interval_s: float) -> GpuSample:
        return GpuSample(
            ts=ts_us,
            interval_s=interval_s,
            host=self._host,
            gpu_index=gpu.index,
            gpu_uuid=uuid,
            gpu_name=gpu.name,
            status=STATUS_OK,
        )

    def _gpu_activity(self, gpu: GpuState) -> list[float | None] | None:
        """The GPU's GPM activity since the last tick; None without GPM or a previous sample."""
        if gpu.gpm_supported is None:
            gpu.gpm_supported = self._gpm.is_supported(gpu.uuid, gpu.handle)
        if not gpu.gpm_supported:
            return None
        return self._gpm.sample(gpu.gpm, gpu.uuid, "nvmlGpmSampleGet", gpu.handle)

    def _remapped_rows(self, u: str, h: Any) -> tuple[bool | None, bool | None]:
        """(pending, failure) of row remapping (Ampere and newer)."""
        answer = self._nvml.call(u, "remapped_rows", ("nvmlDeviceGetRemappedRows",), h)
        if answer is None:
            return None, None
        _corrected, _uncorrected, pending, failure = answer
        return bool(pending), bool(failure)

    def _mig_rows(
        self,
        gpu: GpuState,
        handles: list[tuple[str, Any]],
        memory: list[Any],
        processes: list[dict[int, int | None] | None],
        ts_us: int,
        interval_s: float,
    ) -> list[GpuSample]:
        """One row per MIG device: its memory and processes (read already, for the GPU's
        row), its profile and share of the GPU, and its GPU instance's GPM activity."""
        rows: list[GpuSample] = []
        h = gpu.handle
        for (key, mig), mig_memory, mig_processes in zip(handles, memory, processes, strict=True):
            uuid = self._nvml.call(key, "mig_uuid", ("nvmlDeviceGetUUID",), mig)
            if not uuid:
                continue  # this tick without its row: it has no name to be written under
            row = self._row(gpu, str(uuid), ts_us=ts_us, interval_s=interval_s)
            device = gpu.mig_devices.get(row.gpu_uuid) or mig_device(self._nvml, row.gpu_uuid, mig)
            gpu.mig_devices[row.gpu_uuid] = device
            row.mig_enabled = True
            row.parent_gpu_uuid = gpu.uuid
            row.mig_profile = device.profile
            row.mig_slice_fraction = self._slice_fraction(gpu, device)
            row.mem_used_bytes, row.mem_total_bytes = _summed_memory([mig_memory])
            row.processes = owned(self._procinfo, merged([mig_processes]))
            gi = device.gpu_instance_id
            if gpu.gpm_supported and gi is not None:
                activity = self._gpm.sample(gpu.gpm, row.gpu_uuid, "nvmlGpmMigSampleGet", h, gi)
                _set_activity(row, activity)
            rows.append(row)
        gpu.mig_uuids = tuple(row.gpu_uuid for row in rows)
        self._forget_mig_devices(gpu, set(gpu.mig_uuids))
        return rows

    def _slice_fraction(self, gpu: GpuState, device: MigDevice) -> float | None:
        """The MIG device's share of its GPU; the GPU's largest profile is asked once."""
        if gpu.max_slices is None:
            gpu.max_slices = max_slices(self._nvml, gpu.uuid, gpu.handle)
        return slice_fraction(device, gpu.max_slices)

    def _forget_mig_devices(self, gpu: GpuState, present: set[str]) -> None:
        """Drop what is kept for MIG devices that are gone (instances were reconfigured)."""
        for uuid in [uuid for uuid in gpu.mig_devices if uuid not in present]:
            del gpu.mig_devices[uuid]
        for uuid in [uuid for uuid in gpu.gpm if uuid != gpu.uuid and uuid not in present]:
            free_series(gpu.gpm.pop(uuid))

    def _metric(self, u: str, h: Any, metric: Metric) -> Any:
        answer = self._nvml.call(u, metric.field, metric.apis, h, *metric.args)
        return None if answer is None else metric.convert(answer)

    def _utilization(self, gpu: GpuState) -> tuple[float | None, float | None]:
        """(GPU, memory) utilization: the mean of the sample buffers over the interval, or the
        instant reading where a buffer has nothing new or is unsupported."""
        gpu_util = self._mean_from_samples(gpu, GPU_SAMPLES)
        mem_util = self._mean_from_samples(gpu, MEMORY_SAMPLES)
        if gpu_util is None or mem_util is None:
            rates = self._nvml.call(
                gpu.uuid, "utilization", ("nvmlDeviceGetUtilizationRates",), gpu.handle
            )
            if gpu_util is None and rates is not None:
                gpu_util = clamp_pct(rates.gpu)
            if mem_util is None and rates is not None:
                mem_util = clamp_pct(rates.memory)
        return gpu_util, mem_util

    def _mean_from_samples(self, gpu: GpuState, kind: int) -> float | None:
        """Mean of the sample buffer since the cursor; None when unsupported or empty."""
        cursor = gpu.cursors_us.get(kind, 0)
        result = self._samples(gpu, kind, cursor)
        if not result:
            return None
        value_type, samples = result
        fresh = [pair for pair in sample_pairs(samples, value_type) if pair[0] > cursor]
        if not fresh:
            return None
        gpu.cursors_us[kind] = max(fresh)[0]
        values = [value for _, value in fresh]
        if min(values) < 0.0 or max(values) > 100.0:
            values = [clamp_pct(value) for value in values]
        return math.fsum(values) / len(values)

    def _memory_info(self, key: str, h: Any) -> Any:
        """NVML's memory answer (v2's `used` leaves out the memory the driver reserves, v1's,
        on drivers without v2, includes it); None when unsupported."""
        return self._nvml.query(
            key,
            "memory",
            (
                "nvmlDeviceGetMemoryInfo_v2",
                lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
            ),
            ("nvmlDeviceGetMemoryInfo", lambda: pynvml.nvmlDeviceGetMemoryInfo(h)),
        )

    def _memory_temp(self, u: str, h: Any) -> int | None:
        """°C of the memory (HBM), field NVML_FI_DEV_MEMORY_TEMP, where the board reports it."""
        field_ids = [pynvml.NVML_FI_DEV_MEMORY_TEMP]
        values = self._nvml.call(u, "temp_mem_c", ("nvmlDeviceGetFieldValues",), h, field_ids)
        if not values:
            return None
        entry = values[0]  # the call succeeds as a whole; each entry has its own return code
        if entry.nvmlReturn != pynvml.NVML_SUCCESS:
            if entry.nvmlReturn in (
                pynvml.NVML_ERROR_NOT_SUPPORTED,
                pynvml.NVML_ERROR_NO_PERMISSION,
            ):
                self._nvml.mark_unsupported(u, "temp_mem_c")
            return None
        celsius = int(getattr(entry.value, value_member(entry.valueType)))
        return celsius if 0 < celsius < 200 else None  # 0 is what boards without a sensor say


def _summed_memory(answers: Sequence[Any]) -> tuple[int | None, int | None]:
    """(used, total) bytes summed over NVML's memory answers; (None, None) when none."""
    used = total = 0
    answered = False
    for memory in answers:
        if memory is not None:
            answered = True
            used += int(memory.used)
            total += int(memory.total)
    return (used, total) if answered else (None, None)


def _set_activity(sample: GpuSample, activity: Sequence[float | None] | None) -> None:
    """Fill the GPM columns (all null when `activity` is None)."""
    if activity is not None:
        for name, value in zip(GPM_FIELDS, activity, strict=True):
            setattr(sample, name, value)
