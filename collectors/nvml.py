"""NVML access for the collector: one wrapper around every pynvml call, and the per-GPU reader.

Every query goes through `Nvml.query`, which applies the policy of NVML.md section 11:

- NotSupported / NoPermission: the value is null and the (GPU, metric) pair is never asked again;
- FunctionNotFound / NVMLLibraryMismatchError: the next, older API of the query is used, and
  the missing one is never called again;
- NotFound: an empty result (an empty sample buffer, an empty MIG slot);
- GpuIsLost / ResetRequired / Unknown: `GpuLostError`, so the GPU's row becomes `status='lost'`;
- Uninitialized: `NvmlUninitializedError`, so the collector calls `nvmlInit` again.

pynvml functions are looked up on the module at call time, so tests can replace them.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from gpufleet.collectors.procinfo import ProcessInfo
from gpufleet.collectors.schema import STATUS_LOST, STATUS_OK
from gpufleet.errors import GpufleetError

T = TypeVar("T")

_UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission)
_LOST = (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired, pynvml.NVMLError_Unknown)
_MISSING_API = (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLLibraryMismatchError)
_NO_DRIVER = (
    pynvml.NVMLError_LibraryNotFound,
    pynvml.NVMLError_DriverNotLoaded,
    pynvml.NVMLError_LibRmVersionMismatch,
)

# The member of c_nvmlValue_t that holds a sample, by NVML value type (pynvml py:288-296).
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
_MIG_NO_INSTANCE = 0xFFFFFFFF
_INT64_MAX = 2**63 - 1

GPU_SAMPLES = pynvml.NVML_GPU_UTILIZATION_SAMPLES
MEMORY_SAMPLES = pynvml.NVML_MEMORY_UTILIZATION_SAMPLES


class GpuLostError(Exception):
    """A GPU answered GpuIsLost, ResetRequired or Unknown: its row this tick is `lost`."""


class NvmlUninitializedError(Exception):
    """NVML answered Uninitialized (a driver reload): call `nvmlInit` again."""


class NvmlUnavailableError(GpufleetError):
    """NVML cannot be loaded or initialised on this host."""


def init_nvml() -> None:
    """`nvmlInit`, turning a missing library or driver into one clear `NvmlUnavailableError`."""
    try:
        pynvml.nvmlInit()
    except _NO_DRIVER as exc:
        raise NvmlUnavailableError(
            f"cannot use NVML ({exc}): is the NVIDIA driver installed and loaded on this host?"
        ) from exc
    except pynvml.NVMLError as exc:
        raise NvmlUnavailableError(f"cannot initialise NVML: {exc}") from exc


def shutdown_nvml() -> None:
    """`nvmlShutdown`, ignoring errors: it is only ever called on the way out or to re-init."""
    with contextlib.suppress(pynvml.NVMLError):
        pynvml.nvmlShutdown()


class Nvml:
    """The one wrapper around NVML queries; remembers what each GPU and the library lack."""

    def __init__(self) -> None:
        self._unsupported: set[tuple[str, str]] = set()
        self._missing_apis: set[str] = set()

    def is_unsupported(self, uuid: str, metric: str) -> bool:
        return (uuid, metric) in self._unsupported

    def mark_unsupported(self, uuid: str, metric: str) -> None:
        self._unsupported.add((uuid, metric))

    def forget_unsupported(self) -> None:
        """Ask everything again (after a driver reload, support may have changed)."""
        self._unsupported.clear()

    def query(
        self,
        uuid: str,
        metric: str,
        *apis: tuple[str, Callable[[], T]],
        not_found: T | None = None,
    ) -> T | None:
        """The first of `apis` (newest first, each `(name, call)`) that this library has.

        Returns None when the metric is unsupported for this GPU (and caches that), or
        `not_found` when NVML answers NotFound. Other transient errors give None this time.
        """
        if (uuid, metric) in self._unsupported:
            return None
        for name, call in apis:
            if name in self._missing_apis:
                continue
            try:
                return call()
            except _MISSING_API:
                self._missing_apis.add(name)
            except _UNSUPPORTED:
                self._unsupported.add((uuid, metric))
                return None
            except pynvml.NVMLError_NotFound:
                return not_found
            except _LOST as exc:
                raise GpuLostError(uuid) from exc
            except pynvml.NVMLError_Uninitialized as exc:
                raise NvmlUninitializedError(uuid) from exc
            except pynvml.NVMLError:
                return None
        self._unsupported.add((uuid, metric))
        return None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    pid: int
    user: str | None
    used_mem_bytes: int | None
    job_id: str | None

    def to_record(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "user": self.user,
            "used_mem_bytes": self.used_mem_bytes,
            "job_id": self.job_id,
        }


@dataclass(slots=True, kw_only=True)
class GpuSample:
    """One row of CONTRACT section 2; field names are the column names."""

    ts: int  # microseconds since the Unix epoch, UTC
    interval_s: float
    host: str
    gpu_index: int
    gpu_uuid: str
    gpu_name: str | None
    status: str
    gpu_util_pct: float | None = None
    mem_util_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_mj: int | None = None
    temp_gpu_c: int | None = None
    temp_mem_c: int | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    mem_clock_mhz: int | None = None
    clock_event_mask: int | None = None
    thermal_violation_ns: int | None = None
    power_violation_ns: int | None = None
    mig_enabled: bool | None = None
    processes: list[GpuProcess] | None = None

    def to_record(self) -> dict[str, Any]:
        """A plain dict for the spool (JSON) and for `pyarrow.Table.from_pylist`."""
        return {
            "ts": self.ts,
            "interval_s": self.interval_s,
            "host": self.host,
            "gpu_index": self.gpu_index,
            "gpu_uuid": self.gpu_uuid,
            "gpu_name": self.gpu_name,
            "status": self.status,
            "gpu_util_pct": self.gpu_util_pct,
            "mem_util_pct": self.mem_util_pct,
            "mem_used_bytes": self.mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "power_w": self.power_w,
            "power_limit_w": self.power_limit_w,
            "energy_mj": self.energy_mj,
            "temp_gpu_c": self.temp_gpu_c,
            "temp_mem_c": self.temp_mem_c,
            "sm_clock_mhz": self.sm_clock_mhz,
            "sm_clock_max_mhz": self.sm_clock_max_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
            "clock_event_mask": self.clock_event_mask,
            "thermal_violation_ns": self.thermal_violation_ns,
            "power_violation_ns": self.power_violation_ns,
            "mig_enabled": self.mig_enabled,
            "processes": (
                None if self.processes is None else [p.to_record() for p in self.processes]
            ),
        }


@dataclass(slots=True)
class GpuState:
    """What the collector knows about one GPU between ticks. Keyed by UUID, never by handle."""

    uuid: str
    index: int
    name: str | None
    handle: Any  # a pynvml device handle; None while the GPU is lost
    # Sample-buffer cursors (NVML's own microsecond timestamps), by sampling type.
    cursors_us: dict[int, int] = field(default_factory=dict)
    lost: bool = False


def list_gpus() -> list[GpuState]:
    """The GPUs NVML sees now, by index. GPUs this process may not open are left out."""
    gpus: list[GpuState] = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
        except (*_UNSUPPORTED, *_LOST):
            continue
        try:
            name: str | None = pynvml.nvmlDeviceGetName(handle)
        except pynvml.NVMLError:
            name = None
        gpus.append(GpuState(uuid=str(uuid), index=index, name=name, handle=handle))
    return gpus


# c_nvmlSample_t is a u64 timestamp and an 8-byte c_nvmlValue_t union; struct codes by value
# type (dVal, uiVal, ulVal, ullVal, sllVal, siVal, usVal), padded to the union's 8 bytes,
# in native byte order.
_ULONG = "=QQ" if ctypes.sizeof(ctypes.c_ulong) == 8 else "=QI4x"
_SAMPLE_FORMATS = ("=Qd", "=QI4x", _ULONG, "=QQ", "=Qq", "=Qi4x", "=QH6x")


def sample_pairs(samples: Sequence[Any], value_type: int) -> Iterable[tuple[int, float]]:
    """(timestamp_us, value) of NVML samples.

    pynvml returns the samples as views into one ctypes array, and its structures read every
    field through a Python-level `__getattribute__` (about 0.5 us each): 60 samples x 2 kinds
    x 8 GPUs per tick add up. So, when the views are contiguous, the whole buffer is
    unpacked in one `struct.iter_unpack`; otherwise each sample is read field by field.
    """
    if not samples:
        return ()
    known_type = 0 <= value_type < len(_SAMPLE_FORMATS)
    size = ctypes.sizeof(pynvml.c_nvmlSample_t)
    if known_type and size == 16 and type(samples[0]) is pynvml.c_nvmlSample_t:
        start = ctypes.addressof(samples[0])
        with contextlib.suppress(TypeError):  # not all ctypes objects: read field by field
            addresses = list(map(ctypes.addressof, samples))
            if addresses == list(range(start, start + size * len(samples), size)):
                raw = ctypes.string_at(start, size * len(samples))
                return [
                    (t, float(v)) for t, v in struct.iter_unpack(_SAMPLE_FORMATS[value_type], raw)
                ]
    member = _VALUE_MEMBERS[value_type] if known_type else "uiVal"
    pairs = []
    for s in samples:
        pairs.append((int(s.timeStamp), float(getattr(s.sampleValue, member))))
    return pairs


def _clamp_pct(value: float) -> float:
    return min(max(float(value), 0.0), 100.0)


class GpuReader:
    """Reads one `GpuSample` per GPU per tick through an `Nvml` wrapper."""

    def __init__(self, *, nvml: Nvml, procinfo: ProcessInfo, host: str) -> None:
        if not host:
            raise ValueError("host must be a non-empty string")
        self._nvml = nvml
        self._procinfo = procinfo
        self._host = host

    def prime(self, gpu: GpuState) -> None:
        """Set the sample-buffer cursors to the newest sample, so the next read covers only
        the interval from now. A cursor from before a re-init is kept unless NVML's clock went
        back (a driver reload)."""
        for kind in (GPU_SAMPLES, MEMORY_SAMPLES):
            try:
                newest = self._newest_sample_us(gpu, kind)
            except (GpuLostError, NvmlUninitializedError):
                return  # the next read says so, and is handled there
            old = gpu.cursors_us.get(kind)
            if newest is not None and (old is None or newest < old):
                gpu.cursors_us[kind] = newest

    def _newest_sample_us(self, gpu: GpuState, kind: int) -> int | None:
        handle = gpu.handle
        result: Any = self._nvml.query(
            gpu.uuid,
            f"samples.{kind}",
            ("nvmlDeviceGetSamples", lambda: pynvml.nvmlDeviceGetSamples(handle, kind, 0)),
            not_found=(0, []),
        )
        if not result or not result[1]:
            return None
        return max(int(s.timeStamp) for s in result[1])

    def lost_sample(self, gpu: GpuState, *, ts_us: int, interval_s: float) -> GpuSample:
        return GpuSample(
            ts=ts_us,
            interval_s=interval_s,
            host=self._host,
            gpu_index=gpu.index,
            gpu_uuid=gpu.uuid,
            gpu_name=gpu.name,
            status=STATUS_LOST,
        )

    def read(self, gpu: GpuState, *, ts_us: int, interval_s: float) -> GpuSample:
        """Every metric of one GPU. Raises GpuLostError / NvmlUninitializedError."""
        q = self._nvml.query
        u = gpu.uuid
        h = gpu.handle
        sample = GpuSample(
            ts=ts_us,
            interval_s=interval_s,
            host=self._host,
            gpu_index=gpu.index,
            gpu_uuid=u,
            gpu_name=gpu.name,
            status=STATUS_OK,
        )

        mig_mode: Any = q(
            u, "mig_mode", ("nvmlDeviceGetMigMode", lambda: pynvml.nvmlDeviceGetMigMode(h))
        )
        mig_enabled = bool(mig_mode) and mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        sample.mig_enabled = mig_enabled

        if not mig_enabled:  # utilization is unsupported on MIG (NVML.md section 10)
            rates: Any = None
            gpu_util = self._mean_from_samples(gpu, GPU_SAMPLES)
            mem_util = self._mean_from_samples(gpu, MEMORY_SAMPLES)
            if gpu_util is None or mem_util is None:
                rates = q(
                    u,
                    "utilization",
                    (
                        "nvmlDeviceGetUtilizationRates",
                        lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
                    ),
                )
            if gpu_util is None and rates is not None:
                gpu_util = _clamp_pct(rates.gpu)
            if mem_util is None and rates is not None:
                mem_util = _clamp_pct(rates.memory)
            sample.gpu_util_pct = gpu_util
            sample.mem_util_pct = mem_util

        handles = self._mig_handles(gpu) if mig_enabled else [(u, h)]
        used_total = [0, 0]
        have_memory = False
        for key, handle in handles:
            memory = self._memory(key, handle)
            if memory is not None:
                have_memory = True
                used_total[0] += int(memory.used)
                used_total[1] += int(memory.total)
        if have_memory:
            sample.mem_used_bytes, sample.mem_total_bytes = used_total

        power_mw = q(
            u, "power", ("nvmlDeviceGetPowerUsage", lambda: pynvml.nvmlDeviceGetPowerUsage(h))
        )
        sample.power_w = None if power_mw is None else power_mw / 1000.0
        limit_mw = q(
            u,
            "power_limit",
            ("nvmlDeviceGetEnforcedPowerLimit", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h)),
        )
        sample.power_limit_w = None if limit_mw is None else limit_mw / 1000.0
        energy = q(
            u,
            "energy",
            (
                "nvmlDeviceGetTotalEnergyConsumption",
                lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
            ),
        )
        sample.energy_mj = None if energy is None else min(int(energy), _INT64_MAX)

        gpu_sensor = pynvml.NVML_TEMPERATURE_GPU
        sample.temp_gpu_c = q(
            u,
            "temp_gpu",
            ("nvmlDeviceGetTemperatureV", lambda: pynvml.nvmlDeviceGetTemperatureV(h, gpu_sensor)),
            ("nvmlDeviceGetTemperature", lambda: pynvml.nvmlDeviceGetTemperature(h, gpu_sensor)),
        )
        sample.temp_mem_c = self._memory_temp(u, h)

        sm, mem = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
        sample.sm_clock_mhz = q(
            u, "sm_clock", ("nvmlDeviceGetClockInfo", lambda: pynvml.nvmlDeviceGetClockInfo(h, sm))
        )
        sample.sm_clock_max_mhz = q(
            u,
            "sm_clock_max",
            ("nvmlDeviceGetMaxClockInfo", lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, sm)),
        )
        sample.mem_clock_mhz = q(
            u,
            "mem_clock",
            ("nvmlDeviceGetClockInfo", lambda: pynvml.nvmlDeviceGetClockInfo(h, mem)),
        )
        sample.clock_event_mask = q(
            u,
            "clock_events",
            (
                "nvmlDeviceGetCurrentClocksEventReasons",
                lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
            ),
            (
                "nvmlDeviceGetCurrentClocksThrottleReasons",
                lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h),
            ),
        )
        sample.thermal_violation_ns = self._violation_ns(u, h, pynvml.NVML_PERF_POLICY_THERMAL)
        sample.power_violation_ns = self._violation_ns(u, h, pynvml.NVML_PERF_POLICY_POWER)

        sample.processes = self._processes(u, handles)
        return sample

    def _mean_from_samples(self, gpu: GpuState, kind: int) -> float | None:
        """Mean of the sample buffer since the cursor; None when unsupported or empty."""
        cursor = gpu.cursors_us.get(kind, 0)
        handle = gpu.handle
        result: Any = self._nvml.query(
            gpu.uuid,
            f"samples.{kind}",
            ("nvmlDeviceGetSamples", lambda: pynvml.nvmlDeviceGetSamples(handle, kind, cursor)),
            not_found=(0, []),
        )
        if not result:
            return None
        value_type, samples = result
        fresh = [pair for pair in sample_pairs(samples, value_type) if pair[0] > cursor]
        if not fresh:
            return None
        gpu.cursors_us[kind] = max(fresh)[0]
        values = [value for _, value in fresh]
        if min(values) < 0.0 or max(values) > 100.0:
            values = [_clamp_pct(value) for value in values]
        return math.fsum(values) / len(values)

    def _mig_handles(self, gpu: GpuState) -> list[tuple[str, Any]]:
        """(cache key, handle) of every MIG device of a MIG-enabled GPU, queried each tick."""
        h = gpu.handle
        count = self._nvml.query(
            gpu.uuid,
            "mig_count",
            ("nvmlDeviceGetMaxMigDeviceCount", lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(h)),
        )
        handles: list[tuple[str, Any]] = []
        for slot in range(count or 0):
            mig = self._nvml.query(
                gpu.uuid,
                "mig_handle",
                (
                    "nvmlDeviceGetMigDeviceHandleByIndex",
                    lambda slot=slot: pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, slot),  # type: ignore[misc]
                ),
            )
            if mig is not None:  # an empty slot answers NotFound: skip it and go on
                handles.append((f"{gpu.uuid}/mig{slot}", mig))
        return handles

    def _memory(self, key: str, h: Any) -> Any:
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
        values = self._nvml.query(
            u,
            "temp_mem",
            (
                "nvmlDeviceGetFieldValues",
                lambda: pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_MEMORY_TEMP]),
            ),
        )
        if not values:
            return None
        entry = values[0]
        if entry.nvmlReturn != pynvml.NVML_SUCCESS:
            if entry.nvmlReturn in (
                pynvml.NVML_ERROR_NOT_SUPPORTED,
                pynvml.NVML_ERROR_NO_PERMISSION,
            ):
                self._nvml.mark_unsupported(u, "temp_mem")
            return None
        vt = entry.valueType
        member = _VALUE_MEMBERS[vt] if 0 <= vt < len(_VALUE_MEMBERS) else "uiVal"
        celsius = int(getattr(entry.value, member))
        return celsius if 0 < celsius < 200 else None  # 0 is what boards without a sensor say

    def _violation_ns(self, u: str, h: Any, policy: int) -> int | None:
        status = self._nvml.query(
            u,
            f"violation.{policy}",
            (
                "nvmlDeviceGetViolationStatus",
                lambda: pynvml.nvmlDeviceGetViolationStatus(h, policy),
            ),
        )
        return None if status is None else min(int(status.violationTime), _INT64_MAX)

    def _processes(self, u: str, handles: list[tuple[str, Any]]) -> list[GpuProcess] | None:
        """Compute, graphics and MPS processes, one entry per pid (the largest memory seen)."""
        memory_by_pid: dict[int, int | None] = {}
        answered = False
        for key, h in handles:
            for metric, apis in (
                (
                    "compute_processes",
                    (
                        (
                            "nvmlDeviceGetComputeRunningProcesses",
                            lambda h=h: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
                        ),
                        (
                            "nvmlDeviceGetComputeRunningProcesses_v2",
                            lambda h=h: pynvml.nvmlDeviceGetComputeRunningProcesses_v2(h),
                        ),
                    ),
                ),
                (
                    "graphics_processes",
                    (
                        (
                            "nvmlDeviceGetGraphicsRunningProcesses",
                            lambda h=h: pynvml.nvmlDeviceGetGraphicsRunningProcesses(h),
                        ),
                        (
                            "nvmlDeviceGetGraphicsRunningProcesses_v2",
                            lambda h=h: pynvml.nvmlDeviceGetGraphicsRunningProcesses_v2(h),
                        ),
                    ),
                ),
                (
                    "mps_processes",
                    (
                        (
                            "nvmlDeviceGetMPSComputeRunningProcesses",
                            lambda h=h: pynvml.nvmlDeviceGetMPSComputeRunningProcesses(h),
                        ),
                    ),
                ),
            ):
                listed: Any = self._nvml.query(key, metric, *apis, not_found=[])
                if listed is None:
                    continue
                answered = True
                for proc in listed:
                    pid = int(proc.pid)
                    used = proc.usedGpuMemory
                    previous = memory_by_pid.get(pid)
                    if used is None:
                        memory_by_pid.setdefault(pid, None)
                    else:
                        used = min(int(used), _INT64_MAX)
                        memory_by_pid[pid] = used if previous is None else max(previous, used)
        if not answered:
            return None
        processes = []
        for pid in sorted(memory_by_pid):
            owner = self._procinfo.owner(pid)
            processes.append(
                GpuProcess(
                    pid=pid,
                    user=owner.user,
                    used_mem_bytes=memory_by_pid[pid],
                    job_id=owner.job_id,
                )
            )
        return processes
