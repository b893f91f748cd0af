"""`gpufleet import slurm` against a running Slurm 22.05 (the session's `slurm` fixture:
tests/slurm_stack.py): jobs of two users in two accounts, the real sacct and squeue, and
the allocation rows and job records they become."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re

import pytest

from gpufleet.cli import main
from gpufleet.config import Config
from gpufleet.integrations.slurm import import_slurm
from tests.slurm_stack import SlurmStack

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
        assert records[job_id] == {**told[job_id], "team": team}, job_id


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
    short = slurm.submit("gf-alice", "sleep 12", gpus=1, node="gpu-node02")
    idle = slurm.submit("gf-bob", "sleep 600", gpus=2, node="gpu-node01")  # GPUs, no process
    array = slurm.submit("gf-alice", "sleep 600", gpus=1, node="gpu-node02", array="0-1")
    tasks = [f"{array}_0", f"{array}_1"]

    def settled() -> bool:
        states = sacct_states(slurm)
        ended = (
            states.get(quick, ("", 0))[0] == "COMPLETED"
            and states.get(failing, ("",))[0] == "FAILED"
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
    assert set(first.unplaced) == {quick, failing}  # over before squeue could see them
    # every started GPU job has a record, placed or not, as sacct tells it
    teams = {
        quick: "vision",
        failing: "audio",
        short: "vision",
        idle: "audio",  # GPUs but no process: the record attributes its gpustat evidence
        **dict.fromkeys(tasks, "vision"),
    }
    check_job_records(slurm, config, teams)
    assert first.job_records == 6
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
