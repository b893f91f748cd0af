"""The NVML wrapper and the per-GPU reader on the fake NVML (docs/collector.md#how-nvml-is-read)."""

from __future__ import annotations

import os
import pwd

import pynvml
import pytest

from gpufleet.collectors.nvml import (
    GPU_SAMPLES,
    MEMORY_SAMPLES,
    GpuLostError,
    GpuReader,
    GpuSample,
    GpuState,
    Nvml,
    init_nvml,
    list_gpus,
    sample_pairs,
)
from gpufleet.collectors.procinfo import ProcessInfo
from tests.fake_nvml import FakeNvml, ManualClock, fleet_scenario, gpu_scenario, install_fake


def open_gpus(fake: FakeNvml) -> tuple[GpuReader, list[GpuState]]:
    init_nvml()
    reader = GpuReader(nvml=Nvml(), procinfo=ProcessInfo(), host="node-1")
    gpus = list_gpus()
    for gpu in gpus:
        reader.prime(gpu)
    return reader, gpus


def read(reader: GpuReader, gpu: GpuState) -> GpuSample:
    """The GPU's own row (the first; MIG devices' rows follow it)."""
    return reader.read(gpu, ts_us=1_700_000_000_000_000, interval_s=10.0)[0]


def test_reads_every_metric_in_contract_units(monkeypatch):
    fake = install_fake(monkeypatch, fleet_scenario(1), clock_us=lambda: 5_000_000)
    reader, [gpu] = open_gpus(fake)
    row = read(reader, gpu)
    assert row.status == "ok"
    assert row.gpu_uuid == fake.gpus[0]["uuid"]
    assert row.gpu_name == "NVIDIA H100 80GB HBM3"
    assert row.power_w == 350.0  # mW -> W
    assert row.power_limit_w == 700.0
    assert row.energy_mj == 1_000_000
    assert row.mem_used_bytes == 12_884_901_888  # v2: allocated, without the reserved part
    assert row.mem_total_bytes == 85_520_809_984
    assert (row.temp_gpu_c, row.temp_mem_c) == (45, 52)
    assert (row.sm_clock_mhz, row.sm_clock_max_mhz, row.mem_clock_mhz) == (1980, 1980, 2619)
    assert row.clock_event_mask == 0
    assert (row.power_violation_ns, row.thermal_violation_ns) == (1_000_000, 0)
    assert row.mig_enabled is False
    assert row.processes is not None and [p.pid for p in row.processes] == [4242]


@pytest.mark.parametrize("error", ["!NotSupported", "!NoPermission"])
@pytest.mark.parametrize(
    ("key", "function", "column", "calls_per_read"),
    [
        ("power_mw", "nvmlDeviceGetPowerUsage", "power_w", 1),
        ("power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit", "power_limit_w", 1),
        ("energy_mj", "nvmlDeviceGetTotalEnergyConsumption", "energy_mj", 1),
        ("temp_c", "nvmlDeviceGetTemperatureV", "temp_gpu_c", 1),
        ("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", "sm_clock_max_mhz", 1),
        ("clock_event_mask", "nvmlDeviceGetCurrentClocksEventReasons", "clock_event_mask", 1),
        ("violation_ns", "nvmlDeviceGetViolationStatus", "thermal_violation_ns", 2),
        ("memory", "nvmlDeviceGetMemoryInfo", "mem_used_bytes", 1),
    ],
)
def test_unsupported_field_is_null_and_not_asked_again(
    monkeypatch, key, function, column, calls_per_read, error
):
    scenario = fleet_scenario(2)
    scenario["gpus"][0][key] = error
    fake = install_fake(monkeypatch, scenario)
    reader, gpus = open_gpus(fake)
    rows = [[read(reader, gpu) for gpu in gpus] for _ in range(3)]
    assert [r[0].status for r in rows] == ["ok"] * 3
    assert [getattr(r[0], column) for r in rows] == [None] * 3
    assert all(getattr(r[1], column) is not None for r in rows)  # the other GPU still has it
    assert fake.count(function, 0) == calls_per_read  # asked once, then remembered
    assert fake.count(function, 1) == 3 * calls_per_read


def test_memory_temperature_field_not_reported_is_null_and_not_asked_again(monkeypatch):
    fake = install_fake(monkeypatch, {"gpus": [gpu_scenario(0, temp_mem_c=None)]})
    reader, [gpu] = open_gpus(fake)
    assert [read(reader, gpu).temp_mem_c for _ in range(3)] == [None] * 3
    assert fake.count("nvmlDeviceGetFieldValues", 0) == 1


def test_function_not_found_falls_back_to_the_older_api(monkeypatch):
    scenario = fleet_scenario(
        2,
        missing_functions=[
            "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetCurrentClocksEventReasons",
        ],
    )
    scenario["gpus"][1]["clock_event_mask"] = 0x20
    fake = install_fake(monkeypatch, scenario)
    reader, gpus = open_gpus(fake)
    rows = [[read(reader, gpu) for gpu in gpus] for _ in range(2)]
    assert [r.temp_gpu_c for tick in rows for r in tick] == [45] * 4
    # v1 `used` includes the reserved memory
    assert rows[0][0].mem_used_bytes == 12_884_901_888 + 536_870_912
    assert [r.clock_event_mask for r in rows[1]] == [0, 0x20]
    # The missing symbol is tried once for the whole library, never again.
    assert fake.count("nvmlDeviceGetTemperatureV") == 1
    assert fake.count("nvmlDeviceGetCurrentClocksEventReasons") == 1
    assert fake.count("nvmlDeviceGetTemperature") == 4
    assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 4


def test_library_mismatch_for_process_list_falls_back_to_v2(monkeypatch):
    scenario = fleet_scenario(1, missing_functions=["nvmlDeviceGetComputeRunningProcesses_v3"])
    scenario["gpus"][0]["compute_processes"] = [{"pid": 77, "used_mem_bytes": 5}]
    fake = install_fake(monkeypatch, scenario)
    reader, [gpu] = open_gpus(fake)
    for _ in range(2):
        row = read(reader, gpu)
        assert row.processes is not None
        assert [(p.pid, p.used_mem_bytes) for p in row.processes] == [(77, 5)]
    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v2", 0) == 2


def test_mean_utilization_comes_from_the_sample_buffer_with_a_cursor(monkeypatch):
    clock = ManualClock()
    fake = install_fake(monkeypatch, fleet_scenario(1), clock_us=clock.us)
    t0 = clock.us()
    fake.push_samples(0, GPU_SAMPLES, [(t0 - 2_000_000, 100), (t0 - 1_000_000, 100)])
    fake.push_samples(0, MEMORY_SAMPLES, [(t0 - 1_000_000, 50)])
    reader, [gpu] = open_gpus(fake)  # priming skips what happened before the collector started
    # A 10 s interval: busy for the first 3 samples, idle for the last, which is all that an
    # instantaneous reading would see.
    fake.push_samples(0, GPU_SAMPLES, [(t0 + 1, 90), (t0 + 2, 80), (t0 + 3, 70), (t0 + 4, 0)])
    fake.push_samples(0, MEMORY_SAMPLES, [(t0 + 1, 10), (t0 + 2, 30)])
    row = read(reader, gpu)
    assert row.gpu_util_pct == pytest.approx(60.0)
    assert row.mem_util_pct == pytest.approx(20.0)
    assert gpu.cursors_us[GPU_SAMPLES] == t0 + 4
    fake.push_samples(0, GPU_SAMPLES, [(t0 + 5, 10), (t0 + 6, 30)])
    fake.push_samples(0, MEMORY_SAMPLES, [(t0 + 5, 40)])
    row = read(reader, gpu)
    assert row.gpu_util_pct == pytest.approx(20.0)  # only the samples after the cursor
    assert row.mem_util_pct == pytest.approx(40.0)


def test_empty_sample_buffer_not_found_falls_back_to_the_instant_reading(monkeypatch):
    scenario = fleet_scenario(1)
    scenario["gpus"][0].update(util_pct=None, util_now_pct=33, mem_util_pct=None)
    fake = install_fake(monkeypatch, scenario)
    reader, [gpu] = open_gpus(fake)
    rows = [read(reader, gpu) for _ in range(2)]
    assert [r.gpu_util_pct for r in rows] == [33.0, 33.0]
    # NotFound means "nothing new", not "unsupported": the buffer is asked again each time.
    assert fake.count("nvmlDeviceGetSamples", 0) == 2 * 2 + 2  # 2 reads x 2 kinds + priming


def test_unsupported_sample_buffer_falls_back_to_the_instant_reading(monkeypatch):
    scenario = fleet_scenario(1)
    scenario["gpus"][0]["errors"] = {"nvmlDeviceGetSamples": "NotSupported"}
    scenario["gpus"][0]["util_now_pct"] = 12
    fake = install_fake(monkeypatch, scenario)
    reader, [gpu] = open_gpus(fake)
    rows = [read(reader, gpu) for _ in range(3)]
    assert [r.gpu_util_pct for r in rows] == [12.0] * 3
    assert [r.mem_util_pct for r in rows] == [20.0] * 3
    assert fake.count("nvmlDeviceGetSamples", 0) == 2  # once per sampling type, then cached


def test_mig_gpu_has_null_utilization_and_per_instance_memory_and_processes(monkeypatch):
    mig_gpu = gpu_scenario(
        0,
        mig_mode=[1, 1],
        errors={"nvmlDeviceGetSamples": "NotSupported"},
        mig_devices=[
            {
                "memory": {"total": 40, "used": 10},
                "compute_processes": [{"pid": 1, "used_mem_bytes": 10}],
            },
            None,  # an empty slot answers NotFound
            {
                "memory": {"total": 20, "used": 5},
                "compute_processes": [{"pid": 2, "used_mem_bytes": 5}],
            },
        ],
    )
    fake = install_fake(monkeypatch, {"gpus": [mig_gpu]})
    reader, [gpu] = open_gpus(fake)
    row = read(reader, gpu)
    assert row.status == "ok"
    assert row.mig_enabled is True
    assert row.gpu_util_pct is None and row.mem_util_pct is None
    assert (row.mem_used_bytes, row.mem_total_bytes) == (15, 60)
    assert row.processes is not None and [p.pid for p in row.processes] == [1, 2]
    assert row.power_w == 350.0  # power, temperature and clocks come from the parent
    assert fake.count("nvmlDeviceGetUtilizationRates", 0) == 0


def test_gpu_without_mig_support_reports_mig_disabled(monkeypatch):
    fake = install_fake(monkeypatch, {"gpus": [gpu_scenario(0, mig_mode=None)]})
    reader, [gpu] = open_gpus(fake)
    assert read(reader, gpu).mig_enabled is False


@pytest.mark.parametrize("error", ["GpuIsLost", "ResetRequired", "Unknown"])
def test_lost_gpu_errors_raise_gpu_lost(monkeypatch, error):
    scenario = fleet_scenario(1)
    scenario["gpus"][0]["errors"] = {"nvmlDeviceGetPowerUsage": error}
    fake = install_fake(monkeypatch, scenario)
    reader, [gpu] = open_gpus(fake)
    with pytest.raises(GpuLostError):
        read(reader, gpu)


def test_processes_are_merged_per_pid_with_the_owner_from_proc(monkeypatch):
    me = os.getpid()
    gone = 2**22 + 12345  # above the default pid_max: no such process
    scenario = fleet_scenario(1)
    scenario["gpus"][0]["compute_processes"] = [
        {"pid": me, "used_mem_bytes": 1_000},
        {"pid": gone, "used_mem_bytes": None},  # NVML_VALUE_NOT_AVAILABLE
    ]
    scenario["gpus"][0]["graphics_processes"] = [{"pid": me, "used_mem_bytes": 3_000}]
    fake = install_fake(monkeypatch, scenario)
    reader, [gpu] = open_gpus(fake)
    row = read(reader, gpu)
    assert row.processes is not None
    by_pid = {p.pid: p for p in row.processes}
    assert sorted(by_pid) == [me, gone]
    assert by_pid[me].user == pwd.getpwuid(os.getuid()).pw_name
    assert by_pid[me].used_mem_bytes == 3_000
    assert by_pid[gone].user is None and by_pid[gone].used_mem_bytes is None
    record = row.to_record()
    assert record["processes"][0] == {
        "pid": me,
        "user": pwd.getpwuid(os.getuid()).pw_name,
        "used_mem_bytes": 3_000,
        "job_id": by_pid[me].job_id,
    }


def test_nvml_errors_are_the_real_pynvml_classes(monkeypatch):
    scenario = fleet_scenario(1)
    scenario["gpus"][0]["errors"] = {"nvmlDeviceGetPowerUsage": "GpuIsLost"}
    install_fake(monkeypatch, scenario)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost) as info:
        pynvml.nvmlDeviceGetPowerUsage(handle)
    assert info.value.value == pynvml.NVML_ERROR_GPU_IS_LOST


def test_sample_pairs_reads_pynvml_arrays_and_loose_samples_alike():
    array = (pynvml.c_nvmlSample_t * 3)()
    for sample, (ts, value) in zip(array, [(10, 5), (20, 250), (30, 0)], strict=True):
        sample.timeStamp = ts
        sample.sampleValue.uiVal = value
    expected = [(10, 5.0), (20, 250.0), (30, 0.0)]
    assert sample_pairs(array[0:3], pynvml.NVML_VALUE_TYPE_UNSIGNED_INT) == expected  # fast path
    loose = [array[2], array[0], array[1]]  # not contiguous: read field by field
    assert sorted(sample_pairs(loose, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)) == expected
    doubles = (pynvml.c_nvmlSample_t * 1)()
    doubles[0].timeStamp = 7
    doubles[0].sampleValue.dVal = 12.5
    assert sample_pairs(doubles[0:1], pynvml.NVML_VALUE_TYPE_DOUBLE) == [(7, 12.5)]
    assert list(sample_pairs([], 1)) == []


def test_out_of_range_samples_are_clamped(monkeypatch):
    clock = ManualClock()
    fake = install_fake(monkeypatch, fleet_scenario(1), clock_us=clock.us)
    reader, [gpu] = open_gpus(fake)
    t0 = clock.us()
    fake.push_samples(0, GPU_SAMPLES, [(t0 + 1, 250), (t0 + 2, 50)])
    assert read(reader, gpu).gpu_util_pct == pytest.approx(75.0)
