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
(utilization, MIG, memory, memory temperature, processes, remapped rows) itself, GPM activity
through gpm.py and XID events through events.py.

A MIG-enabled GPU gives one row for the GPU (power, energy, temperatures, clocks, health, and
its memory and processes summed over its MIG devices, as before MIG rows existed) and one row
per MIG device (its UUID, `parent_gpu_uuid`, `mig_profile`, `mig_slice_fraction`, its own
memory, processes and GPM activity).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from gpufleet.collectors import events
from gpufleet.collectors.events import XidWatch
from gpufleet.collectors.gpm import GPM_FIELDS, Gpm, GpmSeries, free_series
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

# The profile at the end of a MIG device's name: `NVIDIA H100 80GB HBM3 MIG 1g.10gb`.
_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")
# GPU instance profiles (NVML_GPU_INSTANCE_PROFILE_*), asked once per GPU for its largest
# slice count: the denominator of a MIG device's `mig_slice_fraction`.
_GPU_INSTANCE_PROFILES = range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


_NEXT_API = object()  # `Nvml._failed`: this API is missing, try the next


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
        # The collector's hot path (some 30 calls per GPU per tick): no closure, no extra frame.
        if (uuid, metric) in self._unsupported:
            return None
        for name in apis:
            if name in self._missing_apis:
                continue
            try:
                return getattr(pynvml, name)(*args)
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
                answer = self._failed(exc, uuid, metric, name, not_found)
                if answer is not _NEXT_API:
                    return answer
        self._unsupported.add((uuid, metric))
        return None

    def query(
        self,
        uuid: str,
        metric: str,
        *apis: tuple[str, Callable[[], T]],
        not_found: T | None = None,
    ) -> T | None:
        """Like `call`, for calls that are not one pynvml function by name: each `(name, call)`."""
        if (uuid, metric) in self._unsupported:
            return None
        for name, invoke in apis:
            if name in self._missing_apis:
                continue
            try:
                return invoke()
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
                answer = self._failed(exc, uuid, metric, name, not_found)
                if answer is not _NEXT_API:
                    return answer
        self._unsupported.add((uuid, metric))
        return None

    def _failed(self, exc: Exception, uuid: str, metric: str, name: str, not_found: Any) -> Any:
        """The answer for a call of `name` that raised `exc`, by the policy above:
        `_NEXT_API` to try the next, older API. Raises GpuLostError / NvmlUninitializedError."""
        if isinstance(exc, _MISSING_API):
            self._missing_apis.add(name)
            return _NEXT_API
        if isinstance(exc, _UNSUPPORTED):
            self._unsupported.add((uuid, metric))
            return None
        if isinstance(exc, pynvml.NVMLError_NotFound):
            return not_found
        if isinstance(exc, _LOST):
            raise GpuLostError(uuid) from exc
        if isinstance(exc, pynvml.NVMLError_Uninitialized):
            raise NvmlUninitializedError(uuid) from exc
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
    # Its MIG devices' UUIDs at the last read, in NVML's order
    mig_uuids: tuple[str, ...] = ()
    # GPM: whether the GPU has it (None: not known yet), and its series by GPU or MIG UUID
    gpm_supported: bool | None = None
    gpm: dict[str, GpmSeries] = field(default_factory=dict)
    xids: XidWatch = field(default_factory=XidWatch)
    # Per MIG device UUID: (GPU instance id, profile, slices), which stay while it exists
    mig_devices: dict[str, MigDevice] = field(default_factory=dict)
    max_slices: int | None = None  # the GPU's largest GPU instance profile; 0: unknown


@dataclass(frozen=True, slots=True)
class MigDevice:
    """What stays true of a MIG device while it exists."""

    gpu_instance_id: int | None
    profile: str | None  # e.g. `1g.10gb`
    slices: int | None  # its GPU instance's slice count


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
        handles = self._mig_handles(gpu) if mig_enabled else [(u, h)]
        memory = [self._memory_info(key, handle) for key, handle in handles]
        processes = [self._process_memory(key, handle) for key, handle in handles]
        sample.mem_used_bytes, sample.mem_total_bytes = _summed_memory(memory)
        for metric in METRICS:
            setattr(sample, metric.field, self._metric(u, h, metric))
        sample.temp_mem_c = self._memory_temp(u, h)
        sample.remapped_rows_pending, sample.remapped_rows_failure = self._remapped_rows(u, h)
        sample.processes = self._owned(_merged(processes))
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
            device = gpu.mig_devices.get(row.gpu_uuid) or self._mig_device(row.gpu_uuid, mig)
            gpu.mig_devices[row.gpu_uuid] = device
            row.mig_enabled = True
            row.parent_gpu_uuid = gpu.uuid
            row.mig_profile = device.profile
            row.mig_slice_fraction = self._slice_fraction(gpu, device)
            row.mem_used_bytes, row.mem_total_bytes = _summed_memory([mig_memory])
            row.processes = self._owned(_merged([mig_processes]))
            gi = device.gpu_instance_id
            if gpu.gpm_supported and gi is not None:
                activity = self._gpm.sample(gpu.gpm, row.gpu_uuid, "nvmlGpmMigSampleGet", h, gi)
                _set_activity(row, activity)
            rows.append(row)
        gpu.mig_uuids = tuple(row.gpu_uuid for row in rows)
        self._forget_mig_devices(gpu, set(gpu.mig_uuids))
        return rows

    def _mig_device(self, uuid: str, mig: Any) -> MigDevice:
        gi = self._nvml.call(uuid, "mig_gpu_instance", ("nvmlDeviceGetGpuInstanceId",), mig)
        name = self._nvml.call(uuid, "mig_name", ("nvmlDeviceGetName",), mig)
        match = _MIG_PROFILE.search(str(name)) if name else None
        attributes = self._nvml.call(uuid, "mig_attributes", ("nvmlDeviceGetAttributes",), mig)
        slices = int(attributes.gpuInstanceSliceCount) if attributes is not None else None
        return MigDevice(
            gpu_instance_id=None if gi is None else int(gi),
            profile=match.group(1) if match else None,
            slices=slices or None,
        )

    def _slice_fraction(self, gpu: GpuState, device: MigDevice) -> float | None:
        """The MIG device's slices over the most a GPU instance of its GPU can have (1/7 for
        a 1g profile of an H100)."""
        if gpu.max_slices is None:
            gpu.max_slices = self._max_slices(gpu)
        if not device.slices or not gpu.max_slices:
            return None
        return min(device.slices / gpu.max_slices, 1.0)

    def _max_slices(self, gpu: GpuState) -> int:
        """The largest slice count of the GPU's GPU instance profiles (7 on A100 and H100);
        0 when NVML names none."""
        largest = 0
        for profile in _GPU_INSTANCE_PROFILES:
            info = self._nvml.query(
                gpu.uuid,
                f"gpu_instance_profile.{profile}",
                ("nvmlDeviceGetGpuInstanceProfileInfoV", _profile_info(gpu.handle, profile, 2)),
                ("nvmlDeviceGetGpuInstanceProfileInfo", _profile_info(gpu.handle, profile, 1)),
            )
            if info is not None:
                largest = max(largest, int(info.sliceCount))
        return largest

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

    def _process_memory(self, key: str, h: Any) -> dict[int, int | None] | None:
        """Compute, graphics and MPS processes of one handle: used memory by pid (the
        largest seen; None: not available); None when no list is supported."""
        memory_by_pid: dict[int, int | None] = {}
        answered = False
        for metric, apis in PROCESS_LISTS:
            listed = self._nvml.call(key, metric, apis, h, not_found=[])
            if listed is None:
                continue
            answered = True
            for proc in listed:
                _add_process(memory_by_pid, int(proc.pid), proc.usedGpuMemory)
        return memory_by_pid if answered else None

    def _owned(self, memory_by_pid: dict[int, int | None] | None) -> list[GpuProcess] | None:
        """The processes with their owners. NVML gives host pids, so their owners are read
        from the host's /proc."""
        if memory_by_pid is None:
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


def _add_process(memory_by_pid: dict[int, int | None], pid: int, used: int | None) -> None:
    """Count a listed process once per pid, with the largest memory seen (None, NVML's
    NVML_VALUE_NOT_AVAILABLE, only while no list gave a number)."""
    previous = memory_by_pid.get(pid)
    if used is None:
        memory_by_pid.setdefault(pid, None)
    else:
        used = min(int(used), INT64_MAX)
        memory_by_pid[pid] = used if previous is None else max(previous, used)


def _merged(
    answers: Sequence[dict[int, int | None] | None],
) -> dict[int, int | None] | None:
    """The processes of several handles (a GPU's MIG devices) as one; None if none answered."""
    if len(answers) == 1:
        return answers[0]
    merged: dict[int, int | None] = {}
    answered = False
    for answer in answers:
        if answer is None:
            continue
        answered = True
        for pid, used in answer.items():
            _add_process(merged, pid, used)
    return merged if answered else None


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


def _profile_info(handle: Any, profile: int, version: int) -> Callable[[], Any]:
    """nvmlDeviceGetGpuInstanceProfileInfo of a profile, the structure of `version` (2: the
    ...InfoV function, new in 11.x drivers; 1: the older one)."""

    def info() -> Any:
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile, version=version)

    return info
