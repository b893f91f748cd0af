"""A fake NVML: replaces pynvml's functions, returns pynvml's own ctypes structures and raises
pynvml's REAL exception classes (the functions are monkeypatched; the C library is not faked).

A scenario is a plain dict (or JSON file) describing the GPUs:

    {"gpus": [{"uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "util_pct": 40, ...}],
     "missing_functions": ["nvmlDeviceGetTemperatureV"],   # C symbols the "driver" lacks
     "library_missing": false}                             # nvmlInit -> LibraryNotFound

A GPU key that is absent (or set to "!NotSupported") makes its call raise NotSupported; any
"!<Name>" value raises `pynvml.NVMLError_<Name>`. `gpu_scenario()` builds a realistic H100.
A GPU's `errors` maps a pynvml function to the error it always raises; `fail_once()` makes
its next call fail.

Contract v1.2 keys of a GPU (each absent or "!<Name>" as above):

- `gpm`: GPM metrics by pynvml name without `NVML_GPM_METRIC_` (`{"SM_UTIL": 55.0}`; PCIe
  and NVLink in MiB/s, as NVML gives them); a metric left out answers NotSupported in its
  own entry; `gpm` absent or None: the GPU has no GPM (`isSupportedDevice` 0, pre-Hopper).
- `xid_events`: the XIDs waiting in the GPU's events (`push_xid` adds more); absent:
  registering for events answers NotSupported.
- `ecc_uncorrected_volatile`, `ecc_corrected_volatile`, `pcie_replay_count`,
  `retired_pages_pending` (0/1), `remapped_rows` ([corrected, uncorrected, pending, failure]).
- `mig_devices`: per slot (None: empty) `uuid`, `name` (ending in the profile), `memory`,
  `compute_processes`, `gpu_instance_id`, `slices`, `gpm`; the GPU's `mig_max_slices` (7).

In pytest: `fake = FakeNvml(scenario); fake.install(monkeypatch.setattr)`.
In a subprocess: `python -m tests.fake_nvml_run scenario.json -- collect ...` (see there).
"""

from __future__ import annotations

import copy
import ctypes
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

SAMPLE_PERIOD_US = 166_667  # 1/6 s, the fastest documented utilization sample period
SAMPLE_BUFFER_LEN = 100


# GPM metrics of a busy H100 (PCIe and NVLink in MiB/s, as NVML reports them).
GPM_H100 = {
    "SM_UTIL": 62.5,
    "SM_OCCUPANCY": 31.25,
    "ANY_TENSOR_UTIL": 20.0,
    "DRAM_BW_UTIL": 45.5,
    "PCIE_RX_PER_SEC": 100.0,
    "PCIE_TX_PER_SEC": 50.0,
    "NVLINK_TOTAL_RX_PER_SEC": 2048.0,
    "NVLINK_TOTAL_TX_PER_SEC": 1024.0,
}
_GPM_IDS = {
    getattr(pynvml, name): name.removeprefix("NVML_GPM_METRIC_")
    for name in dir(pynvml)
    if name.startswith("NVML_GPM_METRIC_") and name != "NVML_GPM_METRIC_MAX"
}
# sliceCount of the GPU instance profiles (NVML_GPU_INSTANCE_PROFILE_<n>_SLICE)
_PROFILE_SLICES = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: 1,
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: 2,
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: 3,
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: 4,
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: 7,
    pynvml.NVML_GPU_INSTANCE_PROFILE_8_SLICE: 8,
}


def gpu_scenario(index: int = 0, **overrides: Any) -> dict[str, Any]:
    """A healthy H100 with one compute process; override any key."""
    gpu: dict[str, Any] = {
        "uuid": f"GPU-{index:08d}-fake-0000-0000-000000000000",
        "name": "NVIDIA H100 80GB HBM3",
        "util_pct": 40,
        "mem_util_pct": 20,
        "memory": {"total": 85_520_809_984, "used": 12_884_901_888, "reserved": 536_870_912},
        "power_mw": 350_000,
        "power_limit_mw": 700_000,
        "energy_mj": 1_000_000,
        "temp_c": 45,
        "temp_mem_c": 52,
        "sm_clock_mhz": 1980,
        "sm_clock_max_mhz": 1980,
        "mem_clock_mhz": 2619,
        "clock_event_mask": 0,
        "violation_ns": {"0": 1_000_000, "1": 0},
        "mig_mode": [0, 0],
        "compute_processes": [{"pid": 4242, "used_mem_bytes": 12_000_000_000}],
        "graphics_processes": [],
        "gpm": dict(GPM_H100),
        "xid_events": [],
        "ecc_uncorrected_volatile": 0,
        "ecc_corrected_volatile": 3,
        "remapped_rows": [0, 0, 0, 0],
        "pcie_replay_count": 7,
    }
    gpu.update(overrides)
    return gpu


def fleet_scenario(gpus: int = 8, **overrides: Any) -> dict[str, Any]:
    return {"gpus": [gpu_scenario(i) for i in range(gpus)], **overrides}


def nvml_error(name: str) -> BaseException:
    """`"NotSupported"` -> `pynvml.NVMLError_NotSupported()`; also `"LibraryMismatch"`."""
    if name == "LibraryMismatch":
        return pynvml.NVMLLibraryMismatchError("fake: unversioned function")
    error_class = getattr(pynvml, f"NVMLError_{name}")
    error: BaseException = error_class()
    return error


class FakeHandle:
    """Like a ctypes device pointer: two handles never compare equal, and it is unhashable."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, gpu: int, mig_slot: int | None = None) -> None:
        self.gpu = gpu
        self.mig_slot = mig_slot

    def __eq__(self, other: object) -> bool:
        return self is other


class FakeEventSet:
    """An NVML event set: the GPUs registered with it."""

    def __init__(self) -> None:
        self.gpus: list[int] = []
        self.freed = False


class GpmSampleRecord:
    """What the fake knows of one allocated GPM sample (keyed by its address)."""

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer  # keeps the memory the sample pointer points at alive
        self.source: tuple[int, int | None] | None = None  # (GPU, GPU instance id or None)
        self.order = 0  # when it was taken
        self.freed = False


def _address(pointer: Any) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


class FakeNvml:
    def __init__(self, scenario: dict[str, Any], *, clock_us: Callable[[], int] | None = None):
        self.scenario = copy.deepcopy(scenario)
        self.gpus: list[dict[str, Any]] = self.scenario["gpus"]
        self.missing: set[str] = set(self.scenario.get("missing_functions", []))
        self.library_missing: bool = bool(self.scenario.get("library_missing", False))
        self.initialized = False
        self.calls: Counter[tuple[str, str | None]] = Counter()
        self.clock_us: Callable[[], int] = clock_us or (lambda: time.monotonic_ns() // 1000)
        self._energy_origin_us: dict[int, int] = {}
        self._samples: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self._fail_once: dict[tuple[int, str], str] = {}
        self.gpm_samples: dict[int, GpmSampleRecord] = {}  # by address
        self._gpm_order = itertools.count(1)
        self.event_sets: list[FakeEventSet] = []

    @classmethod
    def from_json(cls, path: str | Path) -> FakeNvml:
        return cls(json.loads(Path(path).read_text()))

    # -- test controls -------------------------------------------------------------------

    def reload_driver(self) -> None:
        """Unload the "driver": calls raise Uninitialized until nvmlInit; energy restarts at 0."""
        self.initialized = False
        for gpu in self.gpus:
            gpu["energy_mj"] = 0
        self._energy_origin_us.clear()

    def push_samples(self, index: int, kind: int, samples: list[tuple[int, int]]) -> None:
        """Append (timestamp_us, value) entries to a GPU's sample buffer (disables auto)."""
        self.gpus[index]["util_pct" if kind == 1 else "mem_util_pct"] = None
        self._samples.setdefault((index, kind), []).extend(samples)

    def fail_once(self, index: int, function: str, error: str) -> None:
        """The next call of `function` for GPU `index` raises NVMLError_<error>."""
        self._fail_once[(index, function)] = error

    def push_xid(self, index: int, *xids: int) -> None:
        """XID critical-error events happen on GPU `index`."""
        self.gpus[index]["xid_events"].extend(xids)

    def open_gpm_samples(self) -> int:
        """GPM samples allocated and not freed."""
        return sum(not record.freed for record in self.gpm_samples.values())

    def open_event_sets(self) -> int:
        return sum(not event_set.freed for event_set in self.event_sets)

    def count(self, function: str, index: int | None = None) -> int:
        """How often `function` was called (for GPU `index`, when given)."""
        if index is None:
            return sum(n for (name, _), n in self.calls.items() if name == function)
        return self.calls[(function, self.gpus[index]["uuid"])]

    # -- plumbing ------------------------------------------------------------------------

    def install(self, setter: Callable[[Any, str, Any], Any]) -> None:
        """`setter(pynvml, name, fn)` for each faked function: monkeypatch.setattr or setattr."""
        for name, fn in self.functions().items():
            setter(pynvml, name, fn)

    def _gpu(self, handle: FakeHandle, function: str) -> dict[str, Any]:
        if not self.initialized:
            raise pynvml.NVMLError_Uninitialized()
        gpu = self.gpus[handle.gpu]
        self.calls[(function, gpu["uuid"])] += 1
        if gpu.get("lost"):
            raise pynvml.NVMLError_GpuIsLost()
        error = gpu.get("errors", {}).get(function) or self._fail_once.pop(
            (handle.gpu, function), None
        )
        if error:
            raise nvml_error(error)
        return gpu

    def _mig(self, handle: FakeHandle, gpu: dict[str, Any]) -> dict[str, Any]:
        """The MIG device of a MIG handle."""
        device: dict[str, Any] = gpu["mig_devices"][handle.mig_slot]
        return device

    def _gpm_metrics(self, source: dict[str, Any], request: Any) -> None:
        """Fill a c_nvmlGpmMetricsGet_t from a GPU's or MIG device's `gpm` values."""
        values = self._value(source, "gpm")
        for i in range(request.numMetrics):
            entry = request.metrics[i]
            value = values.get(_GPM_IDS.get(entry.metricId, ""))
            if value is None:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif isinstance(value, str):
                entry.nvmlReturn = nvml_error(value.removeprefix("!")).value  # type: ignore[attr-defined]
            else:
                entry.nvmlReturn = pynvml.NVML_SUCCESS
                entry.value = float(value)

    def _value(self, gpu: dict[str, Any], key: str) -> Any:
        value = gpu.get(key)
        if value is None:
            raise pynvml.NVMLError_NotSupported()
        if isinstance(value, str) and value.startswith("!"):
            raise nvml_error(value[1:])
        return value

    def _check_symbol(self, symbol: str) -> None:
        if symbol in self.missing:
            raise pynvml.NVMLError_FunctionNotFound()

    def _energy(self, handle: FakeHandle, gpu: dict[str, Any]) -> int:
        """The counter grows with power: mW x s = mJ."""
        base = int(self._value(gpu, "energy_mj"))
        now = self.clock_us()
        origin = self._energy_origin_us.setdefault(handle.gpu, now)
        power_mw = gpu.get("power_mw")
        power_mw = power_mw if isinstance(power_mw, int) else 0
        return base + power_mw * (now - origin) // 1_000_000

    def _buffer(self, index: int, kind: int) -> list[tuple[int, int]]:
        gpu = self.gpus[index]
        level = gpu.get("util_pct" if kind == 1 else "mem_util_pct")
        if level is None:
            return self._samples.get((index, kind), [])
        now = self.clock_us()
        last = now - now % SAMPLE_PERIOD_US
        return [
            (last - i * SAMPLE_PERIOD_US, int(level))
            for i in range(SAMPLE_BUFFER_LEN - 1, -1, -1)
            if last - i * SAMPLE_PERIOD_US > 0
        ]

    def _processes(self, gpu: dict[str, Any], key: str) -> list[Any]:
        listed = self._value(gpu, key) if key in gpu else []
        result = []
        for p in listed:
            used = p.get("used_mem_bytes")
            result.append(
                pynvml.nvmlFriendlyObject(
                    {
                        "pid": p["pid"],
                        "usedGpuMemory": used,
                        "gpuInstanceId": 0xFFFFFFFF,
                        "computeInstanceId": 0xFFFFFFFF,
                    }
                )
            )
        return result

    def functions(self) -> dict[str, Callable[..., Any]]:
        fake = self

        def nvmlInit() -> None:
            fake.calls[("nvmlInit", None)] += 1
            if fake.library_missing:
                raise pynvml.NVMLError_LibraryNotFound()
            fake.initialized = True

        def nvmlShutdown() -> None:
            fake.calls[("nvmlShutdown", None)] += 1
            fake.initialized = False

        def nvmlDeviceGetCount() -> int:
            if not fake.initialized:
                raise pynvml.NVMLError_Uninitialized()
            return len(fake.gpus)

        def nvmlDeviceGetHandleByIndex(index: int) -> FakeHandle:
            if not fake.initialized:
                raise pynvml.NVMLError_Uninitialized()
            if index >= len(fake.gpus):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if fake.gpus[index].get("lost"):
                raise pynvml.NVMLError_GpuIsLost()
            return FakeHandle(index)

        def simple(key: str, function: str) -> Callable[..., Any]:
            def getter(handle: FakeHandle, *args: Any) -> Any:
                return fake._value(fake._gpu(handle, function), key)

            getter.__name__ = function
            return getter

        def nvmlDeviceGetSamples(handle: FakeHandle, kind: int, last_ts: int) -> Any:
            fake._gpu(handle, "nvmlDeviceGetSamples")
            newer = [(ts, v) for ts, v in fake._buffer(handle.gpu, kind) if ts > last_ts]
            if not newer:
                raise pynvml.NVMLError_NotFound()
            array = (pynvml.c_nvmlSample_t * len(newer))()
            for sample, (ts, value) in zip(array, newer, strict=True):
                sample.timeStamp = ts
                sample.sampleValue.uiVal = value
            # Like pynvml: a list of views into one ctypes array.
            return (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, array[0 : len(newer)])

        def nvmlDeviceGetUtilizationRates(handle: FakeHandle) -> Any:
            gpu = fake._gpu(handle, "nvmlDeviceGetUtilizationRates")
            rates = pynvml.c_nvmlUtilization_t()
            rates.gpu = int(
                fake._value(gpu, "util_now_pct" if "util_now_pct" in gpu else "util_pct")
            )
            rates.memory = int(gpu.get("mem_util_pct") or 0)
            return rates

        def nvmlDeviceGetMemoryInfo(handle: FakeHandle, version: int | None = None) -> Any:
            gpu = fake._gpu(handle, "nvmlDeviceGetMemoryInfo")
            memory = fake._value(gpu, "memory")
            if handle.mig_slot is not None:
                memory = gpu["mig_devices"][handle.mig_slot]["memory"]
            if version:
                fake._check_symbol("nvmlDeviceGetMemoryInfo_v2")
                info: Any = pynvml.c_nvmlMemory_v2_t()
                info.version = version
                info.reserved = memory.get("reserved", 0)
                info.used = memory["used"]
            else:
                info = pynvml.c_nvmlMemory_t()
                info.used = memory["used"] + memory.get("reserved", 0)
            info.total = memory["total"]
            info.free = info.total - info.used
            return info

        def nvmlDeviceGetTotalEnergyConsumption(handle: FakeHandle) -> int:
            gpu = fake._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption")
            return fake._energy(handle, gpu)

        def nvmlDeviceGetTemperatureV(handle: FakeHandle, sensor: int, version: int = 0) -> int:
            gpu = fake._gpu(handle, "nvmlDeviceGetTemperatureV")
            fake._check_symbol("nvmlDeviceGetTemperatureV")
            return int(fake._value(gpu, "temp_c"))

        def nvmlDeviceGetTemperature(handle: FakeHandle, sensor: int) -> int:
            return int(fake._value(fake._gpu(handle, "nvmlDeviceGetTemperature"), "temp_c"))

        def nvmlDeviceGetFieldValues(handle: FakeHandle, field_ids: list[Any]) -> Any:
            gpu = fake._gpu(handle, "nvmlDeviceGetFieldValues")
            values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
            for entry, field_id in zip(values, field_ids, strict=True):
                entry.fieldId = field_id
                value = (
                    gpu.get("temp_mem_c") if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP else None
                )
                if value is None:
                    entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                else:
                    entry.nvmlReturn = pynvml.NVML_SUCCESS
                    entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                    entry.value.uiVal = int(value)
            return values

        def nvmlDeviceGetClockInfo(handle: FakeHandle, clock: int) -> int:
            key = "sm_clock_mhz" if clock == pynvml.NVML_CLOCK_SM else "mem_clock_mhz"
            return int(fake._value(fake._gpu(handle, "nvmlDeviceGetClockInfo"), key))

        def nvmlDeviceGetMaxClockInfo(handle: FakeHandle, clock: int) -> int:
            return int(
                fake._value(fake._gpu(handle, "nvmlDeviceGetMaxClockInfo"), "sm_clock_max_mhz")
            )

        def nvmlDeviceGetCurrentClocksEventReasons(handle: FakeHandle) -> int:
            gpu = fake._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons")
            fake._check_symbol("nvmlDeviceGetCurrentClocksEventReasons")
            return int(fake._value(gpu, "clock_event_mask"))

        def nvmlDeviceGetCurrentClocksThrottleReasons(handle: FakeHandle) -> int:
            gpu = fake._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
            return int(fake._value(gpu, "clock_event_mask"))

        def nvmlDeviceGetViolationStatus(handle: FakeHandle, policy: int) -> Any:
            gpu = fake._gpu(handle, "nvmlDeviceGetViolationStatus")
            by_policy = fake._value(gpu, "violation_ns")
            if str(policy) not in by_policy:
                raise pynvml.NVMLError_NotSupported()
            status = pynvml.c_nvmlViolationTime_t()
            status.referenceTime = fake.clock_us()
            status.violationTime = int(by_policy[str(policy)])
            return status

        def processes(key: str, symbol: str, versioned: bool) -> Callable[[FakeHandle], Any]:
            name = f"nvmlDevice{symbol}" + ("_v2" if versioned else "")

            def get(handle: FakeHandle) -> Any:
                if not versioned and f"nvmlDevice{symbol}_v3" in fake.missing:
                    raise pynvml.NVMLLibraryMismatchError("fake: no _v3 symbol")
                gpu = fake._gpu(handle, name)
                if handle.mig_slot is not None:
                    gpu = gpu["mig_devices"][handle.mig_slot]
                return fake._processes(gpu, key)

            get.__name__ = name
            return get

        def nvmlDeviceGetMPSComputeRunningProcesses(handle: FakeHandle) -> Any:
            gpu = fake._gpu(handle, "nvmlDeviceGetMPSComputeRunningProcesses")
            return fake._processes(gpu, "mps_processes") if "mps_processes" in gpu else []

        def nvmlDeviceGetMaxMigDeviceCount(handle: FakeHandle) -> int:
            gpu = fake._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount")
            return len(fake._value(gpu, "mig_devices"))

        def nvmlDeviceGetMigDeviceHandleByIndex(handle: FakeHandle, slot: int) -> FakeHandle:
            gpu = fake._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
            if gpu["mig_devices"][slot] is None:
                raise pynvml.NVMLError_NotFound()
            return FakeHandle(handle.gpu, slot)

        # -- identity of MIG devices -----------------------------------------------------

        def nvmlDeviceGetUUID(handle: FakeHandle) -> str:
            gpu = fake._gpu(handle, "nvmlDeviceGetUUID")
            if handle.mig_slot is None:
                return str(fake._value(gpu, "uuid"))
            default = f"MIG-{handle.mig_slot}-of-{gpu['uuid']}"
            return str(fake._mig(handle, gpu).get("uuid", default))

        def nvmlDeviceGetName(handle: FakeHandle) -> str:
            gpu = fake._gpu(handle, "nvmlDeviceGetName")
            if handle.mig_slot is None:
                return str(fake._value(gpu, "name"))
            default = f"{gpu['name']} MIG 1g.10gb"
            return str(fake._mig(handle, gpu).get("name", default))

        def nvmlDeviceGetGpuInstanceId(handle: FakeHandle) -> int:
            gpu = fake._gpu(handle, "nvmlDeviceGetGpuInstanceId")
            if handle.mig_slot is None:
                raise pynvml.NVMLError_InvalidArgument()
            return int(fake._mig(handle, gpu).get("gpu_instance_id", handle.mig_slot + 1))

        def nvmlDeviceGetAttributes(handle: FakeHandle) -> Any:
            gpu = fake._gpu(handle, "nvmlDeviceGetAttributes")
            attributes = pynvml.c_nvmlDeviceAttributes()
            if handle.mig_slot is not None:
                attributes.gpuInstanceSliceCount = int(fake._mig(handle, gpu).get("slices", 1))
            return attributes

        def nvmlDeviceGetGpuInstanceProfileInfo(
            handle: FakeHandle, profile: int, version: int = 2
        ) -> Any:
            gpu = fake._gpu(handle, "nvmlDeviceGetGpuInstanceProfileInfo")
            if version == 2:
                fake._check_symbol("nvmlDeviceGetGpuInstanceProfileInfoV")
            slices = _PROFILE_SLICES.get(profile)
            if "mig_devices" not in gpu or slices is None:
                raise pynvml.NVMLError_NotSupported()
            if slices > int(gpu.get("mig_max_slices", 7)):
                raise pynvml.NVMLError_InvalidArgument()
            info: Any = (
                pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
                if version == 2
                else pynvml.c_nvmlGpuInstanceProfileInfo_t()
            )
            info.id = profile
            info.sliceCount = slices
            return info

        # -- GPM ---------------------------------------------------------------------------

        def nvmlGpmQueryDeviceSupport(handle: FakeHandle) -> Any:
            gpu = fake._gpu(handle, "nvmlGpmQueryDeviceSupport")
            fake._check_symbol("nvmlGpmQueryDeviceSupport")
            support = pynvml.c_nvmlGpmSupport_t()
            support.version = pynvml.NVML_GPM_SUPPORT_VERSION
            gpm = gpu.get("gpm")
            if isinstance(gpm, str):
                fake._value(gpu, "gpm")  # raises
            support.isSupportedDevice = int(gpm is not None)
            return support

        def nvmlGpmSampleAlloc() -> Any:
            if not fake.initialized:
                raise pynvml.NVMLError_Uninitialized()
            fake.calls[("nvmlGpmSampleAlloc", None)] += 1
            buffer = ctypes.create_string_buffer(16)
            sample = ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)
            fake.gpm_samples[_address(sample)] = GpmSampleRecord(buffer)
            return sample

        def nvmlGpmSampleFree(sample: Any) -> None:
            fake.calls[("nvmlGpmSampleFree", None)] += 1
            record = fake.gpm_samples.get(_address(sample))
            if record is None or record.freed:
                raise pynvml.NVMLError_InvalidArgument()
            record.freed = True

        def take(sample: Any, gpu: int, instance: int | None) -> Any:
            record = fake.gpm_samples.get(_address(sample))
            if record is None or record.freed:
                raise pynvml.NVMLError_InvalidArgument()
            record.source = (gpu, instance)
            record.order = next(fake._gpm_order)
            return sample

        def nvmlGpmSampleGet(handle: FakeHandle, sample: Any) -> Any:
            gpu = fake._gpu(handle, "nvmlGpmSampleGet")
            fake._value(gpu, "gpm")
            return take(sample, handle.gpu, None)

        def nvmlGpmMigSampleGet(handle: FakeHandle, instance: int, sample: Any) -> Any:
            gpu = fake._gpu(handle, "nvmlGpmMigSampleGet")
            fake._value(gpu, "gpm")
            ids = [
                mig.get("gpu_instance_id", slot + 1)
                for slot, mig in enumerate(gpu.get("mig_devices") or [])
                if mig is not None
            ]
            if instance not in ids:
                raise pynvml.NVMLError_NotFound()
            return take(sample, handle.gpu, instance)

        def nvmlGpmMetricsGet(request: Any) -> Any:
            older = fake.gpm_samples.get(_address(request.sample1))
            newer = fake.gpm_samples.get(_address(request.sample2))
            if older is None or newer is None or older.source is None or newer.source is None:
                raise pynvml.NVMLError_InvalidArgument()
            if older.source != newer.source or older.order >= newer.order:
                raise pynvml.NVMLError_InvalidArgument()  # two devices, or out of order
            index, instance = newer.source
            gpu = fake._gpu(FakeHandle(index), "nvmlGpmMetricsGet")
            if instance is None:
                fake._gpm_metrics(gpu, request)
            else:
                [mig] = [
                    m
                    for slot, m in enumerate(gpu["mig_devices"])
                    if m is not None and m.get("gpu_instance_id", slot + 1) == instance
                ]
                fake._gpm_metrics(mig, request)
            return request

        # -- events ------------------------------------------------------------------------

        def nvmlEventSetCreate() -> FakeEventSet:
            if not fake.initialized:
                raise pynvml.NVMLError_Uninitialized()
            fake.calls[("nvmlEventSetCreate", None)] += 1
            event_set = FakeEventSet()
            fake.event_sets.append(event_set)
            return event_set

        def nvmlDeviceRegisterEvents(handle: FakeHandle, types: int, event_set: Any) -> None:
            gpu = fake._gpu(handle, "nvmlDeviceRegisterEvents")
            fake._value(gpu, "xid_events")
            if types & ~pynvml.nvmlEventTypeXidCriticalError:
                raise pynvml.NVMLError_NotSupported()  # the fake has XIDs only
            event_set.gpus.append(handle.gpu)

        def nvmlEventSetWait_v2(event_set: Any, timeout_ms: int) -> Any:
            if event_set.freed:
                raise pynvml.NVMLError_InvalidArgument()
            for index in event_set.gpus:
                queue = fake._gpu(FakeHandle(index), "nvmlEventSetWait_v2")["xid_events"]
                if queue:
                    data = pynvml.c_nvmlEventData_t()
                    data.eventType = pynvml.nvmlEventTypeXidCriticalError
                    data.eventData = int(queue.pop(0))
                    return data
            raise pynvml.NVMLError_Timeout()

        def nvmlEventSetFree(event_set: Any) -> None:
            fake.calls[("nvmlEventSetFree", None)] += 1
            if event_set.freed:
                raise pynvml.NVMLError_InvalidArgument()
            event_set.freed = True

        # -- health ------------------------------------------------------------------------

        def nvmlDeviceGetTotalEccErrors(handle: FakeHandle, error_type: int, counter: int) -> int:
            gpu = fake._gpu(handle, "nvmlDeviceGetTotalEccErrors")
            if counter != pynvml.NVML_VOLATILE_ECC:
                raise pynvml.NVMLError_NotSupported()  # the fake has volatile counts only
            uncorrected = error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            key = "ecc_uncorrected_volatile" if uncorrected else "ecc_corrected_volatile"
            return int(fake._value(gpu, key))

        def nvmlDeviceGetRemappedRows(handle: FakeHandle) -> tuple[int, int, int, int]:
            gpu = fake._gpu(handle, "nvmlDeviceGetRemappedRows")
            corrected, uncorrected, pending, failure = fake._value(gpu, "remapped_rows")
            return (int(corrected), int(uncorrected), int(pending), int(failure))

        return {
            "nvmlInit": nvmlInit,
            "nvmlShutdown": nvmlShutdown,
            "nvmlDeviceGetCount": nvmlDeviceGetCount,
            "nvmlDeviceGetHandleByIndex": nvmlDeviceGetHandleByIndex,
            "nvmlDeviceGetUUID": nvmlDeviceGetUUID,
            "nvmlDeviceGetName": nvmlDeviceGetName,
            "nvmlDeviceGetMigMode": simple("mig_mode", "nvmlDeviceGetMigMode"),
            "nvmlDeviceGetSamples": nvmlDeviceGetSamples,
            "nvmlDeviceGetUtilizationRates": nvmlDeviceGetUtilizationRates,
            "nvmlDeviceGetMemoryInfo": nvmlDeviceGetMemoryInfo,
            "nvmlDeviceGetPowerUsage": simple("power_mw", "nvmlDeviceGetPowerUsage"),
            "nvmlDeviceGetEnforcedPowerLimit": simple(
                "power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit"
            ),
            "nvmlDeviceGetTotalEnergyConsumption": nvmlDeviceGetTotalEnergyConsumption,
            "nvmlDeviceGetTemperatureV": nvmlDeviceGetTemperatureV,
            "nvmlDeviceGetTemperature": nvmlDeviceGetTemperature,
            "nvmlDeviceGetFieldValues": nvmlDeviceGetFieldValues,
            "nvmlDeviceGetClockInfo": nvmlDeviceGetClockInfo,
            "nvmlDeviceGetMaxClockInfo": nvmlDeviceGetMaxClockInfo,
            "nvmlDeviceGetCurrentClocksEventReasons": nvmlDeviceGetCurrentClocksEventReasons,
            "nvmlDeviceGetCurrentClocksThrottleReasons": nvmlDeviceGetCurrentClocksThrottleReasons,
            "nvmlDeviceGetViolationStatus": nvmlDeviceGetViolationStatus,
            "nvmlDeviceGetComputeRunningProcesses": processes(
                "compute_processes", "GetComputeRunningProcesses", False
            ),
            "nvmlDeviceGetComputeRunningProcesses_v2": processes(
                "compute_processes", "GetComputeRunningProcesses", True
            ),
            "nvmlDeviceGetGraphicsRunningProcesses": processes(
                "graphics_processes", "GetGraphicsRunningProcesses", False
            ),
            "nvmlDeviceGetGraphicsRunningProcesses_v2": processes(
                "graphics_processes", "GetGraphicsRunningProcesses", True
            ),
            "nvmlDeviceGetMPSComputeRunningProcesses": nvmlDeviceGetMPSComputeRunningProcesses,
            "nvmlDeviceGetMaxMigDeviceCount": nvmlDeviceGetMaxMigDeviceCount,
            "nvmlDeviceGetMigDeviceHandleByIndex": nvmlDeviceGetMigDeviceHandleByIndex,
            "nvmlDeviceGetGpuInstanceId": nvmlDeviceGetGpuInstanceId,
            "nvmlDeviceGetAttributes": nvmlDeviceGetAttributes,
            "nvmlDeviceGetGpuInstanceProfileInfo": nvmlDeviceGetGpuInstanceProfileInfo,
            "nvmlGpmQueryDeviceSupport": nvmlGpmQueryDeviceSupport,
            "nvmlGpmSampleAlloc": nvmlGpmSampleAlloc,
            "nvmlGpmSampleFree": nvmlGpmSampleFree,
            "nvmlGpmSampleGet": nvmlGpmSampleGet,
            "nvmlGpmMigSampleGet": nvmlGpmMigSampleGet,
            "nvmlGpmMetricsGet": nvmlGpmMetricsGet,
            "nvmlEventSetCreate": nvmlEventSetCreate,
            "nvmlDeviceRegisterEvents": nvmlDeviceRegisterEvents,
            "nvmlEventSetWait_v2": nvmlEventSetWait_v2,
            "nvmlEventSetFree": nvmlEventSetFree,
            "nvmlDeviceGetTotalEccErrors": nvmlDeviceGetTotalEccErrors,
            "nvmlDeviceGetRemappedRows": nvmlDeviceGetRemappedRows,
            "nvmlDeviceGetRetiredPagesPendingStatus": simple(
                "retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus"
            ),
            "nvmlDeviceGetPcieReplayCounter": simple(
                "pcie_replay_count", "nvmlDeviceGetPcieReplayCounter"
            ),
        }


def install_fake(monkeypatch: Any, scenario: dict[str, Any], **kwargs: Any) -> FakeNvml:
    """Install a fake for one test; pytest's monkeypatch undoes it afterwards."""
    fake = FakeNvml(scenario, **kwargs)
    fake.install(monkeypatch.setattr)
    return fake


class ManualClock:
    """A settable clock for the fake's sample timestamps and the collector's clocks."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def us(self) -> int:
        return int(self.now_s * 1_000_000)

    def advance(self, seconds: float) -> None:
        self.now_s += seconds
