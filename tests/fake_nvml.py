"""A fake NVML: replaces pynvml's functions, returns pynvml's own ctypes structures and raises
pynvml's REAL exception classes (the functions are monkeypatched; the C library is not faked).

A scenario is a plain dict (or JSON file) describing the GPUs:

    {"gpus": [{"uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "util_pct": 40, ...}],
     "missing_functions": ["nvmlDeviceGetTemperatureV"],   # C symbols the "driver" lacks
     "library_missing": false}                             # nvmlInit -> LibraryNotFound

A GPU key that is absent (or set to "!NotSupported") makes its call raise NotSupported; any
"!<Name>" value raises `pynvml.NVMLError_<Name>`. `gpu_scenario()` builds a realistic H100.

In pytest: `fake = FakeNvml(scenario); fake.install(monkeypatch.setattr)`.
In a subprocess: `python -m tests.fake_nvml_run scenario.json -- collect ...` (see there).
"""

from __future__ import annotations

import copy
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

SAMPLE_PERIOD_US = 166_667  # 1/6 s, the fastest documented utilization sample period
SAMPLE_BUFFER_LEN = 100


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
        error = gpu.get("errors", {}).get(function)
        if error:
            raise nvml_error(error)
        return gpu

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

        return {
            "nvmlInit": nvmlInit,
            "nvmlShutdown": nvmlShutdown,
            "nvmlDeviceGetCount": nvmlDeviceGetCount,
            "nvmlDeviceGetHandleByIndex": nvmlDeviceGetHandleByIndex,
            "nvmlDeviceGetUUID": simple("uuid", "nvmlDeviceGetUUID"),
            "nvmlDeviceGetName": simple("name", "nvmlDeviceGetName"),
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
