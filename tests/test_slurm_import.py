"""`gpufleet import slurm` on saved sacct/squeue output: the JSON of each Slurm release
(tests/slurm_fixtures), the GRES details and host lists, teams from accounts, the allocation
files and job records it writes and updates, and its one-line errors. The same import
against a running Slurm: test_slurm_stack.py."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import re
import stat
from pathlib import Path

import duckdb
import pytest

from gpufleet.cli import main
from gpufleet.config import Config, IngestConfig, SlurmConfig, load_config
from gpufleet.errors import GpufleetError
from gpufleet.integrations.slurm import import_slurm
from gpufleet.integrations.slurm.accounts import Teams, read_accounts
from gpufleet.integrations.slurm.hostlist import expand_hostlist
from gpufleet.integrations.slurm.payload import Refused, load_payload
from gpufleet.integrations.slurm.sacct import SlurmJob, parse_sacct
from gpufleet.integrations.slurm.squeue import NodeGpus, gpu_indices, parse_squeue
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.refs.read import read_allocations
from tests.test_ingest import DAY1, sample, write_samples

FIXTURES = Path(__file__).parent / "slurm_fixtures"
RELEASES = ("22.05", "23.11", "24.11")
VERSIONS = {"22.05": 38, "23.11": 40, "24.11": 42}


def at(second: int) -> dt.datetime:
    """2026-11-27 07:54:<second> UTC, when the recorded jobs ran."""
    return dt.datetime(2026, 11, 27, 7, 54, second, tzinfo=dt.UTC)


def job(job_id: str, user: str, state: str, nodes: tuple[str, ...], gpus: int, **times):
    account = {"gf-alice": "vision", "gf-bob": "speech"}[user]
    return SlurmJob(
        job_id=job_id,
        job_id_raw=RAW_IDS.get(job_id, job_id),
        user=user,
        account=account,
        partition="gpu",
        cluster="gpufleet",
        state=state,
        start_ts=times.get("start", at(13)),
        end_ts=times.get("end"),
        nodes=nodes,
        gpus=gpus,
    )


# The recorded array tasks' own job ids (sacct's and squeue's job_id): 4_1 kept the array's
RAW_IDS = {"4_0": "6", "4_1": "4"}
N1, N2 = ("gpu-node01",), ("gpu-node02",)
EXPECTED_JOBS = [
    job("1", "gf-alice", "COMPLETED", N1, 2, end=at(14)),
    job("2", "gf-bob", "RUNNING", N1, 1),
    job("3", "gf-bob", "FAILED", N1, 1, end=at(13)),
    job("4_1", "gf-alice", "RUNNING", N2, 1),
    job("5", "gf-bob", "RUNNING", N1 + N2, 2, start=at(16)),
    job("4_0", "gf-alice", "RUNNING", N2, 1),
]
EXPECTED_GPUS = {
    "2": (NodeGpus("gpu-node01", (2,)),),
    "4_0": (NodeGpus("gpu-node02", (0,)),),
    "4_1": (NodeGpus("gpu-node02", (1,)),),
    "5": (NodeGpus("gpu-node01", (0,)), NodeGpus("gpu-node02", (2,))),
}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize("release", RELEASES)
def test_sacct_of_every_release_gives_the_same_jobs(release: str) -> None:
    payload = load_payload(fixture(f"sacct-{release}.json"), source="sacct")
    assert payload.version == VERSIONS[release]
    assert parse_sacct(payload) == EXPECTED_JOBS


@pytest.mark.parametrize("release", RELEASES)
def test_squeue_of_every_release_gives_the_same_gpu_indices(release: str) -> None:
    payload = load_payload(fixture(f"squeue-{release}.json"), source="squeue")
    held = parse_squeue(payload)
    assert {key: value.nodes for key, value in held.items()} == EXPECTED_GPUS
    assert held["5"].job.start_ts == at(16) and held["4_1"].job.user == "gf-alice"
    assert held["2"].job.account == "speech" and held["2"].job.end_ts is None
    assert {key: value.job.job_id_raw for key, value in held.items()} == {
        "2": "2",
        "4_0": "6",
        "4_1": "4",
        "5": "5",
    }


@pytest.mark.parametrize(
    ("detail", "indices", "mig"),
    [
        ("gpu:a100:2(IDX:0-1)", (0, 1), False),
        ("gpu:2(IDX:0,2-3)", (0, 2, 3), False),
        ("gpu:a100:1(IDX:3),gpu:v100:1(IDX:5)", (3, 5), False),
        ("gpu:h100:8(IDX:0-7),shard:h100:0(0/8,0/8)", tuple(range(8)), False),
        ("gpu:a100_3g.40gb:1(IDX:4)", (4,), True),
        ("gpu:1g.10gb:2(IDX:0-1)", (0, 1), True),
        ("gpu:a100(CNT:2)", (), False),
        ("mps:100(0/100,100/100)", (), False),
        ("", (), False),
    ],
)
def test_gres_detail(detail: str, indices: tuple[int, ...], mig: bool) -> None:
    assert gpu_indices(detail) == (indices, mig)


def test_host_lists() -> None:
    assert expand_hostlist("gpu-node[01-03,10]") == (
        "gpu-node01",
        "gpu-node02",
        "gpu-node03",
        "gpu-node10",
    )
    assert expand_hostlist("a1,r[1-2]n[8-9],login") == (
        "a1",
        "r1n8",
        "r1n9",
        "r2n8",
        "r2n9",
        "login",
    )
    with pytest.raises(GpufleetError, match=r"host list 'n\[a-b\]'"):
        expand_hostlist("n[a-b]")


def payload_with(release: str, edit) -> str:
    """The release's sacct fixture with `edit(data)` applied."""
    data = json.loads(fixture(f"sacct-{release}.json"))
    edit(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda d: d["meta"]["plugin"].update(data_parser="data_parser/v0.0.99"),
            r"^sacct: meta\.plugin\.data_parser: unknown schema 'data_parser/v0\.0\.99' \(read: ",
        ),
        (lambda d: d.pop("meta"), r"^sacct: meta\.plugin: missing"),
        (
            lambda d: d["jobs"][2]["time"].update(start="yesterday"),
            r"^sacct: jobs\[2\]\.time\.start: expected a number or \{\"set\", \"number\"\}, "
            r"got 'yesterday'$",
        ),
        (
            lambda d: d["jobs"][0]["state"].pop("current"),
            r"^sacct: jobs\[0\]\.state\.current: missing$",
        ),
        (
            lambda d: d["jobs"][1]["tres"].update(allocated="gres/gpu=1"),
            r"^sacct: jobs\[1\]\.tres\.allocated: expected a list of TRES$",
        ),
        (
            lambda d: d.update(errors=[{"description": "Unable to connect to database"}]),
            r"^sacct: Slurm reported an error: Unable to connect to database$",
        ),
    ],
)
def test_unknown_schemas_and_fields_are_one_line_naming_the_field(edit, message: str) -> None:
    with pytest.raises(GpufleetError, match=message):
        parse_sacct(load_payload(payload_with("24.11", edit), source="sacct"))


def test_openapi_22_05_meta_and_not_json() -> None:
    text = payload_with("22.05", lambda d: d["meta"]["plugin"].update(type="openapi/dbv0.0.37"))
    with pytest.raises(GpufleetError, match=r"meta\.plugin\.type: unknown schema 'openapi/dbv0"):
        load_payload(text, source="x")
    with pytest.raises(GpufleetError, match=r"^x: not JSON"):
        load_payload("sacct: error: Problem talking to the database", source="x")


def test_account_teams_with_valid_from(tmp_path: Path) -> None:
    path = tmp_path / "accounts.csv"
    path.write_text(
        "account,team,valid_from\nvision,cv-team,\nvision,perception,2026-11-27\nops,infra,\n"
    )
    teams = Teams(read_accounts(path), team_from="account", timezone="Europe/Berlin")
    # the local date in the configured zone decides: 23:30 UTC on the 26th is the 27th there
    assert teams.team("vision", dt.datetime(2026, 11, 26, 23, 30, tzinfo=dt.UTC)) == "perception"
    assert teams.team("vision", dt.datetime(2026, 11, 26, 22, 30, tzinfo=dt.UTC)) == "cv-team"
    assert teams.team("speech", at(13)) == "speech"  # not listed: the account is the team
    assert teams.team(None, at(13)) is None
    assert Teams(read_accounts(path), team_from="user").team("vision", at(13)) is None
    assert read_accounts(tmp_path / "missing.csv") == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("account,team,owner\n", r"line 1: unknown column 'owner'"),
        ("account\nvision\n", r"line 1: missing column 'team'"),
        ("account,team\nvision,\n", r"line 2: 'team' is empty"),
        ("account,team\nvision,a\n\nvision,b\n", r"line 4: account 'vision' is listed twice"),
        ("account,team,valid_from\nvision,a,27/11/2026\n", r"line 2: 'valid_from' is not a date"),
        ("account,team\nvision,a,b\n", r"line 2: expected 2 fields"),
    ],
)
def test_bad_accounts_csv(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "accounts.csv"
    path.write_text(text)
    with pytest.raises(GpufleetError, match=rf"^ref/accounts\.csv: {message}"):
        read_accounts(path, "ref/accounts.csv")


# --- the import itself, from saved output ------------------------------------------------

DAY_FILE = "raw/allocations/slurm-gpufleet-2026-11-27.csv"
JOB_FILE = "raw/jobs/slurm-gpufleet-2026-11-27.csv"


def rows(config: Config, name: str = DAY_FILE) -> list[dict[str, str]]:
    """The file's rows; a job file's without seen_ts (the import's clock: see
    test_a_running_jobs_record_says_when_an_import_last_saw_it)."""
    with open(config.data_dir / name, newline="") as handle:
        found = list(csv.DictReader(handle))
    for item in found:
        item.pop("seen_ts", None)
    return found


def record(job_id, user, state, gpus, hosts, start=13, end=None, team=None) -> dict[str, str]:
    """A job record as the importer writes it (the fixtures' cluster and partition)."""
    account = {"gf-alice": "vision", "gf-bob": "speech"}[user]
    return {
        "job_id": job_id,
        "job_id_raw": RAW_IDS.get(job_id, job_id),
        "cluster": "gpufleet",
        "user": user,
        "account": account,
        "partition": "gpu",
        "state": state,
        "team": account if team is None else team,
        "gpus": str(gpus),
        "hosts": hosts,
        "start_ts": at(start).isoformat(),
        "end_ts": at(end).isoformat() if end is not None else "",
    }


EXPECTED_RECORDS = [
    record("1", "gf-alice", "COMPLETED", 2, "gpu-node01", end=14),
    record("2", "gf-bob", "RUNNING", 1, "gpu-node01"),
    record("3", "gf-bob", "FAILED", 1, "gpu-node01", end=13),
    record("4_0", "gf-alice", "RUNNING", 1, "gpu-node02"),
    record("4_1", "gf-alice", "RUNNING", 1, "gpu-node02"),
    record("5", "gf-bob", "RUNNING", 2, "gpu-node01 gpu-node02", start=16),
]


def row(job_id, user, team, host, gpu, start=13, end=None) -> dict[str, str]:
    return {
        "job_id": job_id,
        "user": user,
        "team": team,
        "host": host,
        "gpu_index": str(gpu),
        "start_ts": at(start).isoformat(),
        "end_ts": at(end).isoformat() if end is not None else "",
        "cluster": "gpufleet",  # the fixtures' cluster
    }


def saved(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("release", RELEASES)
def test_import_from_saved_output_writes_a_row_per_gpu_of_each_running_job(
    config: Config, release: str
) -> None:
    warnings: list[str] = []
    result = import_slurm(
        config,
        sacct_json=FIXTURES / f"sacct-{release}.json",
        squeue_json=FIXTURES / f"squeue-{release}.json",
        warn=warnings.append,
    )
    assert rows(config) == [
        row("2", "gf-bob", "speech", "gpu-node01", 2),
        row("4_0", "gf-alice", "vision", "gpu-node02", 0),
        row("4_1", "gf-alice", "vision", "gpu-node02", 1),
        row("5", "gf-bob", "speech", "gpu-node01", 0, start=16),
        row("5", "gf-bob", "speech", "gpu-node02", 2, start=16),
    ]
    assert (result.jobs, result.gpu_jobs, result.rows_added, result.rows_closed) == (6, 6, 5, 0)
    assert result.unplaced == ("1", "3")  # began and ended before squeue saw them
    assert "2 GPU job(s) never seen running by squeue" in str(result)
    # every started GPU job has a record, placed or not (1 and 3 have no rows)
    assert rows(config, JOB_FILE) == EXPECTED_RECORDS
    assert (result.job_records, result.job_files) == (6, (config.data_dir / JOB_FILE,))
    assert "6 job records written, in 1 file(s)" in str(result)
    # no sample files at all: every node's GPU-hours come from allocations alone
    assert warnings == [
        "import slurm: 2 node(s) have Slurm jobs but no gpufleet samples: gpu-node[01-02]: "
        "their GPU-hours come from allocations alone"
    ]
    assert str(result).endswith("gpu-node[01-02]: their GPU-hours come from allocations alone")
    loaded = read_allocations(config.data_dir / DAY_FILE, DAY_FILE)  # as ingest reads it
    assert [(a.job_id, a.host, a.gpu_index, a.end_ts) for a in loaded][-1] == (
        "5",
        "gpu-node02",
        2,
        None,
    )
    assert not (config.data_dir / "imports").exists()  # saved output moves no watermark
    assert not [p for p in (config.data_dir / "raw/allocations").iterdir() if p.name[0] == "."]


def ended(release: str, job_ids: dict[int, int]) -> str:
    """The release's sacct output with jobs (by raw job id) ended at 07:54:<second>."""

    def edit(data) -> None:
        for item in data["jobs"]:
            if item["job_id"] in job_ids:
                item["time"]["end"] = int(at(job_ids[item["job_id"]]).timestamp())
                current = item["state"]["current"]
                item["state"]["current"] = (
                    ["COMPLETED"] if isinstance(current, list) else "COMPLETED"
                )

    return payload_with(release, edit)


def test_a_job_that_ended_has_its_rows_closed_and_nothing_is_added_twice(
    config: Config, tmp_path: Path
) -> None:
    squeue = FIXTURES / "squeue-24.11.json"
    # One `now` for every import: a running job's record carries when an import last saw
    # it (seen_ts), so an import a second later rightly rewrites the running ones' records.
    now = at(50)
    import_slurm(config, sacct_json=FIXTURES / "sacct-24.11.json", squeue_json=squeue, now=now)
    # job 2 and array task 4_0 (raw id 6) end; squeue's answer is the old one still
    later = saved(tmp_path, "later.json", ended("24.11", {2: 40, 6: 45}))
    result = import_slurm(config, sacct_json=later, squeue_json=squeue, now=now)
    assert (result.rows_added, result.rows_closed) == (0, 2)
    assert rows(config)[:2] == [
        row("2", "gf-bob", "speech", "gpu-node01", 2, end=40),
        row("4_0", "gf-alice", "vision", "gpu-node02", 0, end=45),
    ]
    # their records are updated in place: state and end
    assert result.job_records == 2
    assert rows(config, JOB_FILE) == [
        *EXPECTED_RECORDS[:1],
        record("2", "gf-bob", "COMPLETED", 1, "gpu-node01", end=40),
        *EXPECTED_RECORDS[2:3],
        record("4_0", "gf-alice", "COMPLETED", 1, "gpu-node02", end=45),
        *EXPECTED_RECORDS[4:],
    ]
    before = (config.data_dir / DAY_FILE).stat()
    job_file = (config.data_dir / JOB_FILE).stat()
    again = import_slurm(config, sacct_json=later, now=now)  # no squeue: the rows are known
    assert (again.rows_added, again.rows_closed, again.files) == (0, 0, ())
    assert (again.job_records, again.job_files) == (0, ())
    assert (config.data_dir / DAY_FILE).stat().st_mtime_ns == before.st_mtime_ns
    assert (config.data_dir / JOB_FILE).stat().st_mtime_ns == job_file.st_mtime_ns
    assert len(rows(config)) == 5
    # an older answer (the job still running) does not reopen an ended job's record
    import_slurm(config, sacct_json=FIXTURES / "sacct-24.11.json")
    assert rows(config, JOB_FILE)[1]["end_ts"] == at(40).isoformat()


def test_a_requeued_job_closes_its_earlier_run_and_opens_the_new_one(
    config: Config, tmp_path: Path
) -> None:
    import_slurm(
        config,
        sacct_json=FIXTURES / "sacct-24.11.json",
        squeue_json=FIXTURES / "squeue-24.11.json",
    )

    def requeued(data) -> None:  # job 2 ran from :13 to :20, and again from :30 on
        first = next(item for item in data["jobs"] if item["job_id"] == 2)
        again = json.loads(json.dumps(first))
        first["state"]["current"], first["time"]["end"] = ["REQUEUED"], int(at(20).timestamp())
        again["time"]["start"] = int(at(30).timestamp())
        data["jobs"].append(again)

    def moved(data) -> None:  # squeue: the new run holds GPU 3
        job = next(item for item in data["jobs"] if item["job_id"] == 2)
        job["start_time"]["number"] = int(at(30).timestamp())
        job["gres_detail"] = ["gpu:a100:1(IDX:3)"]

    sacct = saved(tmp_path, "sacct.json", payload_with("24.11", requeued))
    squeue_data = json.loads(fixture("squeue-24.11.json"))
    moved(squeue_data)
    squeue = saved(tmp_path, "squeue.json", json.dumps(squeue_data))
    result = import_slurm(config, sacct_json=sacct, squeue_json=squeue)
    assert (result.rows_added, result.rows_closed) == (1, 1)
    job_2 = [r for r in rows(config) if r["job_id"] == "2"]
    assert job_2 == [
        row("2", "gf-bob", "speech", "gpu-node01", 2, end=20),
        row("2", "gf-bob", "speech", "gpu-node01", 3, start=30),
    ]
    # one record per run: keyed by (job id, start)
    assert [r for r in rows(config, JOB_FILE) if r["job_id"] == "2"] == [
        record("2", "gf-bob", "REQUEUED", 1, "gpu-node01", end=20),
        record("2", "gf-bob", "RUNNING", 1, "gpu-node01", start=30),
    ]


def test_a_job_file_without_raw_ids_is_read_and_gains_them(config: Config) -> None:
    """A job file of a release before `job_id_raw` (and `seen_ts`): read as it is, and
    written with the columns (the raw ids of the jobs seen filled in) on the next import
    that changes it."""
    import_slurm(config, sacct_json=FIXTURES / "sacct-22.05.json")
    path = config.data_dir / JOB_FILE
    old = [
        ",".join(line.split(",")[:1] + line.split(",")[2:-1])
        for line in path.read_text().splitlines()
    ]
    assert old[0] == "job_id,cluster,user,account,partition,state,team,gpus,hosts,start_ts,end_ts"
    path.write_text("\n".join(old) + "\n")
    import_slurm(config, sacct_json=FIXTURES / "sacct-22.05.json")
    assert rows(config, JOB_FILE) == EXPECTED_RECORDS


def test_the_first_scheduled_run_imports_the_last_day(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    fake_command(bin_dir, "sacct", FIXTURES / "sacct-22.05.json", log)
    fake_command(bin_dir, "squeue", FIXTURES / "squeue-22.05.json", log)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    import_slurm(config, now=at(30), first_window=dt.timedelta(days=1))
    assert "--starttime=2026-11-26T07:54:30" in log.read_text()
    assert len(rows(config)) == 5


def test_teams_from_accounts_csv_or_from_users(config: Config) -> None:
    (config.ref_dir).mkdir(parents=True)
    (config.ref_dir / "accounts.csv").write_text("account,team\nspeech,audio\n")
    import_slurm(
        config,
        sacct_json=FIXTURES / "sacct-22.05.json",
        squeue_json=FIXTURES / "squeue-22.05.json",
    )
    assert {r["job_id"]: r["team"] for r in rows(config)} == {
        "2": "audio",
        "4_0": "vision",
        "4_1": "vision",
        "5": "audio",
    }
    by_user = Config(data_dir=config.data_dir / "other", slurm=SlurmConfig(team_from="user"))
    import_slurm(
        by_user,
        sacct_json=FIXTURES / "sacct-22.05.json",
        squeue_json=FIXTURES / "squeue-22.05.json",
    )
    assert {r["team"] for r in rows(by_user)} == {""}  # ingest maps the users
    assert {r["team"] for r in rows(by_user, JOB_FILE)} == {""}
    assert {r["job_id"]: r["team"] for r in rows(config, JOB_FILE)}["1"] == "vision"


def test_node_names_are_matched_to_collector_hosts(config: Config) -> None:
    samples = config.samples_dir / "date=2026-11-27"
    (samples / "host=gpu-node01.cluster.example").mkdir(parents=True)
    (samples / "host=login1").mkdir()
    warnings: list[str] = []
    result = import_slurm(
        config,
        sacct_json=FIXTURES / "sacct-22.05.json",
        squeue_json=FIXTURES / "squeue-22.05.json",
        now=at(30),
        warn=warnings.append,
    )
    assert {r["host"] for r in rows(config)} == {"gpu-node01.cluster.example", "gpu-node02"}
    assert {r["job_id"]: r["hosts"] for r in rows(config, JOB_FILE)}["5"] == (
        "gpu-node01.cluster.example gpu-node02"
    )
    assert result.unknown_nodes == ("gpu-node02",)
    assert warnings == [
        "import slurm: 1 node(s) have Slurm jobs but no gpufleet samples: gpu-node02: "
        "their GPU-hours come from allocations alone"
    ]


def test_a_failed_import_changes_nothing(config: Config, tmp_path: Path) -> None:
    bad = saved(
        tmp_path,
        "squeue.json",
        fixture("squeue-22.05.json").replace(
            '"gres_detail": [\n        "gpu:a100:1(IDX:2)"\n      ]',
            '"gres_detail": "gpu:a100:1(IDX:2)"',
        ),
    )
    with pytest.raises(
        GpufleetError, match=r"squeue\.json: jobs\[1\]\.gres_detail: expected a list"
    ):
        import_slurm(config, sacct_json=FIXTURES / "sacct-22.05.json", squeue_json=bad)
    assert not config.data_dir.exists()
    (config.ref_dir).mkdir(parents=True)
    (config.ref_dir / "accounts.csv").write_text("account,team\nvision\n")
    with pytest.raises(GpufleetError, match=r"accounts\.csv: line 2: expected 2 fields"):
        import_slurm(config, sacct_json=FIXTURES / "sacct-22.05.json")
    assert not (config.data_dir / "raw").exists()
    # a job file it cannot read stops it before any allocation file is written
    (config.ref_dir / "accounts.csv").unlink()
    (config.data_dir / "raw" / "jobs").mkdir(parents=True)
    (config.data_dir / JOB_FILE).write_text("job_id,user\n1,gf-alice\n")
    with pytest.raises(GpufleetError, match=r"slurm-gpufleet-2026-11-27\.csv: not a job file"):
        import_slurm(
            config,
            sacct_json=FIXTURES / "sacct-22.05.json",
            squeue_json=FIXTURES / "squeue-22.05.json",
        )
    assert not (config.data_dir / "raw" / "allocations").exists()


def with_time(release: str, index: int, field: str, value: object, *, wrapped: bool = False):
    """The release's sacct output with jobs[index].time.<field> set to `value` (wrapped as
    `{"set", "infinite", "number"}`, as newer releases print a number, when asked)."""

    def edit(data) -> None:
        number = {"set": True, "infinite": False, "number": value} if wrapped else value
        data["jobs"][index]["time"][field] = number

    return payload_with(release, edit)


START = int(at(13).timestamp())  # job 3's start (and end)


@pytest.mark.parametrize(
    ("release", "field", "value", "wrapped", "problem"),
    [
        ("22.05", "start", 10**30, False, r"10{30} \(past year 9999\) is more than 1440 minutes"),
        ("22.05", "start", 2**63, False, r"9223372036854775808 \(past year 9999\) is more than"),
        ("24.11", "start", 10**12, True, r"1000000000000 \(past year 9999\) is more than 1440 "),
        ("23.11", "start", 1e30, False, r"1e\+30 \(past year 9999\) is more than 1440 minutes"),
        ("22.05", "end", 1e30, False, r"1e\+30 \(past year 9999\) is more than 1440 minutes"),
        (
            "24.11",
            "start",
            -5,
            False,
            r"-5 \(1969-12-31T23:59:55Z\) is before 2015-01-01, \[ingest\] earliest",
        ),
        (
            "22.05",
            "start",
            START + 2 * 86400,  # 5138 and the like: any time more than a day ahead
            False,
            r"1795938853 \(2026-11-29T07:54:13Z\) is more than 1440 minutes after now "
            r"\(after 2026-11-28T07:54:30Z, \[ingest\] max_clock_skew_minutes\)",
        ),
        ("22.05", "end", 1420070399, False, r"1420070399 \(2014-12-31T23:59:59Z\) is before 2015"),
        (
            "24.11",
            "end",
            START - 60,
            True,
            r"2026-11-27T07:53:13Z is before time\.start \(2026-11-27T07:54:13Z\)",
        ),
    ],
)
def test_a_job_whose_time_cannot_be_right_is_refused_and_the_rest_imported(
    config: Config,
    tmp_path: Path,
    release: str,
    field: str,
    value: object,
    wrapped: bool,
    problem: str,
) -> None:
    """Job 3 (jobs[2]) with a time out of range, or an end before its start: named in one
    warning line with its field, counted in the summary, written nowhere; every other job is
    imported, and the ingest that follows loads everything."""
    sacct = saved(tmp_path, "sacct.json", with_time(release, 2, field, value, wrapped=wrapped))
    warnings: list[str] = []
    result = import_slurm(
        config,
        sacct_json=sacct,
        squeue_json=FIXTURES / f"squeue-{release}.json",
        now=at(30),
        warn=warnings.append,
    )
    assert result.refused == ("3",)
    (line,) = [w for w in warnings if "have Slurm jobs but no gpufleet samples" not in w]
    assert re.fullmatch(
        rf"import slurm: {re.escape(str(sacct))}: jobs\[2\]\.time\.{field}: {problem}.*: "
        r"job 3 not imported",
        line,
    ), line
    assert (
        "  1 job(s) refused, not imported (a time out of range or an end before its start): 3"
        in (str(result).splitlines())
    )
    assert rows(config, JOB_FILE) == [r for r in EXPECTED_RECORDS if r["job_id"] != "3"]
    assert (result.jobs, result.gpu_jobs, result.rows_added) == (5, 5, 5)
    # read alone (no list to put it in), the payload fails in that one line
    with pytest.raises(GpufleetError, match=r"jobs\[2\]\.time\..*: job 3 not imported$"):
        parse_sacct(load_payload(sacct.read_text(), source="sacct"), now=at(30))
    loaded = ingest(config, warn=warnings.append)
    assert (loaded.quarantined, loaded.slurm_jobs, loaded.allocations) == ((), 5, 5)


def test_a_running_job_whose_squeue_start_cannot_be_right_gets_no_gpus_from_it(
    config: Config, tmp_path: Path
) -> None:
    data = json.loads(fixture("squeue-24.11.json"))
    job_2 = next(item for item in data["jobs"] if item["job_id"] == 2)
    job_2["start_time"]["number"] = 10**12
    squeue = saved(tmp_path, "squeue.json", json.dumps(data))
    warnings: list[str] = []
    result = import_slurm(
        config,
        sacct_json=FIXTURES / "sacct-24.11.json",
        squeue_json=squeue,
        now=at(30),
        warn=warnings.append,
    )
    (line,) = [w for w in warnings if "have Slurm jobs but no gpufleet samples" not in w]
    assert line.startswith(f"import slurm: {squeue}: jobs[")
    assert line.endswith(
        "].start_time: 1000000000000 (past year 9999) is more than 1440 minutes after now (after "
        "2026-11-28T07:54:30Z, [ingest] max_clock_skew_minutes): job 2 left out of squeue's GPUs"
    )
    # sacct's record of job 2 stands (it is not refused); squeue gave it no GPUs
    assert result.refused == () and "2" in result.unplaced
    assert [r["job_id"] for r in rows(config)] == ["4_0", "4_1", "5", "5"]
    assert rows(config, JOB_FILE) == EXPECTED_RECORDS


def test_the_ingest_keys_bound_the_times_a_parsed_job_may_have() -> None:
    """`[ingest] earliest` and `max_clock_skew_minutes` bound a job's times as they bound a
    sample's: a later earliest refuses the jobs before it, no skew those after the clock."""
    sacct = load_payload(fixture("sacct-24.11.json"), source="sacct")
    squeue = load_payload(fixture("squeue-24.11.json"), source="squeue")
    assert parse_sacct(sacct, ingest=IngestConfig(earliest=at(0).date())) == EXPECTED_JOBS
    refused: list[Refused] = []
    later = IngestConfig(earliest=dt.date(2026, 11, 28))
    assert parse_sacct(sacct, ingest=later, refused=refused) == []
    assert [r.job_id for r in refused] == [j.job_id for j in EXPECTED_JOBS]
    assert re.fullmatch(
        r"sacct: jobs\[0\]\.time\.start: \d+ \(2026-11-27T07:54:13Z\) is before 2026-11-28, "
        r"\[ingest\] earliest: job 1 not imported",
        refused[0].line,
    ), refused[0].line
    refused = []
    no_skew = IngestConfig(max_clock_skew_minutes=0)  # job 5 starts at 07:54:16
    assert parse_sacct(sacct, now=at(16), ingest=no_skew, refused=refused) == EXPECTED_JOBS
    jobs = parse_sacct(sacct, now=at(15), ingest=no_skew, refused=refused)
    assert jobs == [j for j in EXPECTED_JOBS if j.job_id != "5"]
    assert set(parse_squeue(squeue, now=at(15), ingest=no_skew, refused=refused)) == {
        "2",
        "4_0",
        "4_1",
    }
    assert [r.job_id for r in refused] == ["5", "5"]
    assert refused[1].line.endswith(
        "].start_time: 1795766056 (2026-11-27T07:54:16Z) is more than 0 minutes after now "
        "(after 2026-11-27T07:54:15Z, [ingest] max_clock_skew_minutes): "
        "job 5 left out of squeue's GPUs"
    )


@pytest.mark.parametrize(
    ("ingest_keys", "refused", "lines", "problem"),
    [  # a line per refusal: sacct's, and squeue's of a running job
        (
            "earliest = 2026-11-28",
            ("1", "2", "3", "4_1", "5", "4_0"),
            6 + 4,
            "is before 2026-11-28",
        ),
        ("max_clock_skew_minutes = 0", ("5",), 1 + 1, "is more than 0 minutes after now"),
        ("earliest = 2026-11-27\nmax_clock_skew_minutes = 1", (), 0, ""),
    ],
)
def test_import_slurm_takes_a_jobs_time_limits_from_the_ingest_section(
    tmp_path: Path, ingest_keys: str, refused: tuple[str, ...], lines: int, problem: str
) -> None:
    """The Slurm import refuses a job by the configuration's `[ingest] earliest` and
    `max_clock_skew_minutes` (the sample ingest's), not by defaults of its own."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "gpufleet.toml").write_text(f"[ingest]\n{ingest_keys}\n", encoding="utf-8")
    config = load_config(data_dir=data, environ={})
    warnings: list[str] = []
    result = import_slurm(
        config,
        sacct_json=FIXTURES / "sacct-24.11.json",
        squeue_json=FIXTURES / "squeue-24.11.json",
        now=at(15),
        warn=warnings.append,
    )
    assert result.refused == refused
    assert result.job_records == len(EXPECTED_JOBS) - len(refused)
    refusals = [w for w in warnings if "have Slurm jobs but no gpufleet samples" not in w]
    assert len(refusals) == lines
    assert all(problem in line and "[ingest] " in line for line in refusals), refusals


def test_an_import_of_a_job_ending_before_its_start_leaves_ingest_working(
    config: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case, through the commands: `import slurm` exits 0 naming the job, and
    every later `gpufleet ingest` loads the samples and the other jobs."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    sacct = saved(tmp_path, "sacct.json", with_time("22.05", 0, "end", START - 3600))
    data_dir = ["--data-dir", str(config.data_dir)]
    assert main([*data_dir, "import", "slurm", "--sacct-json", str(sacct)]) == 0
    out, err = capsys.readouterr()
    assert "jobs[0].time.end: 2026-11-27T06:54:13Z is before time.start" in err
    assert "job 1 not imported" in err
    assert "1 job(s) refused" in out
    assert main([*data_dir, "ingest"]) == 0
    assert main([*data_dir, "ingest"]) == 0
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        assert con.execute("select count(*) from samples").fetchone() == (1,)
        assert con.execute("select count(*) from slurm_jobs").fetchone() == (5,)
        assert con.execute("select count(*) from quarantined_files").fetchone() == (0,)


def fake_command(folder: Path, name: str, output: Path, log: Path) -> None:
    """An executable `name` that logs its arguments and prints `output`."""
    script = folder / name
    script.write_text(f'#!/bin/sh\necho "$0 $*" >> {log}\ncat {output}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


SACCT = ("--json", "--allusers", "--allocations", "--duplicates")


def test_live_runs_ask_sacct_from_the_watermark(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    fake_command(bin_dir, "sacct", FIXTURES / "sacct-23.11.json", log)
    fake_command(bin_dir, "squeue", FIXTURES / "squeue-23.11.json", log)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(GpufleetError, match=r"^import slurm: the first run needs --since"):
        import_slurm(config, now=at(30))
    import_slurm(config, since=at(0) - dt.timedelta(days=1), now=at(30))
    import_slurm(config, now=at(50))
    calls = log.read_text().splitlines()
    assert [call.split()[1:] for call in calls] == [
        [*SACCT, "--starttime=2026-11-26T07:54:00", "--endtime=2026-11-27T07:54:30"],
        ["--json", "--all"],
        [*SACCT, "--starttime=2026-11-27T06:54:30", "--endtime=2026-11-27T07:54:50"],
        ["--json", "--all"],
    ]
    record = json.loads((config.data_dir / "imports" / "slurm.json").read_text())
    assert record == {"watermark": "2026-11-27T07:54:50+00:00"}
    assert len(rows(config)) == 5


def test_sacct_missing_or_failing_is_one_line(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GpufleetError, match=r"^sacct: not found on PATH .*--sacct-json FILE"):
        import_slurm(config, since=at(0))
    failing = tmp_path / "sacct"
    failing.write_text(
        "#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\nexit 1\n"
    )
    failing.chmod(0o755)
    with pytest.raises(
        GpufleetError, match=r"^sacct exited with status 1: sacct: error: Slurm accounting"
    ):
        import_slurm(config, since=at(0))
    assert not config.data_dir.exists()


def test_serve_imports_from_slurm_three_minutes_before_each_ingest(tmp_path: Path) -> None:
    from gpufleet.flows.serve import build_deployments

    names = [d.flow_name for d in build_deployments(Config(data_dir=tmp_path))]
    assert "import-slurm" not in names  # not unless enabled
    config = Config(data_dir=tmp_path, slurm=SlurmConfig(enabled=True))
    ingest, *_, slurm = build_deployments(config)
    assert (slurm.flow_name, slurm.name) == ("import-slurm", "every-15-minutes")
    assert slurm.entrypoint == "gpufleet.flows.import_slurm.import_slurm_flow"
    assert slurm.parameters == {"data_dir": str(tmp_path.resolve()), "config_path": None}
    (ours,) = slurm.schedules or []
    (theirs,) = ingest.schedules or []
    assert ours.schedule.interval == theirs.schedule.interval == dt.timedelta(minutes=15)
    assert theirs.schedule.anchor_date - ours.schedule.anchor_date == dt.timedelta(minutes=3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[slurm]\nteam_from = "partition"\n', r"line 2: 'slurm\.team_from' must be \"account\""),
        ("[slurm]\nenabled = 1\n", r"line 2: 'slurm\.enabled' must be true or false"),
        ('[slurm]\nsacct = "/opt/bin/sacct"\n', r"line 2: unknown key 'slurm\.sacct'"),
    ],
)
def test_bad_slurm_configuration(tmp_path: Path, text: str, message: str) -> None:
    from gpufleet.config import load_config

    (tmp_path / "gpufleet.toml").write_text(text)
    with pytest.raises(GpufleetError, match=message):
        load_config(data_dir=tmp_path, environ={})


def test_a_running_jobs_record_says_when_an_import_last_saw_it(config: Config) -> None:
    """seen_ts: the import's clock for a job seen running, moved on by each import while it
    runs; an ended job's stays as first written (its file is not rewritten for it)."""
    kwargs = {"sacct_json": FIXTURES / "sacct-22.05.json", "warn": lambda line: None}
    import_slurm(config, now=at(30), **kwargs)
    path = config.data_dir / JOB_FILE
    with open(path, newline="") as handle:
        first = {r["job_id"]: r["seen_ts"] for r in csv.DictReader(handle)}
    assert set(first.values()) == {at(30).isoformat()}
    import_slurm(config, now=at(50), **kwargs)
    with open(path, newline="") as handle:
        later = {r["job_id"]: (r["state"], r["seen_ts"]) for r in csv.DictReader(handle)}
    assert later["2"] == ("RUNNING", at(50).isoformat())
    assert later["1"] == ("COMPLETED", at(30).isoformat())


def test_a_slurm_cluster_is_recorded_as_the_site_that_names_it(tmp_path: Path) -> None:
    """[clusters.<site>] slurm_cluster: the jobs of Slurm's ClusterName 'gpufleet' (the
    fixtures') are the site 'hpc-east''s, in their rows, records and file names."""
    toml = tmp_path / "gpufleet.toml"
    toml.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[clusters.hpc-east]\nslurm_cluster = "gpufleet"\n'
    )
    config = load_config(config_path=toml)
    assert config.slurm_clusters == (("hpc-east", "gpufleet"),)
    import_slurm(
        config,
        sacct_json=FIXTURES / "sacct-22.05.json",
        squeue_json=FIXTURES / "squeue-22.05.json",
        warn=lambda line: None,
    )
    name = "slurm-hpc-east-2026-11-27.csv"
    allocations = rows(config, f"raw/allocations/{name}")
    records = rows(config, f"raw/jobs/{name}")
    assert {r["cluster"] for r in (*allocations, *records)} == {"hpc-east"}
    assert not (config.data_dir / DAY_FILE).exists()


@pytest.mark.parametrize(
    ("tables", "problem"),
    [
        ('[clusters.a]\nslurm_cluster = ""\n', r"'clusters\.a\.slurm_cluster' must be a Slurm "),
        ("[clusters.a]\nslurm_cluster = 3\n", r"'clusters\.a\.slurm_cluster' must be a Slurm "),
        (
            '[clusters.a]\nslurm_cluster = "x"\n[clusters.b]\nslurm_cluster = "x"\n',
            r"'clusters\.b\.slurm_cluster' is 'x', which is already clusters\.a's",
        ),
    ],
)
def test_a_bad_slurm_cluster_is_one_line_naming_the_file(
    tmp_path: Path, tables: str, problem: str
) -> None:
    toml = tmp_path / "gpufleet.toml"
    toml.write_text(tables)
    with pytest.raises(
        GpufleetError, match=rf"^{re.escape(str(toml))}: line \d+: {problem}"
    ) as info:
        load_config(config_path=toml)
    assert "\n" not in str(info.value)
