"""`gpufleet simulate`: layout, schema, sort order, each simulated phenomenon, and the Slurm
side (allocation files, or saved sacct/squeue JSON and the samples' gpustat evidence)."""

from __future__ import annotations

import csv
import datetime as dt
import fnmatch
import json
import re
import threading
from dataclasses import replace
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from gpufleet.cli import main
from gpufleet.collectors.schema import SAMPLE_SCHEMA, THERMAL_MASK, file_metadata
from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.integrations.slurm import import_slurm
from gpufleet.integrations.slurm.payload import load_payload
from gpufleet.integrations.slurm.sacct import parse_sacct
from gpufleet.integrations.slurm.squeue import parse_squeue
from gpufleet.simulate.fleet import (
    SimulationSpec,
    scenario_for,
    simulate_fleet,
    simulate_next_flush,
    simulate_window,
)
from gpufleet.simulate.jobs import overlaps_span
from gpufleet.simulate.layout import gpu_roles, host_kinds
from gpufleet.simulate.reference import write_reference_files
from gpufleet.simulate.slurm import gpu_ranges, state
from gpufleet.simulate.teams import EXTERNAL_ACCOUNT, EXTERNAL_USER

START = dt.datetime(2026, 11, 16, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
SPEC = SimulationSpec(gpus=16, gpus_per_host=8, start=START, end=START + DAY, seed=11)
TICKS_PER_DAY = 8640  # 86400 s / 10 s
FILE_NAME = re.compile(r"^(?P<host>gpu-r\d\dn\d\d)-(?P<start>\d+)-(?P<end>\d+)\.parquet$")
SLURM_FIXTURES = Path(__file__).parent / "slurm_fixtures"  # real Slurm 22.05 output


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("fleet")
    messages: list[str] = []
    summary = simulate_fleet(SPEC, data_dir=data_dir, progress=messages.append)
    assert summary.gpus == 16
    assert summary.hosts == 2
    assert messages == [f"simulate: day 1/1 (2026-11-16) written, {summary.files:,} files"]
    assert f"{summary.rows:,} samples in {summary.files:,} files" in str(summary)
    return data_dir


@pytest.fixture(scope="module")
def con(fleet: Path) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    connection.execute("set timezone = 'UTC'")
    glob = str(fleet / "raw" / "samples" / "*" / "*" / "*.parquet")
    connection.execute(f"create view s as select * from read_parquet('{glob}', filename = true)")
    connection.execute(
        f"create view a as select * from read_csv('{fleet}/raw/allocations/*.csv', "
        "all_varchar = true, header = true)"
    )
    connection.execute(f"create view u as select * from read_csv('{fleet}/ref/users.csv')")
    return connection


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def _sample_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "raw" / "samples").glob("date=*/host=*/*.parquet"))


# --- layout and schema ------------------------------------------------------------------


def test_files_follow_the_layout(fleet: Path) -> None:
    files = _sample_files(fleet)
    assert len(files) == 2 * 144 - 8  # two hosts, 10-minute files, one host silent 80 min
    assert not list((fleet / "raw" / "samples").rglob(".*"))  # no temporary files left
    for path in files:
        match = FILE_NAME.match(path.name)
        assert match, path.name
        assert path.parent.name == f"host={match['host']}"
        assert path.parent.parent.name == "date=2026-11-16"
        assert int(match["end"]) - int(match["start"]) == 600


def test_every_file_has_the_collector_schema_and_metadata(fleet: Path) -> None:
    for path in _sample_files(fleet)[::37]:
        schema = pq.read_schema(path)
        assert schema.remove_metadata().equals(SAMPLE_SCHEMA)
        assert {k: v for k, v in (schema.metadata or {}).items() if k in file_metadata()} == (
            file_metadata()
        )
        assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"


def test_each_file_is_one_host_one_flush_sorted_by_uuid_then_ts(fleet: Path) -> None:
    for path in _sample_files(fleet)[::29]:
        table = pq.read_table(path)
        match = FILE_NAME.match(path.name)
        assert match
        assert set(table.column("host").to_pylist()) == {match["host"]}
        keys = list(
            zip(table.column("gpu_uuid").to_pylist(), table.column("ts").to_pylist(), strict=True)
        )
        assert keys == sorted(keys)
        stamps = [t.timestamp() for t in table.column("ts").to_pylist()]
        assert int(match["start"]) <= min(stamps) and max(stamps) < int(match["end"])
        assert table.num_rows <= 8 * 60


def test_rows_per_gpu_are_the_span_over_the_interval_minus_the_gap(
    con: duckdb.DuckDBPyConnection,
) -> None:
    scn = scenario_for(SPEC)
    gap_ticks = (scn.events.gap_end_s - scn.events.gap_start_s) // 10
    counts = _rows(con, "select host, gpu_uuid, count(*) from s group by all")
    assert len(counts) == 16
    for host, _, count in counts:
        expected = TICKS_PER_DAY - (gap_ticks if host == scn.events.gap_host else 0)
        assert count == expected
    assert _rows(con, "select count(*) from (select distinct gpu_uuid, ts from s)") == [
        (sum(c for _, _, c in counts),)
    ]
    first, last = _rows(con, "select min(ts), max(ts) from s")[0]
    assert START <= first < START + dt.timedelta(seconds=10)
    assert START + DAY - dt.timedelta(seconds=10) <= last < START + DAY


def test_reference_files_have_the_documented_headers(fleet: Path) -> None:
    def read(path: Path) -> list[dict[str, str]]:
        with path.open(newline="") as f:
            return list(csv.DictReader(f))

    users = read(fleet / "ref" / "users.csv")
    hosts = read(fleet / "ref" / "hosts.csv")
    prices = read(fleet / "ref" / "prices.csv")
    assert list(users[0]) == ["user", "team", "email"]
    assert (
        all(u["email"] == f"{u['user']}@example.org" for u in users[:3]) and not users[3]["email"]
    )
    teams = read(fleet / "ref" / "teams.csv")
    assert [t["lead_email"] for t in teams] == [f"{t['team']}-lead@example.org" for t in teams]
    assert {t["team"] for t in teams} == {u["team"] for u in users}
    assert list(hosts[0]) == ["host_glob", "team"]
    assert list(prices[0]) == ["gpu_glob", "usd_per_gpu_hour"]
    assert {u["team"] for u in users} == {"vision", "nlp", "speech", "research", "platform"}
    assert {p["gpu_glob"]: float(p["usd_per_gpu_hour"]) for p in prices}["NVIDIA H100*"] == 2.5
    allocation_files = sorted((fleet / "raw" / "allocations").glob("*.csv"))
    assert allocation_files
    for path in allocation_files:
        rows = read(path)
        assert list(rows[0]) == [
            "job_id", "user", "team", "host", "gpu_index", "start_ts", "end_ts",
        ]  # fmt: skip
        for row in rows:
            assert row["job_id"].isdigit() and row["gpu_index"].isdigit()
            for column in ("start_ts", "end_ts"):
                if row[column]:
                    assert dt.datetime.fromisoformat(row[column]).utcoffset() is not None
                    assert re.search(r"[+-]\d\d:\d\d$", row[column])


def test_allocations_use_empty_team_and_empty_end(con: duckdb.DuckDBPyConnection) -> None:
    (empty_team, empty_end, total) = _rows(
        con,
        "select count(*) filter (where team is null), count(*) filter (where end_ts is null), "
        "count(*) from a",
    )[0]
    assert 0 < empty_team < total
    assert 0 < empty_end < total


# --- phenomena --------------------------------------------------------------------------


def test_training_jobs_are_busy(con: duckdb.DuckDBPyConnection) -> None:
    scn = scenario_for(SPEC)
    train = ", ".join(f"'{g.uuid}'" for g in scn.gpus if g.role == "train")
    low, samples = _rows(
        con,
        f"select min(gpu_util_pct), count(*) from s where gpu_uuid in ({train}) "
        "and len(processes) > 0",
    )[0]
    assert low >= 80.0
    assert samples > TICKS_PER_DAY  # hours of training on several GPUs


def test_notebooks_hold_memory_at_zero_utilization_for_hours(
    con: duckdb.DuckDBPyConnection,
) -> None:
    rows = _rows(
        con,
        """
        with flagged as (
            select gpu_uuid, ts,
                gpu_util_pct = 0 and len(processes) > 0 and mem_used_bytes > 4e9 as held
            from s
        ),
        runs as (
            select gpu_uuid, held,
                row_number() over (partition by gpu_uuid order by ts)
                - row_number() over (partition by gpu_uuid, held order by ts) as run
            from flagged
        )
        select gpu_uuid, count(*) as n from runs where held group by gpu_uuid, run
        order by n desc limit 1
        """,
    )
    assert rows and rows[0][1] >= 180  # 30 minutes at 10 s


def test_the_hot_rack_throttles_in_runs(con: duckdb.DuckDBPyConnection) -> None:
    scn = scenario_for(SPEC)
    hot = set(scn.events.hot_hosts)
    rows = _rows(
        con,
        f"""
        select host, bit_or(clock_event_mask), min(temp_gpu_c), max(temp_gpu_c),
            max(sm_clock_mhz), max(sm_clock_max_mhz), count(*)
        from s where clock_event_mask & {THERMAL_MASK} <> 0 group by host
        """,
    )
    assert rows
    assert {r[0] for r in rows} <= hot
    mask = 0
    for _, bits, low_temp, _, clock, max_clock, count in rows:
        mask |= bits
        assert low_temp >= 80
        assert clock < max_clock
        assert count >= 12  # runs of minutes, not single ticks
    assert mask & 0x20 and mask & 0x40


def test_a_driver_reload_resets_the_energy_counter(con: duckdb.DuckDBPyConnection) -> None:
    scn = scenario_for(SPEC)
    rows = _rows(
        con,
        """
        with x as (
            select host, gpu_uuid, ts, energy_mj,
                lag(energy_mj) over (partition by gpu_uuid order by ts) as previous
            from s where energy_mj is not null
        )
        select distinct host, min(energy_mj) from x where energy_mj < previous group by host
        """,
    )
    assert [r[0] for r in rows] == [scn.events.reload_host]
    assert rows[0][1] < 7_000_000  # back to about one tick of energy (700 W * 10 s)
    lost = _rows(
        con,
        "select count(*), count(gpu_util_pct), count(energy_mj) from s where status = 'lost'",
    )[0]
    assert lost[0] > 0 and lost[1:] == (0, 0)
    assert _rows(con, "select distinct status from s order by 1") == [("lost",), ("ok",)]


def test_energy_is_consistent_with_power(con: duckdb.DuckDBPyConnection) -> None:
    worst = _rows(
        con,
        """
        with x as (
            select energy_mj - lag(energy_mj) over w as delta_mj, power_w, interval_s,
                ts - lag(ts) over w as step
            from s window w as (partition by gpu_uuid order by ts)
        )
        select max(abs(delta_mj - power_w * interval_s * 1000))
        from x where delta_mj >= 0 and step = interval 10 seconds
        """,
    )[0][0]
    assert worst < 5  # mJ: float32 power, integer counter


def test_one_host_has_a_data_gap_of_an_hour_or_more(con: duckdb.DuckDBPyConnection) -> None:
    scn = scenario_for(SPEC)
    gaps = _rows(
        con,
        """
        with x as (select host, ts - lag(ts) over (partition by gpu_uuid order by ts) as step
                   from s)
        select distinct host from x where step >= interval 1 hour
        """,
    )
    assert gaps == [(scn.events.gap_host,)]


def test_spare_and_host_owned_gpus_have_no_process_and_no_allocation(
    con: duckdb.DuckDBPyConnection, fleet: Path
) -> None:
    with (fleet / "ref" / "hosts.csv").open(newline="") as f:
        globs = [row["host_glob"] for row in csv.DictReader(f)]
    idle = _rows(
        con,
        """
        with per_gpu as (
            select host, gpu_index from s
            group by host, gpu_index
            having max(len(processes)) = 0 and max(gpu_util_pct) = 0
        )
        select host, gpu_index from per_gpu
        where not exists (select 1 from a
                          where a.host = per_gpu.host and a.gpu_index::int = per_gpu.gpu_index)
        """,
    )
    owned = [h for h, _ in idle if any(fnmatch.fnmatchcase(h, g) for g in globs)]
    spare = [h for h, _ in idle if not any(fnmatch.fnmatchcase(h, g) for g in globs)]
    assert owned and spare


def test_process_owners_and_allocation_users_not_in_users_csv(
    con: duckdb.DuckDBPyConnection,
) -> None:
    unmapped_processes = _rows(
        con,
        """
        select distinct p.user from (select unnest(processes) as p from s)
        where p.user not in (select "user" from u) and p.job_id is null
        """,
    )
    assert unmapped_processes
    unmapped_allocations = _rows(
        con, 'select count(*) from a where team is null and "user" not in (select "user" from u)'
    )[0][0]
    assert unmapped_allocations > 0


def test_process_job_ids_are_those_of_the_covering_allocation(
    con: duckdb.DuckDBPyConnection,
) -> None:
    rows = _rows(
        con,
        """
        with p as (
            select s.host, s.gpu_index, s.ts, unnest(s.processes).job_id as job_id from s
        ),
        matched as (
            select p.job_id, a.job_id as allocation from p
            left join a on a.host = p.host and a.gpu_index::int = p.gpu_index
                and a.start_ts::timestamptz < p.ts
                and (a.end_ts is null or p.ts <= a.end_ts::timestamptz)
            where p.job_id is not null
        )
        select count(*), count(*) filter (where job_id = allocation) from matched
        """,
    )
    total, matching = rows[0]
    assert total > 0 and matching == total


def test_several_gpu_models_and_processes_per_gpu(con: duckdb.DuckDBPyConnection) -> None:
    names = {r[0] for r in _rows(con, "select distinct gpu_name from s")}
    assert "NVIDIA H100 80GB HBM3" in names and len(names) >= 2
    assert _rows(con, "select max(len(processes)) from s")[0][0] >= 2


# --- the Slurm side: saved sacct/squeue JSON, the samples' gpustat evidence ---------------


@pytest.fixture(scope="module")
def slurm_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SPEC's reference files with the Slurm side as saved JSON (the samples are the same
    as `fleet`'s: they do not depend on how the Slurm side is written)."""
    data_dir = tmp_path_factory.mktemp("slurm")
    written = write_reference_files(scenario_for(SPEC), SPEC, data_dir, slurm="json")
    assert [p.relative_to(data_dir).as_posix() for p in written][-2:] == [
        "slurm/sacct.json", "slurm/squeue.json",
    ]  # fmt: skip
    assert not (data_dir / "raw").exists()
    return data_dir


def _saved(data_dir: Path, name: str) -> dict:
    return json.loads((data_dir / "slurm" / name).read_text())


def _epoch(seconds: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def test_saved_sacct_lists_every_allocated_job_of_the_span(slurm_json: Path) -> None:
    scn = scenario_for(SPEC)
    span = scn.span
    simulated = {job.job_id: job for job in scn.jobs if overlaps_span(job, span)}
    path = slurm_json / "slurm" / "sacct.json"
    payload = load_payload(path.read_text(), source=str(path))
    assert payload.version == 38  # openapi/dbv0.0.38: Slurm 22.05
    jobs = {job.job_id: job for job in parse_sacct(payload)}
    assert len(jobs) == len(payload.jobs) == len(simulated) > 0
    teams = dict(scn.users)
    for job_id, job in jobs.items():
        planned = simulated[job_id]
        running = planned.end_s >= span.end_s
        assert job.user == planned.user and job.cluster == "sim"
        assert job.account == (planned.team_field or teams.get(planned.user, EXTERNAL_ACCOUNT))
        assert job.gpus == len(planned.gpus) and job.nodes == (planned.gpus[0].host.name,)
        assert job.start_ts == _epoch(planned.start_s)
        assert job.end_ts == (None if running else _epoch(planned.end_s))
        assert (job.state == "RUNNING") == running
        assert (job.state == "FAILED") == (planned.crashed and not running)
    assert {"COMPLETED", "RUNNING", "TIMEOUT"} <= {j.state for j in jobs.values()}
    longer = scenario_for(replace(SPEC, gpus=32, end=START + 2 * DAY))
    states = {state(job, longer.span) for job in longer.jobs if overlaps_span(job, longer.span)}
    assert states == {"COMPLETED", "RUNNING", "TIMEOUT", "FAILED", "CANCELLED"}
    assert {j.account for j in jobs.values() if j.user == EXTERNAL_USER} == {EXTERNAL_ACCOUNT}
    # the shape real Slurm 22.05 prints, key for key
    recorded = json.loads((SLURM_FIXTURES / "sacct-22.05.json").read_text())
    written = _saved(slurm_json, "sacct.json")
    assert written["meta"] == recorded["meta"] and written["errors"] == []
    assert all(set(job) == set(recorded["jobs"][0]) for job in written["jobs"])


def test_saved_squeue_holds_the_running_jobs_and_their_gpu_indices(slurm_json: Path) -> None:
    scn = scenario_for(SPEC)
    running = {
        job.job_id: job
        for job in scn.jobs
        if overlaps_span(job, scn.span) and job.end_s >= scn.span.end_s
    }
    path = slurm_json / "slurm" / "squeue.json"
    held = parse_squeue(load_payload(path.read_text(), source=str(path)))
    assert set(held) == set(running) and running
    for job_id, gpus in held.items():
        planned = running[job_id]
        indices = tuple(sorted(g.index for g in planned.gpus))
        assert [(n.node, n.gpu_indices, n.mig) for n in gpus.nodes] == [
            (planned.gpus[0].host.name, indices, False)
        ]
        assert gpus.job.user == planned.user and gpus.job.state == "RUNNING"
        assert gpus.job.start_ts == _epoch(planned.start_s)
    recorded = json.loads((SLURM_FIXTURES / "squeue-22.05.json").read_text())
    written = _saved(slurm_json, "squeue.json")
    assert written["meta"] == recorded["meta"]
    assert all(set(job) <= set(recorded["jobs"][0]) for job in written["jobs"])
    assert [gpu_ranges(i) for i in ([0, 1, 2, 3], [3, 0, 2], [5], [0, 2, 4])] == [
        "0-3", "0,2-3", "5", "0,2,4",
    ]  # fmt: skip


def test_import_slurm_of_the_saved_output_gives_the_allocations_of_running_jobs(
    slurm_json: Path, fleet: Path, tmp_path: Path
) -> None:
    """What the importer makes of the JSON is the allocation files' rows of the jobs still
    running at the span's end; the finished ones are left to the gpustat evidence."""
    config = Config(data_dir=tmp_path)
    warnings: list[str] = []
    result = import_slurm(
        config,
        sacct_json=slurm_json / "slurm" / "sacct.json",
        squeue_json=slurm_json / "slurm" / "squeue.json",
        now=SPEC.end,
        warn=warnings.append,
    )
    # the one warning: this data directory has no samples yet, so the running jobs' nodes
    # are counted from their allocations alone
    [warning] = warnings
    assert "have Slurm jobs but no gpufleet samples" in warning

    def rows(folder: Path, running_only: bool) -> set[tuple[str, str, str, str, dt.datetime]]:
        found = set()
        for path in folder.glob("*.csv"):
            with path.open(newline="") as handle:
                for row in csv.DictReader(handle):
                    if not running_only or not row["end_ts"]:
                        start = dt.datetime.fromisoformat(row["start_ts"])
                        key = (row["job_id"], row["user"], row["host"], row["gpu_index"], start)
                        found.add(key)
        return found

    imported = rows(config.allocations_dir, running_only=False)
    assert imported and imported == rows(fleet / "raw" / "allocations", running_only=True)
    assert result.gpu_jobs == len(_saved(slurm_json, "sacct.json")["jobs"])
    assert len(result.unplaced) == result.gpu_jobs - len({key[0] for key in imported})


def test_samples_name_the_job_holding_their_gpu_as_the_allocations_do(
    con: duckdb.DuckDBPyConnection,
) -> None:
    """alloc_job_id/alloc_user (jobstats' prolog files, read by the collector) name the job
    of the allocation row that covers the sample, process or not, and nothing elsewhere."""
    total, same_job, same_user, held, idle = _rows(
        con,
        """
        select count(*),
            count(*) filter (where s.alloc_job_id is not distinct from a.job_id),
            count(*) filter (where s.alloc_user is not distinct from a."user"),
            count(s.alloc_job_id),
            count(*) filter (where s.alloc_job_id is not null and len(s.processes) = 0)
        from s left join a on a.host = s.host and a.gpu_index::int = s.gpu_index
            and a.start_ts::timestamptz < s.ts
            and (a.end_ts is null or s.ts <= a.end_ts::timestamptz)
        """,
    )[0]
    assert total == same_job == same_user == _rows(con, "select count(*) from s")[0][0]
    assert 0 < held < total and idle > 0  # allocated GPUs with no process are held too
    assert _rows(
        con,
        "select count(*) from s, unnest(s.processes) as p(proc) "
        "where proc.job_id is not null and proc.job_id is distinct from s.alloc_job_id",
    ) == [(0,)]


def test_simulate_slurm_json_writes_the_saved_output_instead_of_allocation_files(
    tmp_path: Path, fleet: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--data-dir", str(tmp_path), "simulate", "--gpus", "16", "--start", "2026-11-16"]
    assert main([*args, "--days", "1", "--seed", str(SPEC.seed), "--slurm", "json"]) == 0
    out = capsys.readouterr().out
    assert "ref/prices.csv, slurm/sacct.json, slurm/squeue.json" in out
    assert not (tmp_path / "raw" / "allocations").exists()
    assert _saved(tmp_path, "sacct.json")["jobs"]
    files = _sample_files(tmp_path)
    assert [p.relative_to(tmp_path) for p in files] == [
        p.relative_to(fleet) for p in _sample_files(fleet)
    ]
    for path in files[::23]:  # the samples do not depend on how the Slurm side is written
        assert pq.read_table(path).equals(pq.read_table(fleet / path.relative_to(tmp_path)))
    with pytest.raises(SystemExit):
        main(["simulate", "--slurm", "xml"])
    assert "invalid choice: 'xml'" in capsys.readouterr().err


# --- determinism, windows, next flush ---------------------------------------------------


def test_same_seed_same_files_other_seed_other_data(tmp_path: Path, fleet: Path) -> None:
    short = SimulationSpec(gpus=16, start=START, end=START + dt.timedelta(hours=1), seed=SPEC.seed)
    # A window of the day's scenario is the same as the day's own files for that hour...
    simulate_window(SPEC, data_dir=tmp_path / "w", start=START, end=START + dt.timedelta(hours=1))
    for path in _sample_files(tmp_path / "w"):
        original = fleet / path.relative_to(tmp_path / "w")
        assert pq.read_table(path).equals(pq.read_table(original))
    # ...and two runs of one spec write identical tables.
    simulate_fleet(short, data_dir=tmp_path / "a")
    simulate_fleet(short, data_dir=tmp_path / "b")
    a, b = _sample_files(tmp_path / "a"), _sample_files(tmp_path / "b")
    assert [p.name for p in a] == [p.name for p in b]
    assert all(pq.read_table(x).equals(pq.read_table(y)) for x, y in zip(a, b, strict=True))
    other = SimulationSpec(gpus=16, start=START, end=START + dt.timedelta(hours=1), seed=99)
    simulate_fleet(other, data_dir=tmp_path / "c")
    c = _sample_files(tmp_path / "c")
    assert not pq.read_table(a[0]).equals(pq.read_table(c[0]))


def test_next_flush_continues_every_host_after_the_end(tmp_path: Path, fleet: Path) -> None:
    summary = simulate_next_flush(SPEC, data_dir=tmp_path, scenario=scenario_for(SPEC))
    assert "16 GPUs on 2 hosts for 10 minutes" in str(summary)
    files = _sample_files(tmp_path)
    assert summary.files == len(files) == 2
    assert summary.rows == 16 * 60
    assert {p.parent.parent.name for p in files} == {"date=2026-11-17"}
    connection = duckdb.connect()
    before = str(fleet / "raw" / "samples" / "*" / "*" / "*.parquet")
    after = str(tmp_path / "raw" / "samples" / "*" / "*" / "*.parquet")
    jumps = connection.execute(
        f"""
        with s as (select gpu_uuid, ts, energy_mj, power_w from read_parquet('{before}')
                   union all
                   select gpu_uuid, ts, energy_mj, power_w from read_parquet('{after}')),
        x as (select ts, energy_mj - lag(energy_mj) over w as delta, power_w,
                     ts - lag(ts) over w as step
              from s window w as (partition by gpu_uuid order by ts))
        select count(*), count(delta), max(abs(delta - power_w * 10000)), max(step)
        from x where ts >= '2026-11-17'
        """
    ).fetchall()[0]
    assert jumps[:2] == (16 * 60, 16 * 60)
    assert jumps[2] < 5  # the counters go on where the day's files left them
    assert jumps[3] == dt.timedelta(seconds=10)


# --- inputs and scaling -----------------------------------------------------------------


def test_from_cli_uses_the_configured_zone_and_week() -> None:
    config = Config(timezone="Europe/Berlin")
    spec = SimulationSpec.from_cli(
        config=config, gpus=20, gpus_per_host=8, week="2026-W47", start=None, days=7,
        interval_s=10.0, flush_s=600.0, seed=7,
    )  # fmt: skip
    assert spec.start.isoformat() == "2026-11-16T00:00:00+01:00"
    assert spec.end.isoformat() == "2026-11-23T00:00:00+01:00"
    assert spec.hosts == 3
    scn = scenario_for(spec)
    assert [h.gpu_count for h in scn.hosts] == [8, 8, 4]
    assert all(a.host in {h.name for h in scn.hosts} for a in scn.allocations)
    with pytest.raises(GpufleetError, match="must not exceed"):
        SimulationSpec.from_cli(
            config=config, gpus=16, gpus_per_host=8, week=None, start=dt.date(2026, 11, 16),
            days=1, interval_s=60.0, flush_s=30.0, seed=7,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"gpus": 0}, "gpus must be at least 1"),
        ({"interval_s": 700.0}, "must not exceed flush_s"),
        ({"end": START}, "must be after start"),
        ({"start": dt.datetime(2026, 11, 16)}, "timezone-aware"),
        ({"flush_s": 0.5, "interval_s": 0.25}, "flush_s must be at least 1 s"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone"),
    ],
)
def test_bad_specs_are_refused(changes: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"gpus": 16, "start": START, "end": START + DAY}
    fields.update(changes)
    with pytest.raises(ValueError, match=message):
        SimulationSpec(**fields)  # type: ignore[arg-type]


def test_scenario_sizes_scale_with_the_fleet() -> None:
    kinds = host_kinds(125)
    assert kinds.count("owned") == 19 and kinds.count("spare") == 7
    assert kinds.count("training") > 60 and kinds.count("interactive") == 21
    assert host_kinds(2) == ["mixed", "owned"]
    assert sorted(set(gpu_roles("mixed", 8))) == ["notebook", "rogue", "spare", "train"]
    assert gpu_roles("owned", 8).count("owned_idle") == 2


def test_simulate_refuses_to_overwrite_real_reference_files(tmp_path: Path) -> None:
    real = tmp_path / "ref" / "users.csv"
    real.parent.mkdir(parents=True)
    real.write_text("user,team\nalice,vision\n")
    spec = SimulationSpec(
        gpus=8,
        start=dt.datetime(2026, 11, 16, tzinfo=dt.UTC),
        end=dt.datetime(2026, 11, 16, 0, 20, tzinfo=dt.UTC),
    )
    with pytest.raises(GpufleetError, match="not written by 'gpufleet simulate'"):
        simulate_fleet(spec, data_dir=tmp_path)
    assert real.read_text() == "user,team\nalice,vision\n"
    assert not (tmp_path / "raw").exists()

    fresh = tmp_path / "fresh"
    simulate_fleet(spec, data_dir=fresh)
    simulate_fleet(spec, data_dir=fresh)  # simulate may rewrite its own reference files
    assert (fresh / "ref" / "users.csv").read_text().startswith("user,team,email\n")


class _SlowGpus(list):
    """A scenario's GPUs whose first iteration pauses after the first one, while another
    thread looks up (whose own iteration does not wait: it ran into the 5 s timeout)."""

    def __init__(self, gpus: list, pause: threading.Event, resume: threading.Event) -> None:
        super().__init__(gpus)
        self.pause, self.resume = pause, resume

    def __iter__(self):
        first = not self.pause.is_set()
        for index, gpu in enumerate(list.__iter__(self)):
            yield gpu
            if index == 0 and first:
                self.pause.set()
                self.resume.wait(5)


def test_a_hosts_gpus_looked_up_while_another_thread_indexes_them_are_all_there() -> None:
    # the hosts' rows are generated in threads: a lookup during the first one's indexing
    # found the index half filled and failed (a KeyError, the flush written in part)
    scenario = scenario_for(SPEC)
    expected = {host.index: list(scenario.host_gpus(host)) for host in scenario.hosts}
    paused, resume = threading.Event(), threading.Event()
    fresh = replace(scenario, gpus=_SlowGpus(scenario.gpus, paused, resume), _by_host={})
    first = threading.Thread(target=fresh.host_gpus, args=(scenario.hosts[0],))
    first.start()
    assert paused.wait(5)
    try:
        assert fresh.host_gpus(scenario.hosts[-1]) == expected[scenario.hosts[-1].index]
    finally:
        resume.set()
        first.join()
    assert {h.index: fresh.host_gpus(h) for h in scenario.hosts} == expected
