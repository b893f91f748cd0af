"""What the collector measures: the sample row, and the plain NVML readings that fill it.

Each plain reading is one `Metric` in `METRICS`: the row field it fills, the pynvml functions
that answer it (newest first), and how the answer becomes the field's value. Readings that
need more than one call or a decision (utilization, memory, MIG, memory temperature,
processes) are read by `GpuReader` in nvml.py.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, NamedTuple

import pynvml

# A uint64 NVML counter (energy, violation time) is stored in an int64 column.
INT64_MAX = 2**63 - 1


class Metric(NamedTuple):
    """One plain NVML reading: `apis[0](handle, *args)`, else the next, older API."""

    field: str  # the GpuSample attribute it fills; also its key in the "unsupported" cache
    apis: tuple[str, ...]  # pynvml function names, newest first (the fallback order)
    args: tuple[Any, ...] = ()  # arguments after the device handle
    divide_by: float | None = None  # a unit change, e.g. 1000.0 for mW -> W
    attr: str | None = None  # the attribute of the answer that holds the value
    counter: bool = False  # a uint64 counter: an int, clamped to the int64 column
    flag: bool = False  # an NVML enable state or 0/1 answer: a bool

    def convert(self, answer: Any) -> Any:
        """The field's value from NVML's answer."""
        value = answer if self.attr is None else getattr(answer, self.attr)
        if self.flag:
            return bool(value)
        if self.counter:
            return min(int(value), INT64_MAX)
        if self.divide_by is not None:
            return value / self.divide_by
        return value


METRICS = (
    # mW -> W. The board's draw: a 1 s average on Ampere (except GA100) and newer.
    Metric("power_w", ("nvmlDeviceGetPowerUsage",), divide_by=1000.0),
    # mW -> W, after every limiter, out-of-band ones included.
    Metric("power_limit_w", ("nvmlDeviceGetEnforcedPowerLimit",), divide_by=1000.0),
    # mJ since the driver was loaded (it restarts at a reload); NotSupported before Volta.
    Metric("energy_mj", ("nvmlDeviceGetTotalEnergyConsumption",), counter=True),
    # °C. The signed ...TemperatureV is new in the 12.8 headers; older drivers lack it.
    Metric(
        "temp_gpu_c",
        ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"),
        (pynvml.NVML_TEMPERATURE_GPU,),
    ),
    # MHz.
    Metric("sm_clock_mhz", ("nvmlDeviceGetClockInfo",), (pynvml.NVML_CLOCK_SM,)),
    Metric("sm_clock_max_mhz", ("nvmlDeviceGetMaxClockInfo",), (pynvml.NVML_CLOCK_SM,)),
    Metric("mem_clock_mhz", ("nvmlDeviceGetClockInfo",), (pynvml.NVML_CLOCK_MEM,)),
    # The raw reasons bitmask (NVML may add bits); ...ThrottleReasons is the deprecated name.
    Metric(
        "clock_event_mask",
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
    ),
    # Cumulative ns throttled by each policy since the driver was loaded.
    Metric(
        "thermal_violation_ns",
        ("nvmlDeviceGetViolationStatus",),
        (pynvml.NVML_PERF_POLICY_THERMAL,),
        attr="violationTime",
        counter=True,
    ),
    Metric(
        "power_violation_ns",
        ("nvmlDeviceGetViolationStatus",),
        (pynvml.NVML_PERF_POLICY_POWER,),
        attr="violationTime",
        counter=True,
    ),
    # Health (contract v1.2). ECC error counts since the driver was loaded; NotSupported on
    # GPUs without ECC or with ECC off.
    Metric(
        "ecc_uncorrected_volatile",
        ("nvmlDeviceGetTotalEccErrors",),
        (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
        counter=True,
    ),
    Metric(
        "ecc_corrected_volatile",
        ("nvmlDeviceGetTotalEccErrors",),
        (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC),
        counter=True,
    ),
    # Pages waiting for retirement at the next driver reload: GPUs before Ampere (which remap
    # rows instead and answer NotSupported).
    Metric("retired_pages_pending", ("nvmlDeviceGetRetiredPagesPendingStatus",), flag=True),
    # PCIe replays since the driver was loaded.
    Metric("pcie_replay_count", ("nvmlDeviceGetPcieReplayCounter",), counter=True),
)

# The process lists merged into a row, each (cache key, pynvml functions newest first).
# pynvml's unsuffixed list functions call the C `_v3` symbol; a library without it raises
# NVMLLibraryMismatchError, and the `_v2` function is used instead.
PROCESS_LISTS = (
    (
        "compute_processes",
        ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"),
    ),
    (
        "graphics_processes",
        ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2"),
    ),
    ("mps_processes", ("nvmlDeviceGetMPSComputeRunningProcesses",)),
)


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
    """One row of a sample file: the field names are the columns of `schema.COLLECTOR_SCHEMA`."""

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
    # The Slurm job holding the GPU per the scheduler's gpustat files (`--slurm-gpustat`).
    alloc_job_id: str | None = None
    alloc_user: str | None = None
    # The site the collector was told it runs at (`--cluster`); None: not said.
    cluster: str | None = None
    # Activity over the interval from NVML GPM (contract v1.2); None where GPM cannot say.
    sm_active_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_active_pct: float | None = None
    dram_active_pct: float | None = None
    pcie_rx_bytes_s: float | None = None
    pcie_tx_bytes_s: float | None = None
    nvlink_rx_bytes_s: float | None = None
    nvlink_tx_bytes_s: float | None = None
    # Health of the physical GPU: the XIDs of the interval ([] none; None: no events).
    xid_errors: list[int] | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_volatile: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    retired_pages_pending: bool | None = None
    pcie_replay_count: int | None = None
    # A MIG device's row: its GPU's UUID, its profile (`1g.10gb`) and its slices' share.
    parent_gpu_uuid: str | None = None
    mig_profile: str | None = None
    mig_slice_fraction: float | None = None

    def to_record(self) -> dict[str, Any]:
        """A plain dict for the spool (JSON) and for `pyarrow.Table.from_pylist`, without
        the null fields (a missing key reads as null), which keeps the spool small: most
        rows have no MIG fields, and GPUs before Hopper no GPM activity."""
        record = {
            name: value
            for name, value in zip(_SAMPLE_FIELDS, _sample_values(self), strict=True)
            if value is not None
        }
        if self.processes is not None:
            record["processes"] = [p.to_record() for p in self.processes]
        return record


_SAMPLE_FIELDS = tuple(GpuSample.__dataclass_fields__)
_sample_values = operator.attrgetter(*_SAMPLE_FIELDS)
