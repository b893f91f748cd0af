"""A Slurm job record added, removed or changed recomputes the samples it can attribute, and
the incremental build then equals a full one (as tests/test_incremental.py proves for new
samples and allocations).

Four GPUs on two hosts, eight hours of samples. GPU 0 carries the collector's gpustat
evidence of job J1 (`alloc_job_id`, from 30 s before the start sacct records: the node's
clock and the controller's differ); GPU 3 runs a process of job J2, whose record names a
node no collector writes (`nb`), so only the process's job id finds its samples; GPU 1
runs a process of J3, recorded later by hand without hosts. The records arrive, change and
go between builds.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import pytest

from gpufleet.warehouse.build import BuildResult, build_models
from tests.test_incremental import MARTS, assert_same_marts
from tests.test_models_fixtures import NEXT_LOAD, SLURM_JOB_COLUMNS, Fleet, built_once

pytestmark = pytest.mark.fleet

START = dt.datetime(2026, 11, 16, 0, 0, tzinfo=dt.UTC)
TICKS = 6 * 60 * 8  # eight hours at 10 s
HALF_S = 4 * 3600

SOURCE_SQL = f"""
create table source as
with ticks as (
    select g, k, timestamptz '{START.isoformat()}' + to_seconds(10 * k) as ts
    from range(4) as gs(g), range({TICKS}) as ks(k)
)
select
    ts,
    10.0::float as interval_s,
    ['node-a', 'node-a', 'node-b', 'node-b'][(g + 1)::bigint] as host,
    (g % 2)::usmallint as gpu_index,
    'GPU-' || g as gpu_uuid,
    'NVIDIA H100 80GB HBM3' as gpu_name,
    'ok' as status,
    -- idle for 40 minutes of every two hours: idle episodes, some of them waste
    case when (k + 60 * g) % 720 < 240 then 1.0 else 60.0 end::float as gpu_util_pct,
    200.0::float as power_w,
    0::ubigint as clock_event_mask,
    case
        when g = 3 and k between 1080 and 2520
            then [{{'pid': 7, 'user': 'bob', 'used_mem_bytes': 1000, 'job_id': 'J2'}}]
        when g = 1 and k % 500 < 200
            then [{{'pid': 9, 'user': 'carol', 'used_mem_bytes': 10, 'job_id': 'J3'}}]
        else []
    end as processes,
    case when g = 0 and k between 357 and 1800 then 'J1' end as alloc_job_id,
    case when g = 0 and k between 357 and 1800 then 'alice' end as alloc_user,
from ticks
"""


def _at(hours: float) -> str:
    return f"timestamptz '{START.isoformat()}' + to_microseconds({int(hours * 3600e6)})"


# The records the import writes once J1 and J2 have been seen (J2 has ended).
FIRST_RECORDS = f"""
insert into slurm_jobs {SLURM_JOB_COLUMNS} values
    ('J1', null, 'c1', 'alice', 'cv', 'gpu', 'RUNNING', 'vision', 1, ['node-a'], {_at(1)}, null,
     'raw/jobs/slurm-c1-2026-11-16.csv'),
    ('J2', null, 'c1', 'bob', 'asr', 'gpu', 'COMPLETED', 'speech', 1, ['nb'], {_at(3)}, {_at(7)},
     'raw/jobs/slurm-c1-2026-11-16.csv');
"""
# Later: J1's account is renamed (another team), J2's record goes, J3's is written by hand.
LATER_RECORDS = f"""
update slurm_jobs set team = 'perception' where job_id = 'J1';
delete from slurm_jobs where job_id = 'J2';
insert into slurm_jobs {SLURM_JOB_COLUMNS} values
    ('J3', null, null, 'carol', null, null, null, 'infra', null, null, {_at(0)}, null,
     'raw/jobs/site.csv');
"""


def _fleet() -> Fleet:
    fleet = Fleet(timezone="Europe/Berlin", threshold_pct=5.0, min_minutes=30.0)
    fleet.con.execute(SOURCE_SQL)
    fleet.con.execute(
        """
        insert into ref_users values ('alice', 'ml'), ('bob', 'cv');
        insert into ref_prices (rule_order, gpu_glob, usd_per_gpu_hour) values (1, '*', 2.0);
        """
    )
    return fleet


def _arrive(con: duckdb.DuckDBPyConnection, start_s: int, end_s: int) -> None:
    con.execute(
        f"""
        insert into samples_stored by name
        select *, {NEXT_LOAD} as load_id from source
        where ts >= timestamptz '{START.isoformat()}' + to_seconds({start_s})
            and ts < timestamptz '{START.isoformat()}' + to_seconds({end_s})
        order by gpu_uuid, ts
        """
    )


def _full(*changes: str) -> Fleet:
    """One full build of every sample, with the records `changes` leave."""
    fleet = _fleet()
    for sql in changes:
        fleet.con.execute(sql)
    _arrive(fleet.con, 0, TICKS * 10)
    assert build_models(fleet.con, fleet.config).mode == "full"
    return fleet


def _full_with_first_records() -> Fleet:
    """`_full(FIRST_RECORDS)`, which two tests start from: a copy of one built once per test
    process (tests/test_models_fixtures.py's built_once). The other full builds are each
    one test's, built as they are (a copy would add its save and load)."""
    return built_once(
        "test_slurm_jobs_incremental._full(FIRST_RECORDS)", lambda: _full(FIRST_RECORDS)
    )


def _assert_equal(incremental: Fleet, full: Fleet) -> None:
    assert_same_marts(incremental.con, full.con, MARTS)


def _teams(fleet: Fleet) -> dict[str, Any]:
    rows = fleet.con.execute(
        "select team, count(*) from samples_attributed group by team"
    ).fetchall()
    return dict(rows)


def _recomputed(result: BuildResult) -> str:
    assert result.mode == "incremental", result.reason
    return result.reason


def test_job_records_arriving_changing_and_going_recompute_what_they_attribute() -> None:
    fleet = _fleet()
    _arrive(fleet.con, 0, HALF_S)
    assert build_models(fleet.con, fleet.config).mode == "full"
    # alice's gpustat samples on GPU 0 first take her users.csv team
    teams = _teams(fleet)
    assert teams.get("vision") is None and teams["ml"] > 0

    # the records arrive with the second half of the samples: J1's team is its account's
    fleet.con.execute(FIRST_RECORDS)
    _arrive(fleet.con, HALF_S, TICKS * 10)
    _recomputed(build_models(fleet.con, fleet.config))
    full = _full_with_first_records()
    teams = _teams(full)
    assert teams["vision"] == 1800 - 357 + 1  # every sample J1's gpustat file names
    assert teams["speech"] > 0  # J2's process, found by its job id (node 'nb')
    _assert_equal(fleet, full)
    assert build_models(fleet.con, fleet.config).mode == "up to date"

    # no new sample: the changed records alone make the build recompute
    fleet.con.execute(LATER_RECORDS)
    reason = _recomputed(build_models(fleet.con, fleet.config))
    assert reason.startswith("0 new samples; 4 GPUs")  # J3 names no host: every GPU
    full = _full(FIRST_RECORDS, LATER_RECORDS)
    teams = _teams(full)
    assert {"perception", "infra"} <= set(teams)
    assert "speech" not in teams and "vision" not in teams
    _assert_equal(fleet, full)
    assert build_models(fleet.con, fleet.config).mode == "up to date"


def test_a_changed_record_recomputes_only_the_gpus_of_its_hosts() -> None:
    fleet = _full_with_first_records()  # every sample and the first records, built in full
    fleet.con.execute("update slurm_jobs set state = 'COMPLETED' where job_id = 'J1'")
    # node-a's two GPUs (J1's host), none of node-b's
    assert _recomputed(build_models(fleet.con, fleet.config)).startswith("0 new samples; 2 GPUs")
    # new samples of one GPU and no record changed: that GPU alone
    fleet.con.execute(
        f"""
        insert into samples_stored by name
        select * replace (ts + interval 8 hours as ts), {NEXT_LOAD} as load_id
        from source where gpu_uuid = 'GPU-2' and ts < timestamptz '{START.isoformat()}'
            + interval 10 minutes
        """
    )
    assert _recomputed(build_models(fleet.con, fleet.config)).startswith("60 new samples; 1 GPUs")


# GPU 2 (node-b) carries the gpustat evidence of an array task by its own SLURM_JOB_ID, 777,
# for two hours; its record (770_7, on node 'nb', which no collector writes) comes from an
# import of a release before job_id_raw, and is then written again with it.
RAW_EVIDENCE = f"""
update source set alloc_job_id = '777', alloc_user = 'bob'
where gpu_uuid = 'GPU-2' and ts >= {_at(2)} and ts < {_at(4)};
"""
TASK_RECORD = f"""
insert into slurm_jobs {SLURM_JOB_COLUMNS} values
    ('770_7', null, 'c1', 'bob', 'asr', 'gpu', 'RUNNING', 'speech', 1, ['nb'], {_at(2)}, null,
     'raw/jobs/slurm-c1-2026-11-16.csv');
"""
TASK_RAW_ID = "update slurm_jobs set job_id_raw = '777' where job_id = '770_7'"


def _jobs(fleet: Fleet) -> dict[str, str]:
    rows = fleet.con.execute("select job_id, team from job_efficiency").fetchall()
    return dict(rows)


def test_a_records_raw_id_recomputes_the_samples_naming_it() -> None:
    fleet = _fleet()
    fleet.con.execute(RAW_EVIDENCE)
    fleet.con.execute(TASK_RECORD)
    _arrive(fleet.con, 0, TICKS * 10)
    assert build_models(fleet.con, fleet.config).mode == "full"
    jobs = _jobs(fleet)
    assert jobs["777"] == "cv"  # not known as 770_7 yet: bob's users.csv team
    assert jobs["770_7"] == "speech"  # its record alone: a job with no samples yet

    # the record gains its raw id: the samples naming 777 (on node-b, not the record's
    # 'nb') are recomputed, and are the task's, with its account team
    fleet.con.execute(TASK_RAW_ID)
    assert _recomputed(build_models(fleet.con, fleet.config)).startswith("0 new samples; 1 GPUs")
    full = _full(RAW_EVIDENCE, TASK_RECORD, TASK_RAW_ID)
    jobs = _jobs(full)
    assert jobs["770_7"] == "speech" and "777" not in jobs
    assert _teams(full)["speech"] == 2 * 360  # two hours of 10 s samples
    _assert_equal(fleet, full)
    assert _jobs(fleet) == jobs
