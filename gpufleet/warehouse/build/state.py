"""What a build leaves in `build_state` for the next one to decide full or incremental.

The watermark (the last load of `samples_stored` the marts include), the fingerprint of the
SQL, configuration and the reference rows without `valid_from`, and the allocations, Slurm
job records and dated reference rows (users.csv, hosts.csv, prices.csv rows with
`valid_from`) the marts were built with: a change in those recomputes from the earliest
date it touches, incrementally.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpufleet.warehouse.build.ids import ensure_id_tables
from gpufleet.warehouse.publish.log import GENERATION_DDL, current_generation

STATE_DDL = """
create schema if not exists build_state;
create table if not exists build_state.watermark (
    samples_load_id bigint not null, -- the last load (samples_stored.load_id) the marts include
    fingerprint varchar not null,    -- of the SQL, configuration and reference tables
    built_at timestamptz not null
);
create table if not exists build_state.allocations_built as
select job_id, "user", team, host, gpu_index, start_ts, end_ts, cluster, gpu_uuid
from allocations limit 0;
-- a build state of a release before the allocations' cluster, then gpu_uuid (last, as
-- ALLOCATION_COLUMNS lists them)
alter table build_state.allocations_built add column if not exists cluster varchar;
alter table build_state.allocations_built add column if not exists gpu_uuid varchar;
create table if not exists build_state.slurm_jobs_built as
select job_id, cluster, "user", account, partition, state, team, gpus, hosts, start_ts, end_ts,
    job_id_raw, seen_ts
from slurm_jobs limit 0;
-- a build state of a release before job_id_raw, then seen_ts (last, as SEEN_COLUMNS lists)
alter table build_state.slurm_jobs_built add column if not exists job_id_raw varchar;
alter table build_state.slurm_jobs_built add column if not exists seen_ts timestamptz;
create table if not exists build_state.dated_references_built (
    kind varchar not null,           -- user, host or price
    "key" varchar not null,          -- the user, host glob or GPU glob
    value varchar not null,          -- the team or price
    valid_from date not null,
    glob_rank bigint,                -- the glob's place in file order (first row's)
    tie_rank bigint                  -- the row's place among its glob's rows of that date
);
"""

# Allocations and job records are not here: a change in them recomputes the GPUs they cover,
# incrementally. Nor are the dated reference rows (ref_*_dated): a change in them
# recomputes every GPU from the earliest valid_from it touches (DATED_REFERENCES_SQL).
REFERENCE_TABLES = ("ref_users",)


def _glob_rules(table: str, glob: str, value: str) -> str:
    """SQL: the rows of hosts.csv or prices.csv (`table` and its `_dated` rows) as (pattern,
    value, valid_from, rule_order, glob_rank: the glob's place by its first row, tie_rank:
    the row's place among the glob's rows of its date)."""
    return f"""
        select
            pattern,
            value,
            valid_from,
            rule_order,
            dense_rank() over (order by first_order, pattern) as glob_rank,
            row_number() over (partition by pattern, valid_from order by rule_order) as tie_rank,
        from (
            select *, min(rule_order) over (partition by pattern) as first_order,
            from (
                select rule_order, {glob} as pattern, {value}::varchar as value,
                    null::date as valid_from,
                from {table}
                union all
                select rule_order, {glob}, {value}::varchar, valid_from,
                from {table}_dated
            )
        )"""


# A hosts.csv row's value: its team, and its site when it names one (it then applies to
# that site's hosts only).
_HOST_VALUE = "case when cluster is null then team else json_array(team, cluster)::varchar end"
# A prices.csv row's value: its price, and its site when it names one.
_PRICE_VALUE = (
    "case when cluster is null then usd_per_gpu_hour::varchar"
    " else json_array(usd_per_gpu_hour, cluster)::varchar end"
)

# The rows without valid_from that decide the marts of every day: their order among
# themselves (rule_order counts the dated rows too, so adding one would renumber the rest).
# The sites of hosts.csv, dated rows too: a host's site is for all time (docs/sites.md).
UNDATED_RULES_SQL = {
    "host_sites": """
        select host_glob, cluster, row_number() over (order by rule_order) as row_rank,
        from (
            select rule_order, host_glob, cluster, from ref_hosts
            union all
            select rule_order, host_glob, cluster, from ref_hosts_dated
        )
        where cluster is not null""",
    **{
        table: f"""
        select
            pattern,
            value,
            row_number() over (order by rule_order) as row_rank,
            dense_rank() over (order by glob_rank) as glob_rank,
        from ({_glob_rules(table, glob, value)})
        where valid_from is null"""
        for table, glob, value in (
            ("ref_hosts", "host_glob", _HOST_VALUE),
            ("ref_prices", "gpu_glob", _PRICE_VALUE),
        )
    },
}

# Every dated reference row with what decides its effect: a row of users.csv by its user,
# a glob's row also by the glob's place in the file and its own among equals.
DATED_REFERENCES_SQL = f"""
select distinct 'user' as kind, "user" as "key", team as value, valid_from,
    null::bigint as glob_rank, null::bigint as tie_rank,
from ref_users_dated
union all
select 'host', pattern, value, valid_from, glob_rank, tie_rank,
from ({_glob_rules("ref_hosts", "host_glob", _HOST_VALUE)})
where valid_from is not null
union all
select 'price', pattern, value, valid_from, glob_rank, tie_rank,
from ({_glob_rules("ref_prices", "gpu_glob", _PRICE_VALUE)})
where valid_from is not null
"""
DATED_REFERENCE_COLUMNS = 'kind, "key", value, valid_from, glob_rank, tie_rank'

ALLOCATION_COLUMNS = 'job_id, "user", team, host, gpu_index, start_ts, end_ts, cluster, gpu_uuid'
# The allocations added, removed or changed since the marts were built (both directions).
ALLOCATION_CHANGES_SQL = f"""
(select {ALLOCATION_COLUMNS} from allocations
 except all select {ALLOCATION_COLUMNS} from build_state.allocations_built)
union all
(select {ALLOCATION_COLUMNS} from build_state.allocations_built
 except all select {ALLOCATION_COLUMNS} from allocations)
"""


JOB_COLUMNS = (
    'job_id, cluster, "user", account, partition, state, team, gpus, hosts, start_ts, end_ts, '
    "job_id_raw"
)
# With when the import last saw each job running: a change of that alone attributes no
# sample anew (JOB_CHANGES_SQL leaves it out), but moves the allocated hours of a running
# job on hosts without samples (alloc_only_daily), so it asks for a build.
SEEN_COLUMNS = f"{JOB_COLUMNS}, seen_ts"
# The rows of slurm_jobs added, removed or changed since the marts were built (both
# directions; which file holds a row does not matter).
JOB_CHANGES_SQL = f"""
(select {JOB_COLUMNS} from slurm_jobs
 except all select {JOB_COLUMNS} from build_state.slurm_jobs_built)
union all
(select {JOB_COLUMNS} from build_state.slurm_jobs_built
 except all select {JOB_COLUMNS} from slurm_jobs)
"""


@dataclass(frozen=True, kw_only=True)
class BuildState:
    """What the last build left behind."""

    samples_load_id: int
    fingerprint: str


def ensure_state_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(GENERATION_DDL)
    ensure_id_tables(con)
    con.execute(STATE_DDL)


def read_state(con: duckdb.DuckDBPyConnection) -> BuildState | None:
    row = con.execute(
        "select samples_load_id, fingerprint from build_state.watermark order by built_at desc"
    ).fetchone()
    return None if row is None else BuildState(samples_load_id=int(row[0]), fingerprint=row[1])


def samples_load_top(con: duckdb.DuckDBPyConnection, *, after: int = -1) -> int:
    """The last load past `after` in `samples_stored` or the files ingest put straight into
    the lake, or `after` if none (loads only grow: zone maps on load_id skip the row groups
    of earlier ones)."""
    row = con.execute(
        """
        select greatest(
            (select max(load_id) from samples_stored where load_id > $after),
            (select max(load_id) from build_state.lake_files where load_id > $after)
        )
        """,
        {"after": after},
    ).fetchall()
    return after if not row or row[0][0] is None else int(row[0][0])


def fingerprint(
    con: duckdb.DuckDBPyConnection, variables: Mapping[str, object], sql_files: Iterable[Path]
) -> str:
    """A digest of everything besides new samples that a build's result depends on."""
    digest = hashlib.sha256()
    for path in sorted(sql_files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for name, value in sorted(variables.items()):
        digest.update(f"{name}={value!r}\0".encode())
    for table in REFERENCE_TABLES:
        row = con.execute(
            f"select count(*), coalesce(sum(hash(t)::hugeint), 0) from {table} as t"
        ).fetchone()
        digest.update(f"{table}:{row}\0".encode())
    for table, rules in UNDATED_RULES_SQL.items():
        row = con.execute(
            f"select count(*), coalesce(sum(hash(t)::hugeint), 0) from ({rules}) as t"
        ).fetchone()
        digest.update(f"{table}:{row}\0".encode())
    return digest.hexdigest()


def dated_references_since(con: duckdb.DuckDBPyConnection) -> dt.date | None:
    """The earliest valid_from of the dated reference rows added, removed or changed since
    the marts were built (None: none): the marts of the local days before it stay as
    they are."""
    row = con.execute(
        f"""
        with current_rows as ({DATED_REFERENCES_SQL})
        select min(valid_from) from (
            (select {DATED_REFERENCE_COLUMNS} from current_rows
             except all select {DATED_REFERENCE_COLUMNS} from build_state.dated_references_built)
            union all
            (select {DATED_REFERENCE_COLUMNS} from build_state.dated_references_built
             except all select {DATED_REFERENCE_COLUMNS} from current_rows)
        )
        """
    ).fetchone()
    return None if row is None or row[0] is None else row[0]


def record_full_build(con: duckdb.DuckDBPyConnection, *, top: int, digest: str) -> None:
    """After a full build: the watermark and fingerprint (the build kept every series' id
    and GPU name in build_state.series, gpufleet/warehouse/build/ids.py)."""
    con.execute("delete from build_state.watermark")
    con.execute("insert into build_state.watermark values (?, ?, now())", [top, digest])
    record_allocations(con)
    # The other warehouse slot cannot replay a full build; it is copied afresh instead.
    con.execute("insert into build_state.full_builds values (?)", [current_generation(con)])


def record_incremental_build(con: duckdb.DuckDBPyConnection, *, top: int) -> None:
    """After an incremental build: the new watermark, and the allocations and job
    records built with."""
    con.execute("update build_state.watermark set samples_load_id = ?, built_at = now()", [top])
    record_allocations(con)


def allocations_changed(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the allocations or the Slurm job records differ from those the marts were
    built with."""
    seen_changes = JOB_CHANGES_SQL.replace(JOB_COLUMNS, SEEN_COLUMNS)
    row = con.execute(
        f"select (select count(*) from ({ALLOCATION_CHANGES_SQL}))"
        f" + (select count(*) from ({seen_changes}))"
    ).fetchone()
    return bool(row and row[0])


def record_allocations(con: duckdb.DuckDBPyConnection) -> None:
    """The allocations, job records and dated reference rows the marts are now built with
    (the next build diffs against them)."""
    _record(con, "build_state.allocations_built", ALLOCATION_COLUMNS, "allocations")
    _record(con, "build_state.slurm_jobs_built", SEEN_COLUMNS, "slurm_jobs")
    _record(
        con,
        "build_state.dated_references_built",
        DATED_REFERENCE_COLUMNS,
        f"({DATED_REFERENCES_SQL})",
    )


def _record(con: duckdb.DuckDBPyConnection, built: str, columns: str, source: str) -> None:
    """Give `built` the rows of `source` (`columns` of each), unless it holds them already:
    most builds change none, and a table not rewritten writes nothing to the write-ahead
    log. (At 250 GPUs x 28 days a cycle's CPU measured the same either way: bench/sizing.md.)"""
    row = con.execute(
        f"""
        select exists (
            (select {columns} from {source} except all select {columns} from {built})
            union all
            (select {columns} from {built} except all select {columns} from {source})
        )
        """
    ).fetchone()
    if row and row[0]:
        con.execute(f"delete from {built}")
        con.execute(f"insert into {built} ({columns}) select {columns} from {source}")
