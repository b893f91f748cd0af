"""The incremental build equals a full one on the same data (docs/reference.md#definitions
and #tables, issue 5).

A small fleet's samples arrive chunk by chunk, as collector flushes do (one GPU's chunk
late, one GPU joining midway); the warehouse is built after every chunk. Its marts must
then equal those of one full build of all the samples: idle episodes and thermal events
that cross local midnight included, ids included.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import math
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from gpufleet.config import Config
from gpufleet.warehouse.base import deletes
from gpufleet.warehouse.build import BuildResult, build, build_models
from gpufleet.warehouse.build import full as full_module
from gpufleet.warehouse.build.state import read_state
from gpufleet.warehouse.publish import connect_read_only, write_transaction
from tests.templates import made_once
from tests.test_models_fixtures import NEXT_LOAD, SLURM_JOB_COLUMNS, Fleet, built_once

pytestmark = pytest.mark.fleet

START = dt.datetime(2026, 11, 15, 12, 0, tzinfo=dt.UTC)
SAMPLES_PER_GPU = 6 * 60 * 24 * 2  # two days at 10 s
CHUNK_S = 5 * 3600
MARTS = (
    "samples_attributed",
    "idle_episodes",
    "thermal_events",
    "run_pieces",
    "gpu_team_daily",
    "gpu_hourly",
    "team_daily",
    "team_weekly",
    "gpu_daily",
    "host_daily",
    "job_efficiency",  # a view of the marts: what they hold per job must agree too
    "gpu_health_daily",  # views of gpu_hourly's health
    "gpus_to_drain",
)

# Seven GPUs on four hosts (GPU 6 a MIG device of GPU 5; GPU 4, which joins late, alone
# on node-c0: a host, and so a host id, that first appears in an incremental build,
# sorting before the hosts built before it; its job, its process owner 'aaron' and its
# 'no_permission' samples are new there too); the patterns change in blocks of hours so
# that idle episodes, thermal events and team changes cross local midnight (Kolkata:
# UTC+05:30) and chunks.
SOURCE_SQL = f"""
create table source as
with ticks as (
    select g, k, timestamptz '{START.isoformat()}' + to_seconds(10 * k) as ts
    from range(7) as gs(g), range({SAMPLES_PER_GPU}) as ks(k)
),
shaped as (
    select
        *,
        hash(g, (k + 777 * g) // 1500) % 3 = 0 as idle_block,
        (k + 113 * g) % 5000 < 1800 as hot,
        ['alice', 'bob', 'carol', 'nobody', null][(1 + hash(g, k // 2100) % 5)::bigint] as owner,
        (k + 31 * g) % 4000 between 100 and 130 as in_gap,
        -- GPUs 0 and 3 carry the collector's gpustat evidence of Slurm jobs in blocks
        g in (0, 3) and (k + 500 * g) % 3000 < 1200 as held,
        'sj-' || g || '-' || (k + 500 * g) // 3000 as held_by,
    from ticks
)
select
    ts,
    10.0::float as interval_s,
    'node-' || ['a1', 'a1', 'b1', 'b1', 'c0', 'c1', 'c1'][(g + 1)::bigint] as host,
    case when g = 6 then 1 else g % 2 end::usmallint as gpu_index,
    'GPU-' || g as gpu_uuid,
    case when g < 4 then 'NVIDIA H100 80GB HBM3' else 'NVIDIA A100-SXM4-80GB' end as gpu_name,
    case
        when g = 5 and k % 997 = 0 then 'lost'
        when g = 4 and k % 1009 = 0 then 'no_permission'
        else 'ok'
    end as status,
    case
        when g = 5 and k % 997 = 0 then null
        when g = 4 and k % 1009 = 0 then null
        when idle_block then (hash(k, g) % 40) / 10.0
        else 20 + hash(g, k) % 80
    end::float as gpu_util_pct,
    (100 + hash(k, g, 1) % 500)::float as power_w,
    -- a counter with a driver reload (reset) for GPU 2 halfway
    case when g = 3 then null
        else (case when g = 2 and k > {SAMPLES_PER_GPU // 2} then k - {SAMPLES_PER_GPU // 2}
            else k end) * 3000000 + g
    end::bigint as energy_mj,
    (50 + hash(g, k, 2) % 40)::smallint as temp_gpu_c,
    (1200 + hash(g, k, 3) % 600)::integer as sm_clock_mhz,
    case
        when hot then [32, 64, 96, 68][(1 + (k // 600) % 4)::bigint]
        when k % 50 = 0 then 4
        else 0
    end::ubigint as clock_event_mask,
    case
        when owner is null then []
        when g = 4 and owner = 'bob'
            then [{{'pid': 104, 'user': 'aaron', 'used_mem_bytes': 1000, 'job_id': 'j4'}}]
        else [{{'pid': 100 + g, 'user': owner, 'used_mem_bytes': 1000, 'job_id': 'j' || g}}]
    end as processes,
    case when held then held_by end as alloc_job_id,
    case when held then ['dave', 'erin', 'alice'][(1 + hash(held_by) % 3)::bigint] end
        as alloc_user,
    (hash(g, k // 90) % 80)::bigint * 1000000000 as mem_used_bytes,
    80000000000::bigint as mem_total_bytes,
    -- GPM activity on GPUs 0-2; XIDs, ECC counts (GPU 2's reset halfway), replays and a
    -- pending row remap on GPU 0 late (the drain rule)
    case when g < 3 then (hash(g, k, 4) % 101)::float end as sm_active_pct,
    case when g < 3 then (hash(g, k, 5) % 50)::float end as tensor_active_pct,
    case when g < 3 then (hash(g, k, 6) % 70)::float end as dram_active_pct,
    case
        when k % 1777 = 0 and g in (1, 4) then [79]
        when k % 2003 = 0 then [13, 48]
        else []
    end::integer[] as xid_errors,
    case when g = 3 then null
        when g = 2 and k > {SAMPLES_PER_GPU // 2} then (k - {SAMPLES_PER_GPU // 2}) // 2500
        else k // 2500 + g
    end::bigint as ecc_uncorrected_volatile,
    (k // 700)::bigint as ecc_corrected_volatile,
    (k // 1300 * g)::bigint as pcie_replay_count,
    g = 0 and k > {2 * SAMPLES_PER_GPU // 3} as remapped_rows_pending,
    -- GPU 6 is a MIG device of GPU 5 (half of it, at its host and index): GPU 5's own
    -- rows count no hours at the ticks GPU 6 has a row
    case when g = 6 then 'GPU-5' end as parent_gpu_uuid,
    case when g = 6 then 0.5 end::float as mig_slice_fraction,
from shaped
where not in_gap
    -- GPU 4 joins late
    and not (g = 4 and k < {SAMPLES_PER_GPU // 3})
"""


def _arrive(con: duckdb.DuckDBPyConnection, start_s: int, end_s: int, where: str) -> None:
    con.execute(
        f"""
        insert into samples_stored by name
        select *, {NEXT_LOAD} as load_id from source
        where ts >= timestamptz '{START.isoformat()}' + to_seconds({start_s})
            and ts < timestamptz '{START.isoformat()}' + to_seconds({end_s})
            and {where}
        order by gpu_uuid, ts
        """
    )


def _references(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"""
        insert into ref_users values ('alice', 'ml'), ('bob', 'cv'), ('carol', 'ml');
        insert into ref_hosts (rule_order, host_glob, team) values (1, 'node-c*', 'infra');
        insert into ref_prices (rule_order, gpu_glob, usd_per_gpu_hour)
        values (1, '*H100*', 2.5), (2, '*', 1.0);
        insert into allocations (job_id, "user", team, host, gpu_index, start_ts, end_ts,
            source_file) values
            ('slurm-7', 'dave', 'research', 'node-b1', 1,
             timestamptz '{START.isoformat()}' + interval 20 hours,
             timestamptz '{START.isoformat()}' + interval 31 hours, 'raw/allocations/a.csv'),
            ('slurm-8', 'erin', null, 'node-a1', 0,
             timestamptz '{START.isoformat()}' + interval 40 hours, null,
             'raw/allocations/a.csv');
        -- pods on node-c1: one holding the MIG device GPU 6 by its UUID, then one holding
        -- its GPU, GPU 5, by its UUID (and so GPU 6 too)
        insert into allocations (job_id, "user", team, host, gpu_index, start_ts, end_ts,
            source_file, gpu_uuid) values
            ('ns/pod-6', null, 'pods', 'node-c1', null,
             timestamptz '{START.isoformat()}' + interval 8 hours,
             timestamptz '{START.isoformat()}' + interval 22 hours, 'raw/allocations/p.csv',
             'GPU-6'),
            ('ns/pod-5', 'alice', null, 'node-c1', null,
             timestamptz '{START.isoformat()}' + interval 18 hours,
             timestamptz '{START.isoformat()}' + interval 27 hours, 'raw/allocations/p.csv',
             'GPU-5');
        -- sacct's records: half the gpustat jobs with an account team; GPU 1's process
        -- job with one; GPU 2's requeued, its account changed for the second start
        insert into slurm_jobs {SLURM_JOB_COLUMNS}
        select
            alloc_job_id, null, 'c1', any_value(alloc_user), 'acct', 'gpu', 'COMPLETED',
            case when hash(alloc_job_id) % 2 = 0 then 'physics' end, 1, [any_value(host)],
            min(ts) - interval 1 minute, max(ts), 'raw/jobs/a.csv',
        from source where alloc_job_id is not null group by alloc_job_id;
        insert into slurm_jobs {SLURM_JOB_COLUMNS} values
            ('j1', null, 'c1', 'bob', 'chem', 'gpu', 'RUNNING', 'chem', 1, ['node-a1'],
             timestamptz '{START.isoformat()}', null, 'raw/jobs/a.csv'),
            ('j2', null, 'c1', 'carol', 'chem', 'gpu', 'REQUEUED', 'chem', 1, ['node-b1'],
             timestamptz '{START.isoformat()}', null, 'raw/jobs/a.csv'),
            ('j2', null, 'c1', 'carol', 'bio', 'gpu', 'RUNNING', 'bio', 1, ['node-b1'],
             timestamptz '{START.isoformat()}' + interval 24 hours, null, 'raw/jobs/a.csv');
        """
    )


@functools.cache
def _source() -> pa.Table:
    """SOURCE_SQL's table, made once per process."""
    with duckdb.connect(":memory:") as con:
        con.execute(SOURCE_SQL)
        return con.table("source").to_arrow_table()


def _fleet() -> Fleet:
    """The fleet's references, no samples yet: its samples to come are `_source()`, the
    connection's view `source` (a view of the Arrow table: a table would copy its 114,000
    rows for each fleet, and into every `built_once` copy)."""
    fleet = Fleet(timezone="Asia/Kolkata", threshold_pct=5.0, min_minutes=30.0)
    fleet.con.register("source", _source())
    _references(fleet.con)
    return fleet


def _first_chunk_built() -> Fleet:
    """The fleet with its first chunk's samples, built: a copy of one built once per process
    (tests/test_models_fixtures.py's built_once), the view `source` registered again."""

    def make() -> Fleet:
        fleet = _fleet()
        _arrive(fleet.con, 0, CHUNK_S, "true")
        build_models(fleet.con, fleet.config)
        return fleet

    fleet = built_once("test_incremental._first_chunk_built", make)
    fleet.con.register("source", _source())
    return fleet


def _recorded_mode(con: duckdb.DuckDBPyConnection) -> str:
    """The mode of the last build, as it recorded it (build_state.builds: one build in an
    in-memory fleet, which publishes nothing)."""
    row = con.execute("select mode from build_state.builds").fetchall()
    assert len(row) == 1
    return str(row[0][0])


def _normal(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 6)
    return value


def _mart(con: duckdb.DuckDBPyConnection, name: str) -> list[tuple[Any, ...]]:
    cursor = con.execute(f"select * from {name} order by all")
    rows = cursor.fetchall()
    # Python floats come from DOUBLE and FLOAT columns alone (or a UNION of one): _normal
    # their values and pass the others as they are (half the time on 100,000 rows)
    floats = [
        index
        for index, (_, column_type, *_) in enumerate(cursor.description or [])
        if str(column_type) in ("DOUBLE", "FLOAT") or str(column_type).startswith("UNION")
    ]
    normal = []
    for row in rows:
        values = list(row)
        for index in floats:
            values[index] = _normal(values[index])
        normal.append(tuple(values))
    return normal


def mart_table(con: duckdb.DuckDBPyConnection, name: str) -> pa.Table:
    """The rows of `name` as `_mart` orders them, as one Arrow table: a tenth of the time of
    `_mart` on 100,000 samples, which builds a Python tuple a row."""
    con.complete()  # a result of execute() left unread (a fetchone's) would refuse sql()
    return con.sql(f"select * from {name} order by all").to_arrow_table()


def assert_same_rows(got: pa.Table, expected: pa.Table, name: str) -> None:
    """`got` holds `expected`'s rows, compared as `_mart` compares them (floats rounded, NaN
    as null): at once when the tables are equal as they are, else row by row, so that a
    difference shows as pytest shows one of two lists."""
    if got.equals(expected):
        return
    assert _table_rows(got) == _table_rows(expected), name


def assert_same_marts(
    con: duckdb.DuckDBPyConnection, other: duckdb.DuckDBPyConnection, names: Iterable[str]
) -> None:
    """Each mart of `names` holds the same rows in both warehouses (`assert_same_rows`)."""
    for name in names:
        assert_same_rows(mart_table(con, name), mart_table(other, name), name)


def _table_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """`_mart`'s rows of an Arrow table: a tuple a row, its float values `_normal`."""
    columns = [
        [_normal(value) for value in column.to_pylist()]
        if pa.types.is_floating(column.type) or pa.types.is_union(column.type)
        else column.to_pylist()
        for column in table.columns
    ]
    return list(zip(*columns, strict=True))


def _built_chunk_by_chunk() -> tuple[Fleet, list[str]]:
    """The fleet built as its chunks arrive, one late; each build's mode. The first chunk's
    build is shared (`_first_chunk_built`): its mode is the one it recorded."""
    incremental = _first_chunk_built()
    total_s = SAMPLES_PER_GPU * 10
    modes = [_recorded_mode(incremental.con)]
    for start_s in range(CHUNK_S, total_s, CHUNK_S):
        # GPU 1's third chunk arrives two chunks late
        held_back = start_s == 2 * CHUNK_S
        _arrive(
            incremental.con,
            start_s,
            start_s + CHUNK_S,
            "gpu_uuid <> 'GPU-1'" if held_back else "true",
        )
        if start_s == 4 * CHUNK_S:
            _arrive(incremental.con, 2 * CHUNK_S, 3 * CHUNK_S, "gpu_uuid = 'GPU-1'")
        modes.append(build_models(incremental.con, incremental.config).mode)
    return incremental, modes


@pytest.fixture(scope="module")
def built() -> tuple[Fleet, Fleet, list[str]]:
    """The same fleet built chunk by chunk, and built once in full."""
    incremental, modes = _built_chunk_by_chunk()
    full = _fleet()
    _arrive(full.con, 0, SAMPLES_PER_GPU * 10, "true")
    assert build_models(full.con, full.config).mode == "full"
    return incremental, full, modes


@pytest.fixture(scope="module")
def full_marts(built: tuple[Fleet, Fleet, list[str]]) -> dict[str, pa.Table]:
    """The full build's marts (`mart_table`), read once for the tests that compare with them
    (Arrow tables: none can change them)."""
    _, full, _ = built
    return {mart: mart_table(full.con, mart) for mart in MARTS}


def assert_marts_equal(con: duckdb.DuckDBPyConnection, expected: dict[str, pa.Table]) -> None:
    """Each mart of `expected` holds its rows in `con`'s warehouse (`assert_same_rows`)."""
    for name, table in expected.items():
        assert_same_rows(mart_table(con, name), table, name)


def test_later_builds_are_incremental(built: tuple[Fleet, Fleet, list[str]]) -> None:
    _, _, modes = built
    assert modes[0] == "full"
    assert set(modes[1:]) == {"incremental"}


@pytest.mark.parametrize("mart", MARTS)
def test_incremental_build_equals_full_build(
    built: tuple[Fleet, Fleet, list[str]], full_marts: dict[str, pa.Table], mart: str
) -> None:
    incremental, _, _ = built
    expected = full_marts[mart]
    assert expected.num_rows, f"{mart} is empty: the data does not exercise it"
    assert_same_rows(mart_table(incremental.con, mart), expected, mart)


def test_incremental_builds_deleting_a_few_series_at_a_time_equal_a_full_build(
    full_marts: dict[str, pa.Table], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At fleet scale each series' replaced rows are deleted a range of series at a time
    (base/deletes.py); here a few hundred rows at a time, the late chunk's rows included."""
    monkeypatch.setattr(deletes, "BATCH_ROWS", 300)
    incremental, _ = _built_chunk_by_chunk()
    assert_marts_equal(incremental.con, full_marts)


def test_data_has_names_first_seen_in_an_incremental_build(
    built: tuple[Fleet, Fleet, list[str]],
) -> None:
    """A host, job, user and status that the first (full) build did not see get their ids
    in an incremental one (gpufleet/warehouse/build/ids.py), and come out by name as a full
    build's do."""
    incremental, _, modes = built
    assert modes[0] == "full"
    for column, value in (
        ("host", "node-c0"),
        ("job_id", "j4"),
        ('"user"', "aaron"),
        ("status", "no_permission"),
    ):
        row = incremental.con.execute(
            f"select count(*) from samples_attributed where {column} = ?", [value]
        ).fetchone()
        assert row is not None and row[0] > 0, column
    first_ts = incremental.con.execute(
        "select min(ts) from samples where gpu_uuid = 'GPU-4'"
    ).fetchone()
    assert first_ts is not None and first_ts[0] >= START + dt.timedelta(seconds=CHUNK_S)


def test_data_has_jobs_of_every_kind(built: tuple[Fleet, Fleet, list[str]]) -> None:
    """The comparison covers jobs only if the data has each kind: the gpustat evidence with
    and without a Slurm team, processes of Slurm jobs (one requeued under another team)."""
    incremental, _, _ = built
    rows = incremental.con.execute(
        """
        select distinct attributed_by, team from samples_attributed
        where team in ('physics', 'chem', 'bio')
            or (attributed_by = 'allocation' and job_id like 'sj-%')
        """
    ).fetchall()
    assert {("allocation", "physics"), ("process", "chem"), ("process", "bio")} <= set(rows)
    assert any(team not in ("physics", "chem", "bio") for _, team in rows)
    peak = incremental.con.execute(
        "select count(*) from job_efficiency where max_mem_used_bytes > 0 and waste_usd > 0"
    ).fetchone()
    assert peak is not None and peak[0] > 0


def test_data_has_runs_across_midnight_and_chunks(built: tuple[Fleet, Fleet, list[str]]) -> None:
    """The comparison means something only if runs cross local midnight (and chunks)."""
    _, full, _ = built
    for table in ("idle_episodes", "thermal_events"):
        crossing = full.con.execute(
            f"""
            select count(*) from {table}
            where timezone('Asia/Kolkata', start_ts)::date
                < timezone('Asia/Kolkata', end_ts)::date
            """
        ).fetchone()
        assert crossing is not None and crossing[0] > 0, table
    waste = full.con.execute("select count(*) from idle_episodes where is_waste").fetchone()
    assert waste is not None and waste[0] > 0


def _stored_runs(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """Stretches of samples_attributed_rows, in stored (rowid) order, of one series with
    rising ts; and how many series there are."""
    row = con.execute(
        """
        select
            count(*) filter (
                where previous_series is distinct from series_id or ts < previous_ts
            ),
            count(distinct series_id),
        from (
            select
                series_id,
                ts,
                lag(series_id) over (order by rowid) as previous_series,
                lag(ts) over (order by rowid) as previous_ts,
            from samples_attributed_rows
        )
        """
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_samples_attributed_is_stored_in_series_and_time_order(
    built: tuple[Fleet, Fleet, list[str]],
) -> None:
    """Stored in series and time order it takes half the bytes (10 per sample at fleet
    scale, not 20), and the build sorts nothing for it: the rows leave the series window
    in that order and keep it only while DuckDB's hash joins after the window build on the
    small tables (warehouse/models.prepare). Built the way DuckDB plans by itself, these
    97,083 samples were stored in 75,000-93,000 stretches."""
    _, full, _ = built
    runs, series = _stored_runs(full.con)
    assert series == 7
    assert runs <= 4 * series  # a stretch can split where the build's two threads meet


def test_nothing_new_is_up_to_date_and_reference_change_is_full() -> None:
    fleet = _first_chunk_built()
    assert _recorded_mode(fleet.con) == "full"
    assert build_models(fleet.con, fleet.config).mode == "up to date"
    _arrive(fleet.con, CHUNK_S, 2 * CHUNK_S, "true")
    assert build_models(fleet.con, fleet.config).mode == "incremental"
    fleet.user("dave", "research")
    result = build_models(fleet.con, fleet.config)
    assert result.mode == "full"
    assert "reference" in result.reason
    # A full build caches Parquet footers while it runs, and only then: later work on the
    # same connection may swap a lake file under the same path.
    cached = fleet.con.execute("select current_setting('parquet_metadata_cache')").fetchone()
    assert cached == (False,)
    assert build_models(fleet.con, fleet.config, full=True).mode == "full"
    state = read_state(fleet.con)
    top = fleet.con.execute("select max(load_id) from samples_stored").fetchone()
    assert state is not None and top is not None and state.samples_load_id == top[0]


def test_a_larger_gpu_name_means_a_full_build() -> None:
    """A series' name is the max over its samples; a new larger one renames old rows."""
    fleet = _fleet()
    _arrive(fleet.con, 0, CHUNK_S, "gpu_uuid = 'GPU-0'")
    build_models(fleet.con, fleet.config)
    fleet.con.execute(
        f"""
        insert into samples_stored by name
        select * replace ('NVIDIA Z200' as gpu_name), {NEXT_LOAD} as load_id from source
        where gpu_uuid = 'GPU-0' and ts >= (select max(ts) from samples)
        limit 10
        """
    )
    result = build_models(fleet.con, fleet.config)
    assert result.mode == "full"
    names = fleet.con.execute("select distinct gpu_name from samples_attributed").fetchall()
    assert names == [("NVIDIA Z200",)]


def test_state_lives_outside_the_main_schema(built: tuple[Fleet, Fleet, list[str]]) -> None:
    """After full and incremental builds (the fleet built chunk by chunk)."""
    fleet, _, _ = built
    schemas = fleet.con.execute(
        "select distinct schema_name from duckdb_tables()"
        " where table_name in ('watermark', 'series')"
    ).fetchall()
    assert schemas == [("build_state",)]


def test_an_episode_that_becomes_waste_after_midnight_counts_on_the_day_before(
    tmp_path: Path,
) -> None:
    """Idle from 23:50 to 00:40 (UTC): waste only once it lasts 30 minutes, which the build
    after midnight learns; its 10 minutes before midnight must then count on the first day,
    also in the other warehouse slot once it has caught up."""
    midnight = dt.datetime(2026, 11, 17, tzinfo=dt.UTC)
    before = midnight - dt.timedelta(minutes=10)
    parts = [
        (before + dt.timedelta(seconds=10), 90),  # 23:50:10 .. 00:05:00
        (before + dt.timedelta(seconds=910), 210),  # 00:05:10 .. 00:40:00
    ]

    def add(fleet: Fleet, part: tuple[dt.datetime, int], *, first: bool) -> None:
        if first:
            fleet.user("alice", "ml")
            fleet.price_rule(1, "*", 2.0)
        process = {"pid": 1, "user": "alice", "used_mem_bytes": 1, "job_id": "j"}
        fleet.series(part[0], part[1], gpu_util_pct=1.0, processes=[process])

    full = Fleet(timezone="UTC", threshold_pct=5.0, min_minutes=30.0)
    for number, part in enumerate(parts):
        add(full, part, first=number == 0)
    build_models(full.con, full.config)

    # Each build publishes one slot; the last, empty write catches the first slot up.
    slotted = Fleet(timezone="UTC", threshold_pct=5.0, min_minutes=30.0)
    config = replace(slotted.config, data_dir=tmp_path)
    for number, part in enumerate(parts):
        with write_transaction(config) as con:
            slotted.con = con
            add(slotted, part, first=number == 0)
            build_models(con, config)
    with write_transaction(config):
        pass
    with connect_read_only(config) as con:
        for mart in ("idle_episodes", "gpu_team_daily", "team_daily", "team_weekly"):
            assert _mart(con, mart) == _mart(full.con, mart), mart
        day_one = con.execute(
            "select waste_gpu_hours from team_daily where day = '2026-11-16'"
        ).fetchone()
    assert day_one is not None
    assert day_one[0] == pytest.approx(59 * 10 / 3600)  # 23:50:10 .. 23:59:50


@pytest.mark.parametrize("batch_rows", [None, 500])
def test_builds_through_the_warehouse_slots_equal_a_full_build(
    built: tuple[Fleet, Fleet, list[str]],
    full_marts: dict[str, pa.Table],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    batch_rows: int | None,
) -> None:
    """Published builds alternate between two warehouse files, each caught up with the
    other's last publish instead of copied; the marts still equal a full build. With
    `batch_rows`, each series' replaced rows are deleted (and replayed) a few series at a
    time, as at fleet scale."""
    _, full, _ = built
    config = replace(full.config, data_dir=tmp_path)
    # The samples to come are read from the full fleet's `source`, not kept in the
    # warehouse, where each catch-up would compare its 97,000 rows with the other slot's.
    source = _source()
    chunk_s = 3 * CHUNK_S  # four publishes: each file is caught up in place once

    def publish(config: Config, start_s: int) -> None:
        with write_transaction(config) as con:
            con.register("source", source)
            # GPU 1's first chunk arrives with the third: the third publish replaces its
            # rows of the second, and the fourth replays that on the other file
            held_back = start_s == 0
            _arrive(con, start_s, start_s + chunk_s, "gpu_uuid <> 'GPU-1'" if held_back else "true")
            if start_s == 2 * chunk_s:
                _arrive(con, 0, chunk_s, "gpu_uuid = 'GPU-1'")
            build_models(con, config)

    def first_publishes(folder: Path) -> None:
        """The references' publish, then the first chunk's, made once per process and
        copied (tests/templates.made_once): the same for every `batch_rows` (the first
        build is a full one, which deletes nothing)."""
        with write_transaction(replace(config, data_dir=folder)) as con:
            con.register("source", source)
            _references(con)
        publish(replace(config, data_dir=folder), 0)

    made_once("test_incremental.first_publishes", first_publishes, tmp_path)
    if batch_rows:
        monkeypatch.setattr(deletes, "BATCH_ROWS", batch_rows)
    inodes = [config.warehouse_path.stat().st_ino]
    for start_s in range(chunk_s, SAMPLES_PER_GPU * 10, chunk_s):
        publish(config, start_s)
        inodes.append(config.warehouse_path.stat().st_ino)
    assert len(inodes) == 4
    assert len(set(inodes)) == 2, "each publish after the first two reuses a file in place"
    assert inodes[2:] == inodes[:-2]
    with connect_read_only(config) as con:
        assert_marts_equal(con, full_marts)
    # A full build after a full build reuses the other file too (its stale marts are all
    # replaced), where any other write after a full build copies the file.
    for _ in range(2):
        assert build(config, full=True).mode == "full"
        inodes.append(config.warehouse_path.stat().st_ino)
    assert set(inodes[-2:]) == set(inodes[:2])
    with connect_read_only(config) as con:
        assert_marts_equal(con, full_marts)
    with write_transaction(config) as con:
        con.register("source", source)
        _arrive(con, 0, 10, "false")
    assert config.warehouse_path.stat().st_ino not in inodes


def test_a_full_build_in_slices_of_the_gpus_equals_one_in_one_go(
    full_marts: dict[str, pa.Table], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At fleet scale the per-series models are built a slice of the GPUs at a time."""
    monkeypatch.setattr(full_module, "FULL_BUILD_CHUNK_SAMPLES", 25_000)  # 4 slices here
    sliced = _fleet()
    _arrive(sliced.con, 0, SAMPLES_PER_GPU * 10, "true")
    sliced.con.unregister("source")  # the fleet's own temporary view: the build leaves none
    assert build_models(sliced.con, sliced.config).mode == "full"
    assert_marts_equal(sliced.con, full_marts)
    runs, series = _stored_runs(sliced.con)
    assert runs <= 4 * series  # each slice's rows in series and time order, too
    temps = sliced.con.execute(
        "select count(*) from duckdb_views() where temporary and not internal"
    ).fetchone()
    assert temps == (0,)


def test_changed_allocations_recompute_their_gpus_incrementally(
    built: tuple[Fleet, Fleet, list[str]],
) -> None:
    """Slurm's allocations change all day (a job ends, one starts): the GPUs they cover are
    recomputed from the allocation's start, not the whole warehouse."""
    incremental, _, _ = built
    changes = f"""
        update allocations set end_ts = timestamptz '{START.isoformat()}' + interval 44 hours
        where job_id = 'slurm-8';
        insert into allocations (job_id, "user", team, host, gpu_index, start_ts, end_ts,
            source_file) values
            ('slurm-9', 'frank', 'vision', 'node-c1', 1,
             timestamptz '{START.isoformat()}' + interval 30 hours,
             timestamptz '{START.isoformat()}' + interval 35 hours, 'raw/allocations/b.csv');
        delete from allocations where job_id = 'slurm-7';
        -- a pod on the MIG device GPU 6 by its UUID (a GPU index that is not its own)
        insert into allocations (job_id, "user", team, host, gpu_index, start_ts, end_ts,
            source_file, gpu_uuid) values
            ('ns/pod-9', 'frank', 'vision', 'node-c1', 0,
             timestamptz '{START.isoformat()}' + interval 36 hours,
             timestamptz '{START.isoformat()}' + interval 39 hours, 'raw/allocations/b.csv',
             'GPU-6');
        update allocations set end_ts = timestamptz '{START.isoformat()}' + interval 20 hours
        where job_id = 'ns/pod-6';
    """
    incremental.con.execute(changes)
    result = build_models(incremental.con, incremental.config)
    assert result.mode == "incremental", result.reason
    assert build_models(incremental.con, incremental.config).mode == "up to date"
    full = _fleet()
    full.con.execute(changes)
    _arrive(full.con, 0, SAMPLES_PER_GPU * 10, "true")
    build_models(full.con, full.config)
    teams = full.con.execute(
        "select count(*) from samples_attributed where team = 'vision'"
    ).fetchone()
    assert teams is not None and teams[0] > 0
    pod_9 = full.con.execute(
        "select distinct gpu_uuid from samples_attributed where job_id = 'ns/pod-9'"
    ).fetchall()
    assert pod_9 == [("GPU-6",)]
    assert_same_marts(incremental.con, full.con, MARTS)


def test_a_run_open_across_a_day_without_samples_keeps_its_start() -> None:
    """A run still open at a build's first day normally has a piece on the day before,
    which the build reads for the run's start; samples 30 h apart that count as contiguous
    (interval 15 h) leave a day with none, and the build then reads further back."""
    start = dt.datetime(2026, 11, 10, 1, 0, tzinfo=dt.UTC)
    arrivals = [start + dt.timedelta(hours=30 * k) for k in range(5)]  # none on Nov 14
    assert dt.date(2026, 11, 14) not in {ts.date() for ts in arrivals}
    incremental, full = Fleet(), Fleet()
    modes = []
    for ts in arrivals:
        for fleet in (incremental, full):
            fleet.sample(ts, interval_s=54_000.0, gpu_util_pct=0.0)
        modes.append(build_models(incremental.con, incremental.config).mode)
    assert modes == ["full"] + ["incremental"] * 4
    assert build_models(full.con, full.config, full=True).mode == "full"
    episodes = _mart(incremental.con, "idle_episodes")
    assert episodes == _mart(full.con, "idle_episodes")
    one = incremental.con.execute("select samples, idle_seconds from idle_episodes").fetchall()
    assert one == [(5, 5 * 54_000.0)]  # one episode of all five samples
    assert_same_marts(incremental.con, full.con, ("run_pieces", "gpu_team_daily", "team_daily"))


def _built_by_the_minute(
    timezone: str, cuts_min: tuple[int, ...]
) -> tuple[Fleet, Fleet, list[BuildResult]]:
    """One GPU sampled once a minute from 2026-10-24 22:00 UTC, idle and thermal in blocks
    that cross the builds' cuts (minutes from the start); built after each stretch, and a
    second fleet with the same samples built once in full at the end."""
    start = dt.datetime(2026, 10, 24, 22, 0, tzinfo=dt.UTC)
    incremental = Fleet(timezone=timezone, min_minutes=20.0)
    full = Fleet(timezone=timezone, min_minutes=20.0)

    def pattern(minute: int) -> dict[str, Any]:
        return {
            "gpu_util_pct": 0.0 if minute % 90 < 50 else 60.0,
            "clock_event_mask": 32 if minute % 70 < 25 else 0,
        }

    results = []
    for first, end in itertools.pairwise(cuts_min):
        # the minutes of the stretch a sample each, in runs of the same values (a series)
        for _, run in itertools.groupby(range(first, end), key=lambda m: tuple(pattern(m).items())):
            minutes = list(run)
            for fleet in (incremental, full):
                fleet.series(
                    start + dt.timedelta(minutes=minutes[0]),
                    len(minutes),
                    step_s=60.0,
                    **pattern(minutes[0]),
                )
        results.append(build_models(incremental.con, incremental.config))
    assert build_models(full.con, full.config, full=True).mode == "full"
    return incremental, full, results


def test_builds_cut_inside_the_hour_repeated_when_clocks_go_back() -> None:
    """An incremental build recomputes from the local hour of the first new sample. On
    2026-10-25 Berlin's 02:00-03:00 happens twice (UTC 00:00-02:00); builds that start in
    its second pass must replace that hour's rows with both passes' samples."""
    # the third and fourth builds begin at 01:20 and 01:40 UTC, the second pass
    incremental, full, results = _built_by_the_minute("Europe/Berlin", (0, 140, 200, 220, 300))
    assert [r.mode for r in results] == ["full", "incremental", "incremental", "incremental"]
    repeated = incremental.con.execute(
        "select samples from gpu_hourly where day = date '2026-10-25' and hour = 2"
    ).fetchall()
    assert repeated == [(120,)]  # both passes of 02:00-03:00, one sample a minute
    assert_same_marts(incremental.con, full.con, MARTS)


def test_a_clock_going_back_two_hours_means_a_full_build_that_equals_one() -> None:
    """Troll (Antarctica) goes from UTC+2 to UTC+0 at 01:00 UTC on 2026-10-25: local
    01:00-03:00 happens twice. New samples from 00:30 UTC (local 02:30) on would make a
    window of local hours 02 on, which leaves out the second pass of 01 (01:00-02:00 UTC)
    though it comes later: those builds must be full ones, the others incremental, and the
    result that of one full build."""
    incremental, full, results = _built_by_the_minute(
        "Antarctica/Troll", (0, 100, 150, 260, 300, 360)
    )
    rows = incremental.con.execute("select hour from samples_attributed order by ts").fetchall()
    hours = [hour for (hour,) in rows]
    changes = [hour for i, hour in enumerate(hours) if i == 0 or hour != hours[i - 1]]
    assert changes == [0, 1, 2, 1, 2, 3]  # the local hours going back two
    assert [r.mode for r in results] == ["full", "incremental", "full", "full", "incremental"]
    assert "clock change" in results[2].reason
    assert_same_marts(incremental.con, full.con, MARTS)
