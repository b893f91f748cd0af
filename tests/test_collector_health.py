"""Contract v1.2 on the fake NVML: GPM activity, XID events, ECC, row remapping, retired pages,
PCIe replays and MIG devices' rows (docs/collector.md#how-well-and-how-healthy)."""

from __future__ import annotations

import io
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.cli import main
from gpufleet.collectors.collect import Collector
from gpufleet.collectors.nvml import (
    GpuLostError,
    GpuReader,
    GpuSample,
    GpuState,
    Nvml,
    init_nvml,
    list_gpus,
)
from gpufleet.collectors.procinfo import ProcessInfo
from gpufleet.collectors.schema import V1_2_FIELDS
from tests.fake_nvml import (
    GPM_H100,
    FakeNvml,
    ManualClock,
    fleet_scenario,
    gpu_scenario,
    install_fake,
)

MIB = 1024 * 1024
WALL_START = 1_795_000_000.0  # 2026-11-18T11:06:40Z
ACTIVITY = (
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "pcie_rx_bytes_s",
    "pcie_tx_bytes_s",
    "nvlink_rx_bytes_s",
    "nvlink_tx_bytes_s",
)
HEALTH = (
    "xid_errors",
    "ecc_uncorrected_volatile",
    "ecc_corrected_volatile",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "retired_pages_pending",
    "pcie_replay_count",
)


def open_gpus(fake: FakeNvml) -> tuple[GpuReader, list[GpuState]]:
    init_nvml()
    reader = GpuReader(nvml=Nvml(), procinfo=ProcessInfo(), host="node-1")
    gpus = list_gpus()
    for gpu in gpus:
        reader.prime(gpu)
    return reader, gpus


def read_rows(reader: GpuReader, gpu: GpuState) -> list[GpuSample]:
    return reader.read(gpu, ts_us=1_795_000_000_000_000, interval_s=10.0)


def read(reader: GpuReader, gpu: GpuState) -> GpuSample:
    return read_rows(reader, gpu)[0]


def activity(row: GpuSample) -> tuple[Any, ...]:
    return tuple(getattr(row, name) for name in ACTIVITY)


NULL_ACTIVITY = (None,) * len(ACTIVITY)
H100_ACTIVITY = (62.5, 31.25, 20.0, 45.5, 100.0 * MIB, 50.0 * MIB, 2048.0 * MIB, 1024.0 * MIB)


# -- GPM ----------------------------------------------------------------------------------


def test_gpm_activity_in_contract_units_from_the_first_read(monkeypatch):
    fake = install_fake(monkeypatch, fleet_scenario(2))
    fake.gpus[1]["gpm"] = dict(GPM_H100, SM_UTIL=5.0, PCIE_RX_PER_SEC=1.5)
    reader, gpus = open_gpus(fake)  # priming takes each GPU's first GPM sample
    for _ in range(3):
        first, second = (read(reader, gpu) for gpu in gpus)
        assert activity(first) == pytest.approx(H100_ACTIVITY)  # MiB/s -> bytes/s
        assert second.sm_active_pct == 5.0 and second.pcie_rx_bytes_s == 1.5 * MIB
    assert fake.count("nvmlGpmQueryDeviceSupport", 0) == 1  # asked once per GPU
    assert fake.count("nvmlGpmSampleGet", 0) == 4  # priming and each read
    assert fake.open_gpm_samples() == 4  # two per GPU, allocated once


def test_a_gpu_without_gpm_has_null_activity_never_zero(monkeypatch):
    # Before Hopper NVML answers isSupportedDevice = 0; an old driver raises NotSupported.
    scenario = fleet_scenario(3)
    scenario["gpus"][0]["gpm"] = None
    scenario["gpus"][1]["gpm"] = "!NotSupported"
    scenario["gpus"][2]["errors"] = {"nvmlGpmQueryDeviceSupport": "NoPermission"}
    fake = install_fake(monkeypatch, scenario)
    reader, gpus = open_gpus(fake)
    for _ in range(3):
        assert [activity(read(reader, gpu)) for gpu in gpus] == [NULL_ACTIVITY] * 3
    for index in range(3):
        assert fake.count("nvmlGpmQueryDeviceSupport", index) == 1
        assert fake.count("nvmlGpmSampleGet", index) == 0
    assert fake.open_gpm_samples() == 0


def test_a_gpm_metric_the_gpu_lacks_is_null_the_others_are_read(monkeypatch):
    # a PCIe card: no NVLink
    gpm: dict[str, Any] = {k: v for k, v in GPM_H100.items() if not k.startswith("NVLINK")}
    gpm["ANY_TENSOR_UTIL"] = "!NoPermission"
    fake = install_fake(monkeypatch, {"gpus": [gpu_scenario(0, gpm=gpm)]})
    reader, [gpu] = open_gpus(fake)
    row = read(reader, gpu)
    assert (row.sm_active_pct, row.dram_active_pct, row.pcie_tx_bytes_s) == (62.5, 45.5, 50 * MIB)
    assert (row.tensor_active_pct, row.nvlink_rx_bytes_s, row.nvlink_tx_bytes_s) == (None,) * 3


def test_out_of_range_gpm_values_are_clamped_and_not_a_number_is_null(monkeypatch):
    gpm = dict(GPM_H100, SM_UTIL=100.4, SM_OCCUPANCY=-0.1, DRAM_BW_UTIL=float("nan"))
    fake = install_fake(monkeypatch, {"gpus": [gpu_scenario(0, gpm=gpm)]})
    reader, [gpu] = open_gpus(fake)
    row = read(reader, gpu)
    assert (row.sm_active_pct, row.sm_occupancy_pct, row.dram_active_pct) == (100.0, 0.0, None)


def test_a_gpm_sample_failing_once_nulls_that_interval_and_the_next_only(monkeypatch):
    fake = install_fake(monkeypatch, fleet_scenario(2))
    reader, gpus = open_gpus(fake)
    assert read(reader, gpus[0]).sm_active_pct == 62.5
    fake.fail_once(0, "nvmlGpmSampleGet", "NoData")
    rows = [[read(reader, gpu) for gpu in gpus] for _ in range(3)]
    # the failed tick has no sample; the next has no previous one (its metrics would span
    # two intervals); then values again. The other GPU never notices.
    assert [r[0].sm_active_pct for r in rows] == [None, None, 62.5]
    assert [r[0].status for r in rows] == ["ok"] * 3
    assert [r[1].sm_active_pct for r in rows] == [62.5] * 3
    assert [r[0].power_w for r in rows] == [350.0] * 3  # the rest of the row is read


def test_gpm_metrics_failing_once_nulls_that_interval_only(monkeypatch):
    fake = install_fake(monkeypatch, fleet_scenario(1))
    reader, [gpu] = open_gpus(fake)
    fake.fail_once(0, "nvmlGpmMetricsGet", "Timeout")
    assert [read(reader, gpu).sm_active_pct for _ in range(3)] == [None, 62.5, 62.5]


@pytest.mark.parametrize("function", ["nvmlGpmSampleGet", "nvmlGpmMetricsGet"])
def test_a_gpu_lost_during_gpm_is_lost(monkeypatch, function):
    fake = install_fake(monkeypatch, fleet_scenario(1))
    reader, [gpu] = open_gpus(fake)
    read(reader, gpu)
    fake.fail_once(0, function, "GpuIsLost")
    with pytest.raises(GpuLostError):
        read(reader, gpu)


# -- XID events -----------------------------------------------------------------------------


def test_xid_events_land_in_the_row_of_the_interval_they_happened_in(monkeypatch):
    fake = install_fake(monkeypatch, fleet_scenario(2))
    reader, gpus = open_gpus(fake)
    assert [read(reader, gpu).xid_errors for gpu in gpus] == [[], []]  # none: empty list
    fake.push_xid(1, 94, 94, 48)
    assert [read(reader, gpu).xid_errors for gpu in gpus] == [[], [94, 94, 48]]
    assert [read(reader, gpu).xid_errors for gpu in gpus] == [[], []]
    assert fake.count("nvmlDeviceRegisterEvents", 1) == 1  # one event set per GPU, kept
    assert fake.open_event_sets() == 2


@pytest.mark.parametrize("error", ["NotSupported", "NoPermission"])
def test_events_the_driver_refuses_give_null_xids_and_are_not_asked_again(monkeypatch, error):
    scenario = fleet_scenario(2)
    scenario["gpus"][0]["errors"] = {"nvmlDeviceRegisterEvents": error}
    fake = install_fake(monkeypatch, scenario)
    reader, gpus = open_gpus(fake)
    rows = [[read(reader, gpu) for gpu in gpus] for _ in range(3)]
    assert [r[0].xid_errors for r in rows] == [None] * 3
    assert [r[1].xid_errors for r in rows] == [[]] * 3
    assert [r[0].status for r in rows] == ["ok"] * 3
    assert fake.count("nvmlDeviceRegisterEvents", 0) == 1
    assert fake.open_event_sets() == 1  # the refused GPU's set was freed


def test_a_gpu_without_xid_events_in_the_fake_answers_not_supported(monkeypatch):
    scenario = fleet_scenario(1)
    del scenario["gpus"][0]["xid_events"]
    fake = install_fake(monkeypatch, scenario)
    reader, [gpu] = open_gpus(fake)
    assert read(reader, gpu).xid_errors is None


def test_a_transient_event_error_is_retried_next_tick(monkeypatch):
    fake = install_fake(monkeypatch, fleet_scenario(1))
    fake.fail_once(0, "nvmlDeviceRegisterEvents", "Timeout")
    reader, [gpu] = open_gpus(fake)
    assert read(reader, gpu).xid_errors is None  # no event set this tick
    fake.push_xid(0, 13)
    assert read(reader, gpu).xid_errors == [13]


# -- ECC, row remapping, retired pages, PCIe replays ----------------------------------------


def test_health_counters_in_contract_types(monkeypatch):
    scenario = fleet_scenario(1)
    scenario["gpus"][0].update(
        ecc_uncorrected_volatile=2,
        ecc_corrected_volatile=2**64 - 1,  # a uint64 count: clamped to the int64 column
        remapped_rows=[5, 1, 1, 0],
        retired_pages_pending=1,
        pcie_replay_count=12,
    )
    fake = install_fake(monkeypatch, scenario)
    reader, [gpu] = open_gpus(fake)
    row = read(reader, gpu)
    assert (row.ecc_uncorrected_volatile, row.ecc_corrected_volatile) == (2, 2**63 - 1)
    assert (row.remapped_rows_pending, row.remapped_rows_failure) == (True, False)
    assert row.retired_pages_pending is True and row.pcie_replay_count == 12


@pytest.mark.parametrize("error", ["!NotSupported", "!NoPermission"])
@pytest.mark.parametrize(
    ("key", "function", "columns", "calls_per_read"),
    [
        (
            "ecc_uncorrected_volatile",
            "nvmlDeviceGetTotalEccErrors",
            ("ecc_uncorrected_volatile",),
            2,  # the corrected count is still asked
        ),
        (
            "remapped_rows",
            "nvmlDeviceGetRemappedRows",
            ("remapped_rows_pending", "remapped_rows_failure"),
            1,
        ),
        (
            "retired_pages_pending",
            "nvmlDeviceGetRetiredPagesPendingStatus",
            ("retired_pages_pending",),
            1,
        ),
        ("pcie_replay_count", "nvmlDeviceGetPcieReplayCounter", ("pcie_replay_count",), 1),
    ],
)
def test_unsupported_health_is_null_and_not_asked_again(
    monkeypatch, key, function, columns, calls_per_read, error
):
    scenario = fleet_scenario(2)
    scenario["gpus"][0][key] = error
    scenario["gpus"][1]["retired_pages_pending"] = 0  # a GPU before Ampere
    fake = install_fake(monkeypatch, scenario)
    reader, gpus = open_gpus(fake)
    rows = [[read(reader, gpu) for gpu in gpus] for _ in range(3)]
    assert [r[0].status for r in rows] == ["ok"] * 3
    for column in columns:
        assert [getattr(r[0], column) for r in rows] == [None] * 3  # never 0 or False
        assert all(getattr(r[1], column) is not None for r in rows)
    assert fake.count(function, 0) == (calls_per_read - 1) * 3 + 1
    assert fake.count(function, 1) == calls_per_read * 3


def test_a_gpu_without_ecc_has_null_counts(monkeypatch):
    # A consumer board: ECC, row remapping and retired pages all NotSupported.
    gpu = gpu_scenario(0, name="NVIDIA GeForce RTX 4090", gpm=None)
    for key in ("ecc_uncorrected_volatile", "ecc_corrected_volatile", "remapped_rows"):
        del gpu[key]
    fake = install_fake(monkeypatch, {"gpus": [gpu]})
    reader, [state] = open_gpus(fake)
    row = read(reader, state)
    assert {name: getattr(row, name) for name in HEALTH} == {
        "xid_errors": [],
        "ecc_uncorrected_volatile": None,
        "ecc_corrected_volatile": None,
        "remapped_rows_pending": None,
        "remapped_rows_failure": None,
        "retired_pages_pending": None,
        "pcie_replay_count": 7,
    }


# -- MIG ------------------------------------------------------------------------------------


def mig_gpu(index: int = 0) -> dict[str, Any]:
    """An H100 in MIG mode with a 1g.10gb and a 3g.40gb instance (slot 1 empty)."""
    uuid = f"GPU-{index:08d}-fake-0000-0000-000000000000"
    return gpu_scenario(
        index,
        mig_mode=[1, 1],
        errors={
            "nvmlDeviceGetSamples": "NotSupported",
            "nvmlDeviceGetUtilizationRates": "NotSupported",
        },
        mig_devices=[
            {
                "uuid": f"MIG-a-of-{uuid}",
                "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                "gpu_instance_id": 9,
                "slices": 1,
                "memory": {"total": 10 * 2**30, "used": 2**30},
                "compute_processes": [{"pid": 101, "used_mem_bytes": 2**30}],
                "gpm": dict(GPM_H100, SM_UTIL=80.0),
            },
            None,
            {
                "uuid": f"MIG-b-of-{uuid}",
                "name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
                "gpu_instance_id": 2,
                "slices": 3,
                "memory": {"total": 40 * 2**30, "used": 3 * 2**30},
                "compute_processes": [
                    {"pid": 202, "used_mem_bytes": 2**30},
                    {"pid": 203, "used_mem_bytes": 2 * 2**30},
                ],
                "gpm": dict(GPM_H100, SM_UTIL=10.0, NVLINK_TOTAL_RX_PER_SEC=None),
            },
        ],
    )


def test_a_mig_gpu_writes_a_row_per_mig_device(monkeypatch):
    fake = install_fake(monkeypatch, {"gpus": [mig_gpu(0), gpu_scenario(1)]})
    reader, gpus = open_gpus(fake)
    parent, small, large = read_rows(reader, gpus[0])
    uuid = gpus[0].uuid

    # The GPU's row: power, energy, temperatures, clocks and health, as without MIG rows
    # (memory and processes summed over its MIG devices); no MIG fields.
    assert (parent.gpu_uuid, parent.mig_enabled, parent.gpu_util_pct) == (uuid, True, None)
    assert (parent.power_w, parent.temp_gpu_c, parent.energy_mj) == (350.0, 45, 1_000_000)
    assert parent.pcie_replay_count == 7 and parent.xid_errors == []
    assert (parent.mem_used_bytes, parent.mem_total_bytes) == (4 * 2**30, 50 * 2**30)
    assert parent.processes is not None and [p.pid for p in parent.processes] == [101, 202, 203]
    assert (parent.parent_gpu_uuid, parent.mig_profile, parent.mig_slice_fraction) == (None,) * 3

    # A MIG device's row: its own identity, memory, processes and share of the GPU.
    assert [r.gpu_uuid for r in (small, large)] == [f"MIG-a-of-{uuid}", f"MIG-b-of-{uuid}"]
    for row in (small, large):
        assert (row.parent_gpu_uuid, row.gpu_index, row.status) == (uuid, 0, "ok")
        assert row.gpu_name == "NVIDIA H100 80GB HBM3" and row.mig_enabled is True
        assert (row.power_w, row.energy_mj, row.temp_gpu_c, row.sm_clock_mhz) == (None,) * 4
        assert {name: getattr(row, name) for name in HEALTH} == dict.fromkeys(HEALTH)
        assert row.gpu_util_pct is None
    assert [r.mig_profile for r in (small, large)] == ["1g.10gb", "3g.40gb"]
    assert [r.mig_slice_fraction for r in (small, large)] == [
        pytest.approx(1 / 7),
        pytest.approx(3 / 7),
    ]
    assert [(r.mem_used_bytes, r.mem_total_bytes) for r in (small, large)] == [
        (2**30, 10 * 2**30),
        (3 * 2**30, 40 * 2**30),
    ]
    assert [[p.pid for p in r.processes or []] for r in (small, large)] == [[101], [202, 203]]

    # GPM per GPU instance: none on a MIG device's first tick (no previous sample), then its own.
    assert [r.sm_active_pct for r in (small, large)] == [None, None]
    _, small, large = read_rows(reader, gpus[0])
    assert [r.sm_active_pct for r in (small, large)] == [80.0, 10.0]
    assert (large.nvlink_rx_bytes_s, large.nvlink_tx_bytes_s) == (None, 1024.0 * MIB)
    assert fake.count("nvmlGpmMigSampleGet", 0) == 4
    # NVML calls per process list and memory are not doubled for the GPU's row
    assert fake.count("nvmlDeviceGetMemoryInfo", 0) == 2 * 2
    # the other GPU: one row, as before
    [whole] = read_rows(reader, gpus[1])
    assert whole.parent_gpu_uuid is None and whole.sm_active_pct == 62.5


def test_mig_devices_that_go_away_free_their_gpm_samples(monkeypatch):
    fake = install_fake(monkeypatch, {"gpus": [mig_gpu(0)]})
    reader, [gpu] = open_gpus(fake)
    assert len(read_rows(reader, gpu)) == 3
    assert fake.open_gpm_samples() == 2 * 3  # the GPU and its two instances
    fake.gpus[0]["mig_devices"][2] = None  # the 3g.40gb instance is destroyed
    assert [r.mig_profile for r in read_rows(reader, gpu)] == [None, "1g.10gb"]
    assert fake.open_gpm_samples() == 2 * 2
    fake.gpus[0]["mig_mode"] = [0, 0]  # MIG off
    del fake.gpus[0]["errors"]
    assert len(read_rows(reader, gpu)) == 1
    assert fake.open_gpm_samples() == 2


def test_mig_slice_fraction_is_null_when_nvml_names_no_profile(monkeypatch):
    scenario = mig_gpu(0)
    scenario["errors"]["nvmlDeviceGetGpuInstanceProfileInfo"] = "NoPermission"
    scenario["mig_devices"][0]["name"] = "an odd name"
    fake = install_fake(monkeypatch, {"gpus": [scenario]})
    reader, [gpu] = open_gpus(fake)
    _, small, large = read_rows(reader, gpu)
    assert (small.mig_profile, large.mig_profile) == (None, "3g.40gb")
    assert (small.mig_slice_fraction, large.mig_slice_fraction) == (None, None)
    assert fake.count("nvmlDeviceGetGpuInstanceProfileInfo", 0) > 0
    calls = fake.count("nvmlDeviceGetGpuInstanceProfileInfo", 0)
    read_rows(reader, gpu)
    assert fake.count("nvmlDeviceGetGpuInstanceProfileInfo", 0) == calls  # asked once


def test_a_mig_device_whose_uuid_fails_is_left_out_that_tick(monkeypatch):
    fake = install_fake(monkeypatch, {"gpus": [mig_gpu(0)]})
    reader, [gpu] = open_gpus(fake)
    fake.fail_once(0, "nvmlDeviceGetUUID", "Timeout")
    rows = read_rows(reader, gpu)
    assert [r.gpu_uuid for r in rows] == [gpu.uuid, f"MIG-b-of-{gpu.uuid}"]
    assert len(read_rows(reader, gpu)) == 3


# -- the collector's loop and its files -----------------------------------------------------


def make_collector(tmp_path, mono, wall, **kwargs) -> Collector:
    return Collector(
        data_dir=tmp_path,
        interval_s=10.0,
        flush_s=600.0,
        host="node-1",
        wall_clock=wall,
        monotonic=mono,
        stderr=io.StringIO(),
        fsync=False,
        **kwargs,
    )


def tick(collector: Collector, mono: ManualClock, wall: ManualClock) -> list[GpuSample]:
    mono.advance(10.0)
    wall.advance(10.0)
    return collector.tick()


def test_xids_seen_before_a_gpu_is_lost_are_in_its_lost_row(monkeypatch, tmp_path):
    mono, wall = ManualClock(1000.0), ManualClock(WALL_START)
    fake = install_fake(monkeypatch, fleet_scenario(2), clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    tick(collector, mono, wall)
    fake.push_xid(1, 79)  # fallen off the bus, and the next call says the GPU is lost
    fake.fail_once(1, "nvmlDeviceGetMigMode", "GpuIsLost")
    rows = tick(collector, mono, wall)
    assert [(r.status, r.xid_errors) for r in rows] == [("ok", []), ("lost", [79])]
    assert rows[1].sm_active_pct is None and rows[1].ecc_corrected_volatile is None
    rows = tick(collector, mono, wall)  # re-initialised: read again, events open again
    assert [(r.status, r.xid_errors) for r in rows] == [("ok", []), ("ok", [])]
    fake.push_xid(1, 48)
    assert [r.xid_errors for r in tick(collector, mono, wall)] == [[], [48]]
    assert [r.sm_active_pct for r in tick(collector, mono, wall)] == [62.5, 62.5]


def test_a_driver_reload_reopens_gpm_and_events_and_close_frees_them(monkeypatch, tmp_path):
    mono, wall = ManualClock(1000.0), ManualClock(WALL_START)
    fake = install_fake(monkeypatch, {"gpus": [mig_gpu(0), gpu_scenario(1)]}, clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    assert len(tick(collector, mono, wall)) == 4
    fake.reload_driver()
    rows = tick(collector, mono, wall)
    assert [r.status for r in rows] == ["ok"] * 4
    fake.push_xid(1, 31)
    rows = tick(collector, mono, wall)
    assert [r.xid_errors for r in rows] == [[], None, None, [31]]
    assert [r.sm_active_pct for r in rows] == [62.5, 80.0, 10.0, 62.5]
    assert fake.open_gpm_samples() == 2 * 4 and fake.open_event_sets() == 2
    assert collector.close()
    assert fake.open_gpm_samples() == 0 and fake.open_event_sets() == 0


def test_files_carry_the_v1_2_columns_and_mig_rows(monkeypatch, tmp_path):
    mono, wall = ManualClock(1000.0), ManualClock(WALL_START)
    fake = install_fake(monkeypatch, {"gpus": [mig_gpu(0), gpu_scenario(1)]}, clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    tick(collector, mono, wall)
    fake.push_xid(1, 63, 64)
    tick(collector, mono, wall)
    assert collector.close()
    [path] = (tmp_path / "raw" / "samples").rglob("*.parquet")
    table = pq.read_table(path)
    for field in V1_2_FIELDS:
        assert table.schema.field(field.name).type == field.type, field.name
    assert table.schema.field("xid_errors").type == pa.list_(pa.int32())
    rows = table.to_pylist()
    assert len(rows) == 8
    mig_rows = [r for r in rows if r["parent_gpu_uuid"] is not None]
    assert sorted((r["mig_profile"], round(r["mig_slice_fraction"], 4)) for r in mig_rows) == [
        ("1g.10gb", 0.1429),
        ("1g.10gb", 0.1429),
        ("3g.40gb", 0.4286),
        ("3g.40gb", 0.4286),
    ]
    whole = [r for r in rows if r["gpu_uuid"] == fake.gpus[1]["uuid"]]
    assert [r["xid_errors"] for r in whole] == [[], [63, 64]]
    assert [r["pcie_rx_bytes_s"] for r in whole] == [100.0 * MIB] * 2
    assert {r["remapped_rows_pending"] for r in whole} == {False}


def test_collector_files_with_the_v1_2_columns_load(monkeypatch, tmp_path):
    # Readers that do not know the v1.2 columns yet load the files, MIG rows included.
    mono, wall = ManualClock(1000.0), ManualClock(WALL_START)
    install_fake(monkeypatch, {"gpus": [mig_gpu(0), gpu_scenario(1)]}, clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    for _ in range(3):
        tick(collector, mono, wall)
    assert collector.close()
    assert main(["--data-dir", str(tmp_path), "ingest"]) == 0
    assert not list((tmp_path / "quarantine").rglob("*.parquet"))
    # the GPU, its two MIG devices and the whole GPU, three ticks
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        rows = con.execute("select count(*), count(distinct gpu_uuid) from samples").fetchall()
    assert rows == [(12, 4)]
