"""docs/reference.md#attribution (rule 1b, the Slurm team) and #job-efficiency: the job a
sample's gpustat evidence names, the account team of a Slurm job, and `job_efficiency`
against figures computed by hand."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.test_models_fixtures import H100, SLURM_JOB_COLUMNS, Fleet, at, proc

pytestmark = pytest.mark.fleet

ATTRIBUTION = (
    'select attributed_by, team, "user", job_id from samples_attributed '
    "where gpu_uuid = ? and ts = ?"
)
GIB = 1024**3


def sample(
    fleet: Fleet,
    ts: dt.datetime,
    *,
    alloc: tuple[str, str | None] | None = None,
    mem: tuple[int, int] | None = None,
    **columns: Any,
) -> None:
    """A sample, with the job holding the GPU by the scheduler's record (`alloc`: job id,
    user) and the memory in use and in all (`mem`)."""
    fleet.sample(ts, **columns)
    job_id, user = alloc if alloc else (None, None)
    used, total = mem if mem else (None, None)
    fleet.con.execute(
        """
        update samples_stored
        set alloc_job_id = ?, alloc_user = ?, mem_used_bytes = ?, mem_total_bytes = ?
        where gpu_uuid = ? and ts = ?
        """,
        [job_id, user, used, total, columns.get("gpu_uuid", "GPU-A"), ts],
    )


def slurm_job(
    fleet: Fleet,
    job_id: str,
    *,
    job_id_raw: str | None = None,
    start_ts: dt.datetime,
    end_ts: dt.datetime | None = None,
    user: str | None = "alice",
    account: str | None = "acct",
    team: str | None = None,
    state: str = "COMPLETED",
    gpus: int = 1,
    hosts: tuple[str, ...] = ("node1",),
    seen_ts: dt.datetime | None = None,
    cluster: str | None = "c1",
) -> None:
    fleet.con.execute(
        f"insert into slurm_jobs {SLURM_JOB_COLUMNS[:-1]}, seen_ts) values "
        "(?, ?, ?, ?, ?, 'gpu', ?, ?, ?, ?, ?, ?, 'raw/jobs/x.csv', ?)",
        [
            job_id, job_id_raw, cluster, user, account, state, team, gpus, list(hosts),
            start_ts, end_ts, seen_ts,
        ],
    )  # fmt: skip


def attribution(fleet: Fleet, gpu_uuid: str, seconds: float) -> tuple:
    row = fleet.one(ATTRIBUTION, [gpu_uuid, at(seconds)])
    return (row["attributed_by"], row["team"], row["user"], row["job_id"])


def test_gpustat_job_takes_its_slurm_team_else_users_csv_else_unmapped() -> None:
    """Rule 1b: an allocated GPU with no process (or with one) is its job's."""
    fleet = Fleet()
    fleet.user("bob", "nlp")
    fleet.user("alice", "vision")
    fleet.host_rule(1, "*", "infra")
    slurm_job(fleet, "J1", start_ts=at(0), user="alice", team="physics")
    slurm_job(fleet, "J4", start_ts=at(0), user="bob", team=None)  # team_from = "user"
    sample(fleet, at(10), gpu_uuid="GPU-0", gpu_index=0, alloc=("J1", "alice"))
    sample(fleet, at(10), gpu_uuid="GPU-1", gpu_index=1, alloc=("J2", "bob"))
    sample(fleet, at(10), gpu_uuid="GPU-2", gpu_index=2, alloc=("J3", "zed"))
    sample(fleet, at(10), gpu_uuid="GPU-3", gpu_index=3, alloc=("J4", "bob"))
    # the scheduler's record beats a process on the GPU
    sample(
        fleet,
        at(10),
        gpu_uuid="GPU-4",
        gpu_index=4,
        alloc=("J1", "alice"),
        processes=[proc(7, "bob", 100, "P7")],
    )
    sample(fleet, at(10), gpu_uuid="GPU-5", gpu_index=5, alloc=("J5", None))
    fleet.build()
    assert attribution(fleet, "GPU-0", 10) == ("allocation", "physics", "alice", "J1")
    assert attribution(fleet, "GPU-1", 10) == ("allocation", "nlp", "bob", "J2")
    assert attribution(fleet, "GPU-2", 10) == ("allocation", "(unmapped)", "zed", "J3")
    assert attribution(fleet, "GPU-3", 10) == ("allocation", "nlp", "bob", "J4")
    assert attribution(fleet, "GPU-4", 10) == ("allocation", "physics", "alice", "J1")
    assert attribution(fleet, "GPU-5", 10) == ("allocation", "(unmapped)", None, "J5")


def test_allocation_row_beats_the_gpustat_job() -> None:
    fleet = Fleet()
    fleet.allocation(job_id="A1", user="carol", team="ml", start_ts=at(0), end_ts=at(100))
    slurm_job(fleet, "J1", start_ts=at(0), team="physics")
    for seconds in (50, 150):
        sample(fleet, at(seconds), alloc=("J1", "alice"))
    fleet.build()
    assert attribution(fleet, "GPU-A", 50) == ("allocation", "ml", "carol", "A1")
    assert attribution(fleet, "GPU-A", 150) == ("allocation", "physics", "alice", "J1")


def test_process_of_a_slurm_job_takes_the_account_team() -> None:
    fleet = Fleet()
    fleet.user("carol", "vision")
    slurm_job(fleet, "P1", start_ts=at(0), user="carol", team="chem")
    slurm_job(fleet, "P3", start_ts=at(0), user="carol", team=None)
    sample(fleet, at(10), gpu_uuid="GPU-0", processes=[proc(1, "carol", 10, "P1")])
    sample(fleet, at(10), gpu_uuid="GPU-1", processes=[proc(2, "carol", 10, "P2")])
    sample(fleet, at(10), gpu_uuid="GPU-2", processes=[proc(3, "carol", 10, "P3")])
    sample(fleet, at(10), gpu_uuid="GPU-3", processes=[proc(4, "carol", 10)])
    fleet.build()
    assert attribution(fleet, "GPU-0", 10) == ("process", "chem", "carol", "P1")
    assert attribution(fleet, "GPU-1", 10) == ("process", "vision", "carol", "P2")
    assert attribution(fleet, "GPU-2", 10) == ("process", "vision", "carol", "P3")
    assert attribution(fleet, "GPU-3", 10) == ("process", "vision", "carol", None)


def test_requeued_job_takes_the_team_of_its_latest_start_at_or_before_the_sample() -> None:
    fleet = Fleet()
    slurm_job(fleet, "R", start_ts=at(100), end_ts=at(200), team="first")
    slurm_job(fleet, "R", start_ts=at(300), team="second")
    for seconds in (50, 150, 300, 350):
        sample(fleet, at(seconds), alloc=("R", "alice"))
    fleet.build()
    teams = [attribution(fleet, "GPU-A", s)[1] for s in (50, 150, 300, 350)]
    assert teams == ["first", "first", "second", "second"]


def test_an_array_tasks_raw_id_in_a_sample_is_the_task_as_slurm_prints_it() -> None:
    """An array task's or a heterogeneous component's samples name its own SLURM_JOB_ID
    (gpustat files, a process's cgroup): they are the job Slurm prints, with its team."""
    fleet = Fleet()
    fleet.user("alice", "ml")
    slurm_job(fleet, "4242_7", job_id_raw="4250", start_ts=at(0), account="cv", team="vision")
    slurm_job(fleet, "5000+1", job_id_raw="5001", start_ts=at(0), user="bob", team="speech")
    slurm_job(fleet, "4242", job_id_raw="4242", start_ts=at(0), team="plain")  # its own id
    # a raw id that is another job's printed id stays that job (here 4242)
    slurm_job(fleet, "4100_1", job_id_raw="4242", start_ts=at(0), team="other")
    # a raw id used again later (another cluster's, or after the ids wrapped): by start
    slurm_job(fleet, "100_1", job_id_raw="150", start_ts=at(0), end_ts=at(100), team="early")
    slurm_job(fleet, "200_3", job_id_raw="150", start_ts=at(300), team="late")
    sample(fleet, at(10), gpu_uuid="GPU-0", gpu_index=0, gpu_util_pct=0.0, alloc=("4250", "alice"))
    sample(fleet, at(20), gpu_uuid="GPU-0", gpu_index=0, gpu_util_pct=0.0, alloc=("4250", "alice"))
    sample(
        fleet,
        at(10),
        gpu_uuid="GPU-1",
        gpu_index=1,
        gpu_util_pct=90.0,
        processes=[proc(1, "alice", 10, "4250")],
    )
    sample(fleet, at(10), gpu_uuid="GPU-2", processes=[proc(2, "bob", 10, "5001")])
    sample(fleet, at(10), gpu_uuid="GPU-3", alloc=("4242", "alice"))
    sample(fleet, at(50), gpu_uuid="GPU-4", alloc=("150", "alice"))
    sample(fleet, at(350), gpu_uuid="GPU-4", alloc=("150", "alice"))
    fleet.build()
    assert attribution(fleet, "GPU-0", 10) == ("allocation", "vision", "alice", "4242_7")
    assert attribution(fleet, "GPU-1", 10) == ("process", "vision", "alice", "4242_7")
    assert attribution(fleet, "GPU-2", 10) == ("process", "speech", "bob", "5000+1")
    assert attribution(fleet, "GPU-3", 10) == ("allocation", "plain", "alice", "4242")
    assert attribution(fleet, "GPU-4", 50) == ("allocation", "early", "alice", "100_1")
    assert attribution(fleet, "GPU-4", 350) == ("allocation", "late", "alice", "200_3")
    task = job(fleet, "4242_7")
    assert (task["team"], task["user"], task["account"], task["state"], task["gpus"]) == (
        "vision", "alice", "cv", "COMPLETED", 2,
    )  # fmt: skip
    assert task["gpu_hours"] == pytest.approx(30 / 3600)
    assert task["busy_gpu_hours"] == pytest.approx(0.9 * 10 / 3600)
    assert task["idle_gpu_hours"] == pytest.approx(20 / 3600)
    assert task["alloc_gpu_hours"] == pytest.approx(20 / 3600)  # its gpustat samples
    names = {row["job_id"] for row in fleet.rows("select job_id from job_efficiency")}
    # 4100_1 has no samples: a job by its Slurm record alone (GPUs allocated, none measured)
    assert names == {"4242_7", "5000+1", "4242", "100_1", "200_3", "4100_1"}


@pytest.fixture(scope="module")
def jobs() -> Fleet:
    """Five jobs on one host, 10 s samples, price $3.60 per GPU-hour, idle below 5 %,
    waste from 2 minutes:

    - A (allocation row, ended at 600): GPU-A idle 10..300 (30 samples, waste), busy at
      80 % 310..600 (30 samples); 100 W; memory 10 GiB, then 30 GiB at 600; 80 GiB GPU.
    - B (gpustat only, RUNNING in sacct, account team physics): GPU-B busy at 50 % 10..200
      (20 samples), idle 210..260 (6 samples, 60 s: no waste); no power.
    - C (a process's job, not in sacct): GPU-C at 20 %, 10..100 (10 samples), user dave.
    - D (open allocation row from 0 on GPU-D, and another on GPU-E without samples):
      GPU-D idle 10..300 (30 samples, waste), 200 W.
    - E (allocation row on node9, no samples, 1000..4600).
    """
    fleet = Fleet(threshold_pct=5.0, min_minutes=2.0)
    fleet.price_rule(1, "*", 3.6)
    fleet.user("dave", "ml")
    fleet.allocation(job_id="A", user="alice", team="ml", start_ts=at(0), end_ts=at(600))
    fleet.allocation(job_id="D", user="erin", team="ops", start_ts=at(0), end_ts=None, gpu_index=3)
    fleet.allocation(job_id="D", user="erin", team="ops", start_ts=at(0), end_ts=None, gpu_index=4)
    fleet.allocation(
        job_id="E",
        user="frank",
        team=None,
        start_ts=at(1000),
        end_ts=at(4600),
        host="node9",
    )
    slurm_job(
        fleet,
        "B",
        start_ts=at(5),
        user="bob",
        account="phys",
        team="physics",
        state="RUNNING",
        hosts=("node1",),
    )
    for k in range(1, 61):
        util = 0.0 if k <= 30 else 80.0
        used = 10 * GIB if k < 60 else 30 * GIB
        sample(fleet, at(10 * k), gpu_util_pct=util, power_w=100.0, mem=(used, 80 * GIB))
    for k in range(1, 27):
        util = 50.0 if k <= 20 else 1.0
        sample(
            fleet,
            at(10 * k),
            gpu_uuid="GPU-B",
            gpu_index=1,
            gpu_util_pct=util,
            alloc=("B", "bob"),
            mem=(5 * GIB, 40 * GIB),
        )
    for k in range(1, 11):
        sample(
            fleet,
            at(10 * k),
            gpu_uuid="GPU-C",
            gpu_index=2,
            gpu_util_pct=20.0,
            processes=[proc(5, "dave", 100, "C")],
        )
    for k in range(1, 31):
        sample(fleet, at(10 * k), gpu_uuid="GPU-D", gpu_index=3, gpu_util_pct=1.0, power_w=200.0)
    fleet.build()
    return fleet


def job(fleet: Fleet, job_id: str) -> dict[str, Any]:
    return fleet.one("select * from job_efficiency where job_id = ?", [job_id])


def test_job_efficiency_columns_in_order(jobs: Fleet) -> None:
    columns = [row[0] for row in jobs.con.execute("describe job_efficiency").fetchall()]
    assert columns == [
        "job_id", "gpu_name", "cluster", "user", "team", "account", "partition", "state",
        "start_ts", "end_ts", "gpus", "alloc_gpu_hours", "gpu_hours", "busy_gpu_hours",
        "avg_util_pct", "idle_gpu_hours", "waste_gpu_hours", "waste_usd",
        "max_mem_used_bytes", "mem_total_bytes", "energy_kwh", "activity_gpu_hours",
        "sm_active_gpu_hours", "avg_sm_active_pct", "avg_tensor_active_pct",
        "avg_dram_active_pct",
    ]  # fmt: skip
    kinds = jobs.rows(
        "select table_type from information_schema.tables where table_name = 'job_efficiency'"
    )
    assert kinds == [{"table_type": "VIEW"}]


def test_an_allocated_job_by_hand(jobs: Fleet) -> None:
    a = job(jobs, "A")
    assert (a["gpu_name"], a["user"], a["team"], a["cluster"], a["state"]) == (
        H100, "alice", "ml", None, None,
    )  # fmt: skip
    assert (a["start_ts"], a["end_ts"], a["gpus"]) == (at(0), at(600), 1)
    assert a["alloc_gpu_hours"] == pytest.approx(600 / 3600)
    assert a["gpu_hours"] == pytest.approx(600 / 3600)
    assert a["busy_gpu_hours"] == pytest.approx(0.8 * 300 / 3600)
    assert a["avg_util_pct"] == pytest.approx(40.0)
    assert a["idle_gpu_hours"] == pytest.approx(300 / 3600)
    assert a["waste_gpu_hours"] == pytest.approx(300 / 3600)
    assert a["waste_usd"] == pytest.approx(300 / 3600 * 3.6)
    assert (a["max_mem_used_bytes"], a["mem_total_bytes"]) == (30 * GIB, 80 * GIB)
    assert a["energy_kwh"] == pytest.approx(60 * 100 * 10 / 3.6e6)


def test_a_gpustat_job_of_sacct_by_hand(jobs: Fleet) -> None:
    b = job(jobs, "B")
    assert (b["user"], b["team"], b["account"], b["partition"], b["state"], b["cluster"]) == (
        "bob", "physics", "phys", "gpu", "RUNNING", "c1",
    )  # fmt: skip
    assert (b["start_ts"], b["end_ts"], b["gpus"]) == (at(5), None, 1)
    # no allocation rows: the hours of its samples attributed by the scheduler's record
    assert b["alloc_gpu_hours"] == pytest.approx(260 / 3600)
    assert b["gpu_hours"] == pytest.approx(260 / 3600)
    assert b["busy_gpu_hours"] == pytest.approx((0.5 * 200 + 0.01 * 60) / 3600)
    assert b["idle_gpu_hours"] == pytest.approx(60 / 3600)
    assert (b["waste_gpu_hours"], b["waste_usd"]) == (0.0, 0.0)  # 60 s < 2 minutes
    assert (b["max_mem_used_bytes"], b["mem_total_bytes"]) == (5 * GIB, 40 * GIB)
    assert b["energy_kwh"] is None


def test_a_process_job_and_jobs_with_open_or_no_samples_by_hand(jobs: Fleet) -> None:
    c = job(jobs, "C")
    assert (c["user"], c["team"], c["account"], c["alloc_gpu_hours"], c["gpus"]) == (
        "dave", "ml", None, None, 1,
    )  # fmt: skip
    assert (c["start_ts"], c["end_ts"]) == (at(10), at(100))
    assert c["avg_util_pct"] == pytest.approx(20.0)
    assert c["max_mem_used_bytes"] is None
    d = job(jobs, "D")
    # two GPUs allocated, open: each counts up to the job's last sample (300 s)
    assert (d["gpus"], d["end_ts"], d["team"], d["user"]) == (2, None, "ops", "erin")
    assert d["alloc_gpu_hours"] == pytest.approx(2 * 300 / 3600)
    assert d["gpu_hours"] == pytest.approx(300 / 3600)
    assert d["waste_usd"] == pytest.approx(300 / 3600 * 3.6)
    assert d["energy_kwh"] == pytest.approx(30 * 200 * 10 / 3.6e6)
    e = job(jobs, "E")
    assert (e["gpu_name"], e["gpu_hours"], e["gpus"], e["team"], e["user"]) == (
        None, 0.0, 1, "(unmapped)", "frank",
    )  # fmt: skip
    assert e["alloc_gpu_hours"] == pytest.approx(1.0)
    assert (e["start_ts"], e["end_ts"]) == (at(1000), at(4600))


def test_jobs_add_up_to_team_daily(jobs: Fleet) -> None:
    """Every sample here has a job: summed per team, the jobs are team_daily."""
    measures = (
        "gpu_hours", "busy_gpu_hours", "idle_gpu_hours", "waste_gpu_hours", "waste_usd",
        "energy_kwh",
    )  # fmt: skip
    sums = ", ".join(f"sum({m}) as {m}" for m in measures)
    by_jobs = jobs.rows(f"select team, {sums} from job_efficiency group by team order by team")
    by_days = jobs.rows(f"select team, {sums} from team_daily group by team order by team")
    by_jobs = [row for row in by_jobs if row["gpu_hours"]]  # E has no samples
    by_days = [row for row in by_days if row["gpu_hours"]]  # E's allocated-only hours
    assert [row["team"] for row in by_jobs] == [row["team"] for row in by_days]
    for got, expected in zip(by_jobs, by_days, strict=True):
        for measure in measures:
            assert got[measure] == pytest.approx(expected[measure]), (got["team"], measure)
