"""Allocations that name a MIG device or a GPU by UUID (docs/reference.md#attribution, rule 1,
and #mig-gpu-hours): each job on a slice of a GPU is attributed that slice's GPU-hours and
no more, whatever GPU index its row gives; a MIG device is told from a GPU by its parent GPU
(parent_gpu_uuid), not by the text of its UUID. Hand-written samples, hand-computed rows;
the CSV column through a real ingest and build."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpufleet.config import Config
from gpufleet.integrations.prometheus.files import allocation_files
from gpufleet.integrations.prometheus.pods import pod_allocations
from gpufleet.warehouse.base import ensure_raw_tables
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.refs.read import read_allocations
from tests.test_ingest import T0, query, sample, write_samples
from tests.test_models_fixtures import Fleet, at, proc

MINUTE = 60 / 3600  # six 10 s ticks, in hours


def _mig_gpu(*, devices: tuple[str, str, str] = ("MIG-1", "MIG-2", "MIG-3")) -> Fleet:
    """GPU-M (index 0) split into a 1/2 and two 1/4 MIG devices, its own row every tick too;
    carol runs a process on the first device, dan (no team) on the second; GPU-P (index 1) a
    plain GPU beside it. Six 10 s ticks from at(0)."""
    fleet = Fleet()
    for user, team in (("alice", "vision"), ("bob", "nlp"), ("carol", "ml")):
        fleet.user(user, team)
    shares = dict(zip(devices, (0.5, 0.25, 0.25), strict=True))
    processes = {devices[0]: [proc(11, "carol", 1 << 30)], devices[1]: [proc(12, "dan", 1 << 30)]}
    for k in range(6):
        ts = at(10 * k)
        fleet.sample(ts, gpu_uuid="GPU-M", gpu_util_pct=None, mig_enabled=True)
        for uuid, share in shares.items():
            fleet.sample(
                ts,
                gpu_uuid=uuid,
                gpu_util_pct=None,
                processes=processes.get(uuid, []),
                parent_gpu_uuid="GPU-M",
                mig_slice_fraction=share,
            )
        fleet.sample(ts, gpu_uuid="GPU-P", gpu_index=1, gpu_util_pct=50.0)
    return fleet


def _teams(fleet: Fleet) -> dict[str, float]:
    return {
        row["team"]: row["gpu_hours"]
        for row in fleet.rows("select team, gpu_hours from team_daily")
    }


def _holders(fleet: Fleet) -> dict[str, set[tuple[Any, ...]]]:
    held: dict[str, set[tuple[Any, ...]]] = {}
    for row in fleet.rows(
        'select gpu_uuid, job_id, "user", team, attributed_by from samples_attributed'
    ):
        held.setdefault(row["gpu_uuid"], set()).add(
            (row["job_id"], row["user"], row["team"], row["attributed_by"])
        )
    return held


def test_two_jobs_on_two_mig_devices_of_one_gpu_each_get_their_own_slice() -> None:
    fleet = _mig_gpu()
    # both rows give the GPU's index too, as an importer that knows it writes it
    fleet.allocation(
        job_id="pod-a", user="alice", team=None, start_ts=at(-30), end_ts=at(60), gpu_uuid="MIG-1"
    )
    fleet.allocation(
        job_id="pod-b", user="bob", team=None, start_ts=at(-20), end_ts=at(60), gpu_uuid="MIG-2"
    )
    fleet.build()

    assert _holders(fleet) == {
        "MIG-1": {("pod-a", "alice", "vision", "allocation")},  # not carol's process
        "MIG-2": {("pod-b", "bob", "nlp", "allocation")},
        "MIG-3": {(None, None, "(unallocated)", "none")},  # no job names it
        "GPU-M": {(None, None, "(unallocated)", "none")},  # its own row: no hours
        "GPU-P": {(None, None, "(unallocated)", "none")},
    }
    assert _teams(fleet) == pytest.approx(
        {"vision": 0.5 * MINUTE, "nlp": 0.25 * MINUTE, "(unallocated)": 1.25 * MINUTE}
    )
    # two physical GPUs' minute each: the GPU's own row and its devices never both count
    assert sum(_teams(fleet).values()) == pytest.approx(2 * MINUTE)
    jobs = {
        row["job_id"]: (row["gpus"], row["gpu_hours"], row["alloc_gpu_hours"])
        for row in fleet.rows("select job_id, gpus, gpu_hours, alloc_gpu_hours from job_efficiency")
    }
    # allocated: the row's 90 s (80 s) by the device's slice, as its samples count
    assert jobs == {
        "pod-a": (1, pytest.approx(0.5 * MINUTE), pytest.approx(0.5 * 90 / 3600)),
        "pod-b": (1, pytest.approx(0.25 * MINUTE), pytest.approx(0.25 * 80 / 3600)),
    }


def test_a_device_named_by_uuid_wins_over_its_gpu_named_by_uuid_then_by_index() -> None:
    """The most specific row holds a sample: its own device's, else (a MIG device) its GPU's
    by UUID, else its host and GPU index's; the latest start only among rows of one kind."""
    fleet = _mig_gpu()
    fleet.allocation(  # the whole GPU by index, the latest start of all
        job_id="slurm-1", user=None, team="physics", start_ts=at(-10), end_ts=None, gpu_index=0
    )
    fleet.allocation(  # the whole GPU by UUID: its devices that no row names
        job_id="pod-gpu",
        user=None,
        team="infra",
        start_ts=at(-100),
        end_ts=None,
        gpu_index=None,
        gpu_uuid="GPU-M",
    )
    fleet.allocation(  # one device; its GPU index (7) is not the sample's, and is ignored
        job_id="pod-a",
        user="alice",
        team=None,
        start_ts=at(-200),
        end_ts=None,
        gpu_index=7,
        gpu_uuid="MIG-1",
    )
    fleet.allocation(  # a plain GPU by UUID alone, index empty
        job_id="pod-p",
        user="bob",
        team=None,
        start_ts=at(-200),
        end_ts=None,
        gpu_index=None,
        gpu_uuid="GPU-P",
    )
    fleet.build()

    held = _holders(fleet)
    assert held["MIG-1"] == {("pod-a", "alice", "vision", "allocation")}
    assert held["MIG-2"] == held["MIG-3"] == {("pod-gpu", None, "infra", "allocation")}
    assert held["GPU-P"] == {("pod-p", "bob", "nlp", "allocation")}
    assert _teams(fleet) == pytest.approx(
        {"vision": 0.5 * MINUTE, "infra": 0.5 * MINUTE, "nlp": MINUTE, "(unallocated)": 0.0}
    )


def test_a_job_by_gpu_index_still_holds_every_device_of_its_gpu() -> None:
    """As before named allocations: a row of the GPU's index alone covers its devices, each
    by its slice, the GPU's own row none."""
    fleet = _mig_gpu()
    fleet.allocation(job_id="42", user="alice", team=None, start_ts=at(-10), end_ts=None)
    fleet.build()
    assert _teams(fleet) == pytest.approx({"vision": MINUTE, "(unallocated)": MINUTE})
    (job,) = fleet.rows("select gpus, gpu_hours, alloc_gpu_hours from job_efficiency")
    assert job == {
        "gpus": 1,
        "gpu_hours": pytest.approx(MINUTE),
        "alloc_gpu_hours": pytest.approx(60 / 3600),  # from -10 s to its last sample at 50 s
    }


def test_mig_devices_are_told_by_their_parent_gpu_not_by_their_uuid() -> None:
    """gpu_daily names each device's GPU; gpu_health_daily leaves the devices out, whatever
    their UUIDs look like."""
    fleet = _mig_gpu(devices=("GPU-M/1", "GPU-M/2", "dev-3"))
    fleet.build()
    parents = {
        row["gpu_uuid"]: row["parent_gpu_uuid"]
        for row in fleet.rows("select gpu_uuid, parent_gpu_uuid from gpu_daily")
    }
    assert parents == {
        "GPU-M": None,
        "GPU-M/1": "GPU-M",
        "GPU-M/2": "GPU-M",
        "dev-3": "GPU-M",
        "GPU-P": None,
    }
    health = fleet.rows("select gpu_uuid from gpu_health_daily order by gpu_uuid")
    assert [row["gpu_uuid"] for row in health] == ["GPU-M", "GPU-P"]


# --- the allocation file's gpu_uuid column, through ingest and build -----------------------


def _mig_rows(seconds: int) -> list[dict[str, Any]]:
    """GPU-a's own row and its two MIG devices' (3/7 and 4/7) at T0 + seconds, on h1."""
    own = {**sample(seconds, gpu="GPU-a", util=None), "mig_enabled": True}
    return [own] + [
        {
            **sample(seconds, gpu=uuid, util=None),
            "parent_gpu_uuid": "GPU-a",
            "mig_profile": profile,
            "mig_slice_fraction": slices / 7,
        }
        for uuid, profile, slices in (
            ("MIG-5a1e0c4d-3b2f-5d6e-8f90-112233445566", "3g.40gb", 3),
            ("MIG-77aa0c4d-3b2f-5d6e-8f90-112233445566", "4g.40gb", 4),
        )
    ]


def test_an_allocation_file_names_mig_devices_by_their_uuid(config: Config) -> None:
    rows = [row for k in range(6) for row in _mig_rows(10 * k)]
    write_samples(config.data_dir, "raw/samples/date=2026-11-16/host=h1/a.parquet", rows)
    start = (T0 - dt.timedelta(minutes=1)).isoformat()
    allocations = config.data_dir / "raw" / "allocations" / "pods.csv"
    allocations.parent.mkdir(parents=True)
    allocations.write_text(
        "job_id,user,team,host,gpu_index,gpu_uuid,start_ts,end_ts\n"
        f"ns/a,,vision,h1,,MIG-5a1e0c4d-3b2f-5d6e-8f90-112233445566,{start},\n"
        f"ns/b,,nlp,h1,0,MIG-77aa0c4d-3b2f-5d6e-8f90-112233445566,{start},\n",
        encoding="utf-8",
    )
    result = ingest(config)
    assert (result.allocations, result.quarantined) == (2, ())
    build(config)
    teams = dict(query(config, "select team, gpu_hours from team_daily"))
    assert teams == pytest.approx(
        {"vision": 3 / 7 * MINUTE, "nlp": 4 / 7 * MINUTE, "(unallocated)": 0.0}  # GPU-a's row
    )


def test_a_warehouse_of_an_earlier_release_takes_rows_without_a_gpu_index(
    tmp_path: Path,
) -> None:
    con = duckdb.connect(str(tmp_path / "old.duckdb"))
    con.execute(
        """
        create table allocations (
            job_id varchar, "user" varchar, team varchar, host varchar not null,
            gpu_index usmallint not null, start_ts timestamptz not null, end_ts timestamptz,
            source_file varchar not null, cluster varchar
        )
        """
    )
    ensure_raw_tables(con)
    con.execute(
        "insert into allocations (host, gpu_index, gpu_uuid, start_ts, source_file)"
        " values ('h1', null, 'MIG-1', now(), 'raw/allocations/a.csv')"
    )
    assert con.execute("select gpu_index, gpu_uuid from allocations").fetchall() == [
        (None, "MIG-1")
    ]


# --- pods on MIG devices (gpufleet import prometheus) --------------------------------------


def test_pods_on_two_mig_devices_of_one_gpu_are_two_rows_naming_the_devices(
    tmp_path: Path,
) -> None:
    """dcgm-exporter labels a MIG device's series with its GPU's UUID and its GPU instance:
    each pod's row names the device as the imported samples do (MIG-<GPU's UUID>/<GPU
    instance>), its file gains the gpu_uuid column, and ingest reads it back."""
    config = Config(data_dir=tmp_path / "data")
    step_s = config.prometheus.step_seconds
    t0 = 1_795_000_000

    def series(pod: str, instance: str | None) -> dict[str, Any]:
        labels = {"Hostname": "h1", "UUID": "GPU-a", "gpu": "0", "namespace": "ml", "pod": pod}
        return {
            "metric": labels | ({"GPU_I_ID": instance} if instance else {}),
            "values": [[t0 + step_s * k, "1"] for k in range(3)],
        }

    answers = [("pods", [series("a", "1"), series("b", "2")]), ("plain", [series("c", None)])]
    rows = pod_allocations(answers, config=config, namespaces=())
    assert {(row.job_id, row.gpu_index, row.gpu_uuid) for row in rows} == {
        ("ml/a", 0, "MIG-GPU-a/1"),
        ("ml/b", 0, "MIG-GPU-a/2"),
        ("ml/c", 0, None),  # a whole GPU: its index, as before
    }
    written = allocation_files(config.allocations_dir, "prom", rows)
    (path, text) = next(iter(written.items()))
    assert (
        text.splitlines()[0] == "job_id,user,team,host,gpu_index,start_ts,end_ts,cluster,gpu_uuid"
    )
    path.parent.mkdir(parents=True)
    path.write_text(text)
    read = read_allocations(path, "raw/allocations/x.csv")
    assert sorted((row.job_id, row.gpu_uuid) for row in read) == [
        ("ml/a", "MIG-GPU-a/1"),
        ("ml/b", "MIG-GPU-a/2"),
        ("ml/c", None),
    ]
    # a file without a MIG device's pod keeps the columns it always had
    plain = allocation_files(config.allocations_dir, "other", [r for r in rows if not r.gpu_uuid])
    assert all(",gpu_uuid" not in text for text in plain.values())
