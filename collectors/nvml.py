"""NVML access for the collector: one wrapper around every pynvml call, and the per-GPU reader.

Every query goes through one `Nvml` wrapper (`call` for a pynvml function by name, `query`
for any other call), which applies one policy to NVML's errors:

- NotSupported / NoPermission: the value is null and the (GPU, metric) pair is never asked again;
- FunctionNotFound / NVMLLibraryMismatchError: the next, older API of the query is used, and
  the missing one is never called again;
- NotFound: an empty result (an empty sample buffer, an empty MIG slot);
- GpuIsLost / ResetRequired / Unknown: `GpuLostError`, so the GPU's row becomes `status='lost'`;
- Uninitialized: `NvmlUninitializedError`, so the collector calls `nvmlInit` again.

pynvml functions are looked up at call time, so tests can replace them. The plain readings
are data (`METRICS` in metrics.py), which `GpuReader.read` loops over; it reads the rest
(utilization, MIG, memory, memory temperature, processes) itself.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from gpufleet.collectors.metrics import (
    INT64_MAX,
    METRICS,
    PROCESS_LISTS,
    GpuProcess,
    GpuSample,
    Metric,
)
from gpufleet.collectors.procinfo import ProcessInfo
from gpufleet.collectors.schema import STATUS_LOST, STATUS_OK
from gpufleet.collectors.values import clamp_pct, sample_pairs, value_member
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

    def call(
        self, uuid: str, metric: str, apis: Sequence[str], *args: Any, not_found: Any = None
    ) -> Any:
        """The first of `apis` (pynvml function names, newest first) that this library has,
        called with `args`.

        Returns None when the metric is unsupported for this GPU (and caches that), or
        `not_found` when NVML answers NotFound. Other transient errors give None this time.
        """
        return self._first(uuid, metric, apis, lambda name: getattr(pynvml, name)(*args), not_found)

    def query(
        self,
        uuid: str,
        metric: str,
        *apis: tuple[str, Callable[[], T]],
        not_found: T | None = None,
    ) -> T | None:
        """Like `call`, for calls that are not one pynvml function by name: each `(name, call)`."""
        calls = dict(apis)
        return self._first(uuid, metric, calls, lambda name: calls[name](), not_found)

    def _first(
        self,
        uuid: str,
        metric: str,
        apis: Iterable[str],
        invoke: Callable[[str], Any],
        not_found: Any,
    ) -> Any:
        if (uuid, metric) in self._unsupported:
            return None
        for name in apis:
            if name in self._missing_apis:
                continue
            try:
                return invoke(name)
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


@dataclass(slots=True)
class GpuState:
    """What the collector knows about one GPU between ticks. Keyed by UUID, never by handle."""

    uuid: str
    index: int
    name: str | None
    handle: Any  # a pynvml device handle; None while the GPU is lost
    cursors_us: dict[int, int] = field(default_factory=dict)  # NVML's µs stamps, by sample type
    lost: bool = False
    # Its MIG devices' UUIDs at the last read, NVML's order (`GpuReader(mig_uuids=True)`)
    mig_uuids: tuple[str, ...] = ()


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


class GpuReader:
    """Reads one `GpuSample` per GPU per tick through an `Nvml` wrapper."""

    def __init__(
        self, *, nvml: Nvml, procinfo: ProcessInfo, host: str, mig_uuids: bool = False
    ) -> None:
        if not host:
            raise ValueError("host must be a non-empty string")
        self._nvml = nvml
        self._procinfo = procinfo
        self._host = host
        self._read_mig_uuids = mig_uuids

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
        u, h = gpu.uuid, gpu.handle
        sample = GpuSample(
            ts=ts_us,
            interval_s=interval_s,
            host=self._host,
            gpu_index=gpu.index,
            gpu_uuid=u,
            gpu_name=gpu.name,
            status=STATUS_OK,
        )
        mig_mode = self._nvml.call(u, "mig_mode", ("nvmlDeviceGetMigMode",), h)
        mig_enabled = bool(mig_mode) and mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        sample.mig_enabled = mig_enabled
        # Utilization (rates and sample buffers) is NotSupported on a MIG-enabled GPU; memory
        # and processes are read per MIG device, the rest from the parent GPU.
        if not mig_enabled:
            sample.gpu_util_pct, sample.mem_util_pct = self._utilization(gpu)
        handles = self._mig_handles(gpu) if mig_enabled else [(u, h)]
        if self._read_mig_uuids:
            gpu.mig_uuids = self._mig_uuids(handles) if mig_enabled else ()
        sample.mem_used_bytes, sample.mem_total_bytes = self._memory(handles)
        for metric in METRICS:
            setattr(sample, metric.field, self._metric(u, h, metric))
        sample.temp_mem_c = self._memory_temp(u, h)
        sample.processes = self._processes(handles)
        return sample

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

    def _mig_handles(self, gpu: GpuState) -> list[tuple[str, Any]]:
        """(cache key, handle) of every MIG device of a MIG-enabled GPU, queried each tick
        (the handles go stale when instances change)."""
        u, h = gpu.uuid, gpu.handle
        count = self._nvml.call(u, "mig_count", ("nvmlDeviceGetMaxMigDeviceCount",), h)
        handles: list[tuple[str, Any]] = []
        for slot in range(count or 0):
            mig = self._nvml.call(
                u, "mig_handle", ("nvmlDeviceGetMigDeviceHandleByIndex",), h, slot
            )
            if mig is not None:  # an empty slot answers NotFound: skip it and go on
                handles.append((f"{u}/mig{slot}", mig))
        return handles

    def _mig_uuids(self, handles: list[tuple[str, Any]]) -> tuple[str, ...]:
        """The UUIDs (`MIG-...`) of the MIG devices, in slot order; one that fails is left out."""
        uuids = (self._nvml.call(key, "mig_uuid", ("nvmlDeviceGetUUID",), h) for key, h in handles)
        return tuple(str(uuid) for uuid in uuids if uuid)

    def _memory(self, handles: list[tuple[str, Any]]) -> tuple[int | None, int | None]:
        """(used, total) bytes summed over the handles; v2's `used` leaves out the memory the
        driver reserves, v1's (drivers without v2) includes it."""
        used_total: list[int] = [0, 0]
        have_memory = False
        for key, h in handles:
            memory = self._memory_info(key, h)
            if memory is not None:
                have_memory = True
                used_total[0] += int(memory.used)
                used_total[1] += int(memory.total)
        return (used_total[0], used_total[1]) if have_memory else (None, None)

    def _memory_info(self, key: str, h: Any) -> Any:
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

    def _processes(self, handles: list[tuple[str, Any]]) -> list[GpuProcess] | None:
        """Compute, graphics and MPS processes, one entry per pid (the largest memory seen).
        NVML gives host pids, so their owners are read from the host's /proc."""
        memory_by_pid: dict[int, int | None] = {}
        answered = False
        for key, h in handles:
            for metric, apis in PROCESS_LISTS:
                listed = self._nvml.call(key, metric, apis, h, not_found=[])
                if listed is None:
                    continue
                answered = True
                for proc in listed:
                    pid = int(proc.pid)
                    used = proc.usedGpuMemory  # None: NVML_VALUE_NOT_AVAILABLE
                    previous = memory_by_pid.get(pid)
                    if used is None:
                        memory_by_pid.setdefault(pid, None)
                    else:
                        used = min(int(used), INT64_MAX)
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
