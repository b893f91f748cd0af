"""What a build leaves in `build_state` for the next one to decide full or incremental.

The watermark (the last load of `samples_stored` the marts include), the fingerprint of the
SQL, configuration and reference tables, and the allocations and Slurm job records the marts
were built with.
"""

from __future__ import annotations

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
select job_id, "user", team, host, gpu_index, start_ts, end_ts from allocations limit 0;
create table if not exists build_state.slurm_jobs_built as
select job_id, cluster, "user", account, partition, state, team, gpus, hosts, start_ts, end_ts
from slurm_jobs limit 0;
"""

# Allocations and job records are not here: a change in them recomputes the GPUs they cover,
# incrementally.
REFERENCE_TABLES = ("ref_users", "ref_hosts", "ref_prices")

ALLOCATION_COLUMNS = 'job_id, "user", team, host, gpu_index, start_ts, end_ts'
# The allocations added, removed or changed since the marts were built (both directions).
ALLOCATION_CHANGES_SQL = f"""
(select {ALLOCATION_COLUMNS} from allocations
 except all select {ALLOCATION_COLUMNS} from build_state.allocations_built)
union all
(select {ALLOCATION_COLUMNS} from build_state.allocations_built
 except all select {ALLOCATION_COLUMNS} from allocations)
"""


JOB_COLUMNS = (
    'job_id, cluster, "user", account, partition, state, team, gpus, hosts, start_ts, end_ts'
)
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
    return digest.hexdigest()


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
    row = con.execute(
        f"select (select count(*) from ({ALLOCATION_CHANGES_SQL}))"
        f" + (select count(*) from ({JOB_CHANGES_SQL}))"
    ).fetchone()
    return bool(row and row[0])


def record_allocations(con: duckdb.DuckDBPyConnection) -> None:
    """The allocations and job records the marts are now built with (the next build diffs
    against them)."""
    con.execute("delete from build_state.allocations_built")
    con.execute(
        f"insert into build_state.allocations_built select {ALLOCATION_COLUMNS} from allocations"
    )
    con.execute("delete from build_state.slurm_jobs_built")
    con.execute(f"insert into build_state.slurm_jobs_built select {JOB_COLUMNS} from slurm_jobs")
