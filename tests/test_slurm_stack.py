"""`gpufleet import slurm` against a running Slurm 22.05 (the session's `slurm` fixture:
tests/slurm_stack.py): jobs of two users in two accounts, the real sacct and squeue, the
allocation rows and job records they become, and the attribution and `job_efficiency` of
collector samples written for the jobs' GPUs, against figures computed here."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
from dataclasses import replace
from typing import Any

import duckdb
import pytest

from gpufleet.cli import main
from gpufleet.config import Config
from gpufleet.integrations.slurm import import_slurm
from tests.notify_fixtures import write_samples
from tests.slurm_stack import ACCOUNTS, CLUSTER, SlurmStack, _nodes_idle

pytestmark = pytest.mark.slow


def sacct_states(slurm: SlurmStack) -> dict[str, tuple[str, int]]:
    """Each job's (state, end) as sacct reports it now, by the id Slurm prints."""
    text = slurm.command("sacct", "--json", "--allusers", "--allocations", "--starttime=now-1hour")
    found = {}
    for job in json.loads(text)["jobs"]:
        array = job["array"]
        job_id = f"{array['job_id']}_{array['task_id']}" if array["job_id"] else str(job["job_id"])
        found[job_id] = (job["state"]["current"], job["time"]["end"])
    return found


def sacct_records(slurm: SlurmStack) -> dict[str, dict[str, str]]:
    """Each job as sacct reports it now, in the job records' columns (teams left out)."""
    text = slurm.command("sacct", "--json", "--allusers", "--allocations", "--starttime=now-1hour")
    found = {}
    for job in json.loads(text)["jobs"]:
        array = job["array"]
        job_id = f"{array['job_id']}_{array['task_id']}" if array["job_id"] else str(job["job_id"])
        gpus = sum(
            t["count"]
            for t in job["tres"]["allocated"]
            if (t["type"], t["name"]) == ("gres", "gpu")
        )
        start, end = (job["time"][key] for key in ("start", "end"))
        found[job_id] = {
            "job_id": job_id,
            "job_id_raw": str(job["job_id"]),  # an array task's own number
            "cluster": job["cluster"],
            "user": job["user"],
            "account": job["account"],
            "partition": job["partition"],
            "state": job["state"]["current"],
            "gpus": str(gpus),
            "hosts": job["nodes"],  # one node each here: no host list to expand
            "start_ts": dt.datetime.fromtimestamp(start, dt.UTC).isoformat(),
            "end_ts": dt.datetime.fromtimestamp(end, dt.UTC).isoformat() if end else "",
        }
    return found


def job_records(config: Config) -> dict[str, dict[str, str]]:
    """Every job record the importer wrote, by job id."""
    found: dict[str, dict[str, str]] = {}
    for path in sorted((config.data_dir / "raw" / "jobs").glob("slurm-*.csv")):
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                assert row["job_id"] not in found, f"{row['job_id']} written twice"
                found[row["job_id"]] = row
    return found


def check_job_records(slurm: SlurmStack, config: Config, jobs: dict[str, str]) -> None:
    """The records of `jobs` (id -> team) are what sacct says of them, with their teams."""
    records = job_records(config)
    told = sacct_records(slurm)
    assert set(records) == set(jobs)
    for job_id, team in jobs.items():
        record = {name: value for name, value in records[job_id].items() if name != "seen_ts"}
        assert record == {**told[job_id], "team": team}, job_id


def gres_of(slurm: SlurmStack, job_id: str) -> set[tuple[str, int]]:
    """(node, GPU index) a running job holds, as `scontrol show job -d` prints them."""
    text = slurm.command("scontrol", "show", "job", "-d", job_id)
    held = set()
    for nodes, indices in re.findall(
        r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=\S*?\(IDX:([^)]*)\)", text
    ):
        for piece in indices.split(","):
            first, _, last = piece.partition("-")
            held.update((nodes, i) for i in range(int(first), int(last or first) + 1))
    return held


def allocation_rows(config: Config) -> dict[tuple[str, str, int], dict[str, str]]:
    """Every row the importer wrote, by (job id, host, GPU index)."""
    found = {}
    for path in sorted((config.data_dir / "raw" / "allocations").glob("slurm-*.csv")):
        with open(path, newline="") as handle:
            for row in csv.DictReader(handle):
                key = (row["job_id"], row["host"], int(row["gpu_index"]))
                assert key not in found, f"{key} written twice"
                found[key] = row
    return found


def test_import_from_a_running_slurm(
    slurm: SlurmStack, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    config.ref_dir.mkdir(parents=True)
    (config.ref_dir / "accounts.csv").write_text("account,team\nspeech,audio\n")
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)

    quick = slurm.submit("gf-alice", "true", gpus=2, node="gpu-node01")
    failing = slurm.submit("gf-bob", "exit 3", gpus=1, node="gpu-node01")
    quick_array = slurm.submit("gf-alice", "true", gpus=1, node="gpu-node01", array="0-1")
    quick_tasks = [f"{quick_array}_0", f"{quick_array}_1"]
    short = slurm.submit("gf-alice", "sleep 12", gpus=1, node="gpu-node02")
    idle = slurm.submit("gf-bob", "sleep 600", gpus=2, node="gpu-node01")  # GPUs, no process
    array = slurm.submit("gf-alice", "sleep 600", gpus=1, node="gpu-node02", array="0-1")
    tasks = [f"{array}_0", f"{array}_1"]

    def settled() -> bool:
        states = sacct_states(slurm)
        ended = (
            states.get(quick, ("", 0))[0] == "COMPLETED"
            and states.get(failing, ("",))[0] == "FAILED"
            and all(states.get(j, ("",))[0] == "COMPLETED" for j in quick_tasks)
        )
        running = [states.get(j, ("",))[0] for j in (short, idle, *tasks)]
        return ended and running == ["RUNNING"] * 4

    slurm.wait("the jobs to finish or run", settled)
    held = {job: gres_of(slurm, job) for job in (short, idle, *tasks)}

    first = import_slurm(config, since=since)
    rows = allocation_rows(config)
    expected = {
        (job, node, index): (user, team)
        for job, user, team in (
            (short, "gf-alice", "vision"),
            (idle, "gf-bob", "audio"),
            (tasks[0], "gf-alice", "vision"),
            (tasks[1], "gf-alice", "vision"),
        )
        for node, index in held[job]
    }
    assert {key: (r["user"], r["team"]) for key, r in rows.items()} == expected
    assert len(held[idle]) == 2 and all(len(held[j]) == 1 for j in (short, *tasks))
    assert all(r["end_ts"] == "" for r in rows.values())  # all still running
    # over before squeue could see them
    assert set(first.unplaced) == {quick, failing, *quick_tasks}
    # every started GPU job has a record, placed or not, as sacct tells it
    teams = {
        quick: "vision",
        failing: "audio",
        short: "vision",
        idle: "audio",  # GPUs but no process: the record attributes its gpustat evidence
        **dict.fromkeys(tasks, "vision"),
        **dict.fromkeys(quick_tasks, "vision"),
    }
    check_job_records(slurm, config, teams)
    assert first.job_records == 8
    states = {job_id: r["state"] for job_id, r in job_records(config).items()}
    assert (states[quick], states[failing], states[short]) == ("COMPLETED", "FAILED", "RUNNING")

    slurm.wait("the short job to end", lambda: sacct_states(slurm)[short][0] == "COMPLETED")
    end = dt.datetime.fromtimestamp(sacct_states(slurm)[short][1], dt.UTC)
    assert main(["--data-dir", str(config.data_dir), "import", "slurm"]) == 0  # from the watermark
    rows = allocation_rows(config)
    assert set(rows) == set(expected)  # closed, not added again
    for key, row in rows.items():
        assert row["end_ts"] == (end.isoformat() if key[0] == short else ""), key
    check_job_records(slurm, config, teams)  # the short job's record: COMPLETED, its end
    assert job_records(config)[short]["end_ts"] == end.isoformat()

    check_samples(
        config,
        sacct_records(slurm),
        teams,
        held,
        ended=(quick, *quick_tasks),
        running=(short, *tasks),
        idle=idle,
    )


# --- collector samples for those GPUs, ingested and built ---------------------------------

STEP_S = 10  # the collector's interval
TICKS = 6  # samples a running job's GPU gets: a minute
A100 = "NVIDIA A100-SXM4-80GB"
GIB = 1024**3


class Expected:
    """The samples written, and what each job's figures must be."""

    def __init__(self) -> None:
        self.samples: list[dict[str, Any]] = []
        self.attribution: dict[tuple[str, int, dt.datetime], tuple[str, str, str]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}

    def write(
        self,
        job_id: str,
        record: dict[str, str],
        team: str,
        gpus: set[tuple[str, int]],
        start: dt.datetime,
        ticks: int,
        util: float,
        *,
        process: bool = False,
        evidence: bool = False,
    ) -> None:
        """`ticks` samples of each GPU from `start` on, every STEP_S, attributed to the job:
        busy at `util`, with a process of the job (its raw id, from its cgroup) or the
        gpustat evidence (`alloc_job_id`: its raw id) or neither."""
        raw, user = record["job_id_raw"], record["user"]
        for host, index in sorted(gpus):
            for tick in range(1, ticks + 1):
                ts = start + dt.timedelta(seconds=STEP_S * tick)
                key = (host, index, ts)
                assert key not in self.attribution, key
                self.attribution[key] = (team, user, job_id)
                self.samples.append(
                    {
                        "ts": ts,
                        "interval_s": float(STEP_S),
                        "host": host,
                        "gpu_index": index,
                        "gpu_uuid": f"GPU-{host}-{index}",
                        "gpu_name": A100,
                        "status": "ok",
                        "gpu_util_pct": util,
                        "mem_used_bytes": GIB,
                        "mem_total_bytes": 80 * GIB,
                        "processes": (
                            [{"pid": 100, "user": user, "used_mem_bytes": GIB, "job_id": raw}]
                            if process
                            else []
                        ),
                        "alloc_job_id": raw if evidence else None,
                        "alloc_user": user if evidence else None,
                    }
                )
        seconds = len(gpus) * ticks * STEP_S
        self.jobs[job_id] = {
            "team": team,
            "user": user,
            "account": record["account"],
            "state": record["state"],
            "gpus": len(gpus),
            "gpu_hours": seconds / 3600,
            "busy_gpu_hours": util / 100 * seconds / 3600,
            "idle_gpu_hours": seconds / 3600 if util < 5 else 0.0,
            # no allocation rows: the hours of its samples the gpustat evidence attributes
            "alloc_gpu_hours": seconds / 3600,
        }


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def check_samples(
    config: Config,
    records: dict[str, dict[str, str]],
    teams: dict[str, str],
    held: dict[str, set[tuple[str, int]]],
    *,
    ended: tuple[str, ...],
    running: tuple[str, ...],
    idle: str,
) -> None:
    """Samples for the jobs' GPUs over their lives: the idle job's GPUs at 0 % with no
    process (its allocation rows attribute them), the running jobs busy (the short one
    with a process, the array tasks with gpustat evidence of their raw ids), and the jobs
    that ended before any squeue (so with no rows) with gpustat evidence on node01's GPUs
    the idle job does not hold; then ingest, build, and each sample's attribution and each
    job's `job_efficiency` row against what was written."""
    expected = Expected()
    start = {job_id: _time(records[job_id]["start_ts"]) for job_id in records}
    free = sorted({("gpu-node01", i) for i in range(4)} - held[idle])
    assert len(free) == 2
    quick, *quick_tasks = ended
    write = expected.write
    write(quick, records[quick], teams[quick], set(free), start[quick], 3, 30.0, evidence=True)
    after = start[quick] + dt.timedelta(seconds=3 * STEP_S)  # the quick job's last sample
    for gpu, task in zip(free, quick_tasks, strict=True):
        write(task, records[task], teams[task], {gpu}, after, 2, 40.0, evidence=True)
    write(idle, records[idle], teams[idle], held[idle], start[idle], TICKS, 0.0)
    expected.jobs[idle]["alloc_gpu_hours"] = 2 * TICKS * STEP_S / 3600  # open: to its last
    short, *tasks = running
    lived = _time(records[short]["end_ts"]) - start[short]
    ticks = int(lived.total_seconds()) // STEP_S
    write(short, records[short], teams[short], held[short], start[short], ticks, 80.0, process=True)
    expected.jobs[short]["alloc_gpu_hours"] = lived.total_seconds() / 3600  # its closed row
    for task in tasks:
        write(task, records[task], teams[task], held[task], start[task], TICKS, 50.0, evidence=True)
        expected.jobs[task]["alloc_gpu_hours"] = TICKS * STEP_S / 3600
    for job_id, record in records.items():
        if job_id in expected.jobs or job_id not in teams:
            continue
        # a job that ended before squeue saw it and has no samples: its record alone
        lived = _time(record["end_ts"]) - _time(record["start_ts"])
        expected.jobs[job_id] = {
            "team": teams[job_id],
            "user": record["user"],
            "account": record["account"],
            "state": record["state"],
            "gpus": int(record["gpus"]),
            "gpu_hours": 0.0,
            "busy_gpu_hours": 0.0,
            "idle_gpu_hours": 0.0,
            "alloc_gpu_hours": int(record["gpus"]) * lived.total_seconds() / 3600,
        }
    write_samples(config.data_dir, "slurm-stack", expected.samples)
    data = ["--data-dir", str(config.data_dir)]
    assert main([*data, "ingest"]) == 0
    assert main([*data, "build"]) == 0

    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        attributed = con.execute(
            'select host, gpu_index, ts, attributed_by, team, "user", job_id'
            " from samples_attributed"
        ).fetchall()
        measures = list(next(iter(expected.jobs.values())))
        quoted = ", ".join(f'"{name}"' for name in measures)
        found = con.execute(f"select job_id, {quoted} from job_efficiency").fetchall()
    jobs = {job_id: dict(zip(measures, rest, strict=True)) for job_id, *rest in found}
    assert {(h, i, ts): tuple(rest) for h, i, ts, *rest in attributed} == {
        key: ("allocation", *value) for key, value in expected.attribution.items()
    }
    # one row per job, under the id Slurm prints (never an array task's raw id)
    assert set(jobs) == set(expected.jobs)
    for job_id, figures in expected.jobs.items():
        for name, value in figures.items():
            assert jobs[job_id][name] == pytest.approx(value), (job_id, name)


# --- nodes without a collector ------------------------------------------------------------


def test_jobs_on_nodes_without_collectors_are_allocated_gres_times_elapsed(
    slurm: SlurmStack, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No gpufleet samples at all: a finished job and running jobs of 2 and 3 GPUs, their
    site named by `[clusters.<site>] slurm_cluster`; import, ingest and build, and each
    job's alloc_gpu_hours is its GPUs * its elapsed time (a running job's up to the import),
    in job_efficiency and summed in team_daily, and the import names the unmeasured nodes."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    for user in ACCOUNTS:  # GPUs the other tests' jobs still hold
        slurm.command("scancel", f"--user={user}")
    slurm.wait("the nodes to be idle", lambda: _nodes_idle(slurm), timeout_s=60)
    config = replace(config, slurm_clusters=(("east", CLUSTER),))
    config.ref_dir.mkdir(parents=True)
    (config.ref_dir / "accounts.csv").write_text("account,team\nspeech,audio\n")
    since = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)

    done = slurm.submit("gf-alice", "sleep 2", gpus=1, node="gpu-node01")
    two = slurm.submit("gf-bob", "sleep 600", gpus=2, node="gpu-node01")
    three = slurm.submit("gf-alice", "sleep 600", gpus=3, node="gpu-node02")

    def settled() -> bool:
        states = sacct_states(slurm)
        return states.get(done, ("",))[0] == "COMPLETED" and all(
            states.get(job, ("",))[0] == "RUNNING" for job in (two, three)
        )

    slurm.wait("the short job to end and the others to run", settled)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    warnings: list[str] = []
    result = import_slurm(config, since=since, now=now, warn=warnings.append)
    assert warnings == [
        "import slurm: 2 node(s) have Slurm jobs but no gpufleet samples: gpu-node[01-02]: "
        "their GPU-hours come from allocations alone"
    ]
    assert str(result).endswith("their GPU-hours come from allocations alone")
    data = ["--data-dir", str(config.data_dir)]
    assert main([*data, "ingest"]) == 0
    assert main([*data, "build"]) == 0

    told = sacct_records(slurm)
    start = {job: _time(told[job]["start_ts"]) for job in (done, two, three)}
    expected = {
        done: 1 * (_time(told[done]["end_ts"]) - start[done]).total_seconds() / 3600,
        two: 2 * (now - start[two]).total_seconds() / 3600,  # running: up to the import
        three: 3 * (now - start[three]).total_seconds() / 3600,
    }
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        found = con.execute(
            'select job_id, cluster, team, "user", gpus, gpu_hours, alloc_gpu_hours'
            " from job_efficiency"
        ).fetchall()
        allocated_by_teams = con.execute(
            "select sum(alloc_only_gpu_hours), sum(alloc_gpu_hours) from team_daily"
            " where cluster = 'east'"
        ).fetchone()
        hosts = {row[0] for row in con.execute("select host from alloc_only_daily").fetchall()}
    # the other tests' jobs, cancelled just now, are in the window too: all of them here
    jobs = {job_id: rest for job_id, *rest in found}
    assert set(expected) <= set(jobs)
    assert jobs[two][:5] == ["east", "audio", "gf-bob", 2, 0.0]
    assert jobs[three][:5] == ["east", "vision", "gf-alice", 3, 0.0]
    for job_id, hours in expected.items():
        assert jobs[job_id][5] == pytest.approx(hours, abs=1 / 3600), job_id
    # every job's allocated hours are team_daily's, once: none measured
    every_job = sum(rest[5] for rest in jobs.values() if rest[0] == "east")
    assert allocated_by_teams == (pytest.approx(every_job), pytest.approx(every_job))
    assert hosts == {"gpu-node01", "gpu-node02"}
    for user in ACCOUNTS:
        slurm.command("scancel", f"--user={user}")
