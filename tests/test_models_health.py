"""docs/reference.md#drain, #mig-gpu-hours and #activity: gpu_health_daily and gpus_to_drain
(one test per drain reason), a MIG GPU's hours by slice, and the activity columns, on
hand-written samples with hand-computed rows."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.test_models_fixtures import Fleet, at, built_once, proc

pytestmark = pytest.mark.fleet

DAY = at(0).date()  # the fixtures' day (UTC, the Fleet's default zone)


def _health(fleet: Fleet, gpu: str = "GPU-A") -> list[dict[str, Any]]:
    return fleet.rows(
        "select * exclude (cluster, host, gpu_name) from gpu_health_daily "
        "where gpu_uuid = ? order by day",
        [gpu],
    )


# Each drain rule's case: the columns of GPU-A's last sample, the reasons its day drains for.
DRAIN_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({"remapped_rows_failure": True}, ["remap_failure"]),
    ({"remapped_rows_pending": True}, ["remap_pending"]),
    ({"ecc_uncorrected_volatile": 2}, ["ecc_uncorrected"]),
    ({"retired_pages_pending": True}, ["pages_pending"]),
    *(({"xid_errors": [code]}, [f"xid_{code}"]) for code in (48, 63, 64, 74, 79)),
    *(({"xid_errors": [code]}, [f"xid_{code}"]) for code in (92, 94, 95, 119, 120)),
    # an XID outside the rule (13: a graphics engine exception) is counted, not drained
    ({"xid_errors": [13]}, []),
    # every reason at once, in the rule's order, an XID's by code
    (
        {
            "retired_pages_pending": True,
            "xid_errors": [95, 13, 48, 95],
            "ecc_uncorrected_volatile": 1,
            "remapped_rows_pending": True,
            "remapped_rows_failure": True,
        },
        [
            "remap_failure",
            "remap_pending",
            "ecc_uncorrected",
            "xid_48",
            "xid_95",
            "pages_pending",
        ],
    ),
]


def _drain_cases() -> Fleet:
    """Each case of DRAIN_CASES on a host of its own, `case{k}`: GPU-A{k}, three 10 s samples,
    the last with the case's columns; GPU-B{k} beside it, healthy. A GPU's health rows come
    from its own samples alone, so one fleet (built once per process) holds every case."""
    fleet = Fleet()
    for k, (columns, _) in enumerate(DRAIN_CASES):
        a, b = {"host": f"case{k}", "gpu_uuid": f"GPU-A{k}"}, {"host": f"case{k}"}
        fleet.series(at(0), 2, **a, ecc_uncorrected_volatile=0, xid_errors=[])
        fleet.sample(at(20), **a, **{"ecc_uncorrected_volatile": 0, "xid_errors": [], **columns})
        fleet.series(at(0), 3, **b, gpu_uuid=f"GPU-B{k}", gpu_index=1, ecc_uncorrected_volatile=4)
    fleet.build()
    return fleet


@pytest.mark.parametrize(
    ("case", "columns", "reasons"), [(k, *c) for k, c in enumerate(DRAIN_CASES)]
)
def test_each_drain_reason_drains_the_gpu_day(
    case: int, columns: dict[str, Any], reasons: list[str]
) -> None:
    fleet = built_once("test_models_health._drain_cases", _drain_cases)
    (day,) = _health(fleet, f"GPU-A{case}")
    xids = columns.get("xid_errors", [])
    assert day["day"] == DAY
    assert day["xid_errors"] == sorted(set(xids))
    assert day["xid_count"] == len(xids)
    assert day["ecc_uncorrected_new"] == columns.get("ecc_uncorrected_volatile", 0)
    assert (day["drain"], day["drain_reasons"]) == (bool(reasons), reasons)
    # the healthy GPU beside it: a count that never grows, no XIDs known
    (other,) = _health(fleet, f"GPU-B{case}")
    assert (other["ecc_uncorrected_new"], other["xid_count"], other["drain"]) == (0, 0, False)
    drained = fleet.rows(
        "select gpu_uuid, since_day, latest_day, drain_reasons from gpus_to_drain where host = ?",
        [f"case{case}"],
    )
    expected = [
        {"gpu_uuid": f"GPU-A{case}", "since_day": DAY, "latest_day": DAY, "drain_reasons": reasons}
    ]
    assert drained == (expected if reasons else [])


def test_counters_grow_by_their_differences_and_from_zero_after_a_reload() -> None:
    """ECC and PCIe replay counts are cumulative since the driver was loaded: a day's growth
    adds each sample's rise over the one before; a count lower than before (a reload)
    counts whole. The first count known is no growth."""
    fleet = Fleet()
    counts = [(5, 100, 7), (5, 103, 7), (6, 104, 9), (1, 2, 1)]  # the last after a reload
    for k, (uncorrected, corrected, replays) in enumerate(counts):
        fleet.sample(
            at(10 * k),
            ecc_uncorrected_volatile=uncorrected,
            ecc_corrected_volatile=corrected,
            pcie_replay_count=replays,
        )
    fleet.build()
    (day,) = _health(fleet)
    assert (day["ecc_uncorrected_new"], day["ecc_corrected_new"], day["pcie_replays_new"]) == (
        0 + 1 + 1,
        3 + 1 + 2,
        0 + 2 + 1,
    )
    assert day["drain_reasons"] == ["ecc_uncorrected"]


def test_gpus_to_drain_names_the_run_of_drain_days_the_latest_ends() -> None:
    """Day 1 drained (XID 79), day 2 clean, days 3 and 4 drained (a pending remap): since
    day 3, with day 4's reasons. A GPU whose latest day is clean is not listed."""
    fleet = Fleet()
    days: list[dict[str, Any]] = [
        {"xid_errors": [79]},
        {},
        {"remapped_rows_pending": True},
        {"xid_errors": [48]},
    ]
    for k, columns in enumerate(days):
        ts = at(0) + dt.timedelta(days=k)
        fleet.sample(ts, **columns)
        fleet.sample(ts, gpu_uuid="GPU-B", gpu_index=1, **({} if k == 3 else columns))
    fleet.sample(at(0) + dt.timedelta(days=3, seconds=10), remapped_rows_pending=True)
    fleet.build()
    assert [(d["day"].day - DAY.day, d["drain_reasons"]) for d in _health(fleet)] == [
        (0, ["xid_79"]),
        (1, []),
        (2, ["remap_pending"]),
        (3, ["remap_pending", "xid_48"]),
    ]
    assert fleet.rows("select * exclude (cluster, host, gpu_name) from gpus_to_drain") == [
        {
            "gpu_uuid": "GPU-A",
            "since_day": DAY + dt.timedelta(days=2),
            "latest_day": DAY + dt.timedelta(days=3),
            "drain_reasons": ["remap_pending", "xid_48"],
            "xid_errors": [48],
        }
    ]


# --- MIG GPU-hours ------------------------------------------------------------------------


def _mig_fleet() -> Fleet:
    """GPU-M split into a 4/8 and two 2/8 MIG devices (its own row every tick too), six 10 s
    ticks; the 4/8 device runs alice's job 7, one 2/8 device bob's job 8, one nothing.
    GPU-P: a plain GPU beside it, idle."""
    fleet = Fleet()
    fleet.user("alice", "vision")
    fleet.user("bob", "nlp")
    devices = [
        ("MIG-1", 0.5, [proc(11, "alice", 1 << 30, "7")], 80.0),
        ("MIG-2", 0.25, [proc(12, "bob", 1 << 30, "8")], 40.0),
        ("MIG-3", 0.25, [], None),
    ]
    for k in range(6):
        ts = at(10 * k)
        # the GPU's own row: its processes are its devices', power and health its own
        every = [p for _, _, processes, _ in devices for p in processes]
        fleet.sample(
            ts,
            gpu_uuid="GPU-M",
            gpu_util_pct=None,
            power_w=300.0,
            processes=every,
            mig_enabled=True,
            xid_errors=[],
        )
        for uuid, share, processes, sm_active in devices:
            fleet.sample(
                ts,
                gpu_uuid=uuid,
                gpu_util_pct=None,
                processes=processes,
                sm_active_pct=sm_active,
                parent_gpu_uuid="GPU-M",
                mig_profile=f"{round(share * 8)}g.{round(share * 80)}gb",
                mig_slice_fraction=share,
            )
        fleet.sample(ts, gpu_uuid="GPU-P", gpu_index=1, gpu_util_pct=0.0)
    fleet.build()
    return fleet


def test_a_mig_gpus_hours_are_its_devices_slices_and_add_up_to_the_gpus() -> None:
    fleet = _mig_fleet()
    gpus = {
        row["gpu_uuid"]: row["hours_observed"]
        for row in fleet.rows("select gpu_uuid, hours_observed from gpu_daily")
    }
    minute = 60 / 3600
    assert gpus == pytest.approx(
        {
            "GPU-M": 0.0,  # its own row counts no hours: its devices do
            "MIG-1": 0.5 * minute,
            "MIG-2": 0.25 * minute,
            "MIG-3": 0.25 * minute,
            "GPU-P": minute,
        }
    )
    assert sum(gpus[uuid] for uuid in ("MIG-1", "MIG-2", "MIG-3")) == pytest.approx(minute)
    teams = {
        row["team"]: row["gpu_hours"]
        for row in fleet.rows("select team, gpu_hours from team_daily")
    }
    # each device by its own process; the idle device and the GPU's own row by host: none
    assert teams == pytest.approx(
        {"vision": 0.5 * minute, "nlp": 0.25 * minute, "(unallocated)": 1.25 * minute}
    )
    assert sum(teams.values()) == pytest.approx(2 * minute)  # two physical GPUs
    jobs = {
        row["job_id"]: (row["gpus"], row["gpu_hours"])
        for row in fleet.rows("select job_id, gpus, gpu_hours from job_efficiency")
    }
    # a job on a MIG device holds that device alone, not its GPU's own row too
    assert jobs == {"7": (1, pytest.approx(0.5 * minute)), "8": (1, pytest.approx(0.25 * minute))}
    # health: the GPUs' own rows, no MIG device
    health = fleet.rows("select gpu_uuid from gpu_health_daily order by gpu_uuid")
    assert [row["gpu_uuid"] for row in health] == ["GPU-M", "GPU-P"]


def test_a_mig_device_without_a_slice_counts_an_equal_part_of_its_gpu() -> None:
    fleet = Fleet()
    for k in range(3):
        fleet.sample(at(10 * k), gpu_uuid="GPU-M", mig_enabled=True, gpu_util_pct=None)
        for uuid in ("MIG-1", "MIG-2"):
            fleet.sample(at(10 * k), gpu_uuid=uuid, parent_gpu_uuid="GPU-M", gpu_util_pct=None)
    fleet.build()
    hours = fleet.one("select sum(hours_observed) as h from gpu_daily")["h"]
    assert hours == pytest.approx(30 / 3600)


# --- activity -----------------------------------------------------------------------------


def test_activity_gpu_hours_and_means_are_hand_computed() -> None:
    """GPU-A: 4 samples of 10 s for job 7, SM activity 80, 60, unknown, 40, tensor 20, 0,
    unknown, 10, DRAM 50 each known. activity = 30 s; SM-active = 8 + 6 + 4 = 18 s (60 %);
    tensor 3 s (10 %), DRAM 15 s (50 %)."""
    fleet = Fleet()
    sm = [80.0, 60.0, None, 40.0]
    tensor = [20.0, 0.0, None, 10.0]
    for k in range(4):
        fleet.sample(
            at(10 * k),
            processes=[proc(11, "alice", 1 << 30, "7")],
            sm_active_pct=sm[k],
            tensor_active_pct=tensor[k],
            dram_active_pct=None if sm[k] is None else 50.0,
        )
    fleet.build()
    hourly = fleet.one("select sum(activity_s) as a, sum(sm_active_s) as s from gpu_hourly")
    assert (hourly["a"], hourly["s"]) == pytest.approx((30.0, 18.0))
    for mart in ("gpu_daily", "team_daily", "team_weekly", "job_efficiency"):
        row = fleet.one(f"select activity_gpu_hours, sm_active_gpu_hours from {mart}")
        assert (row["activity_gpu_hours"], row["sm_active_gpu_hours"]) == pytest.approx(
            (30 / 3600, 18 / 3600)
        ), mart
    job = fleet.one(
        "select avg_sm_active_pct, avg_tensor_active_pct, avg_dram_active_pct from job_efficiency"
    )
    assert tuple(job.values()) == pytest.approx((60.0, 10.0, 50.0))


def test_without_gpm_activity_is_zero_hours_and_the_means_null() -> None:
    fleet = Fleet()
    fleet.series(at(0), 3, processes=[proc(11, "alice", 1 << 30, "7")])
    fleet.build()
    job = fleet.one(
        "select activity_gpu_hours, sm_active_gpu_hours, avg_sm_active_pct from job_efficiency"
    )
    assert tuple(job.values()) == (0.0, 0.0, None)
