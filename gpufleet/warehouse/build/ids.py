"""Integer ids, kept across builds, for the names the per-sample table would otherwise repeat.

The id tables in `build_state` (series, hosts, teams, users, jobs, statuses), and recording
the new ids after each model of STABLE_IDS; why an id never changes meaning: `docs/warehouse.md`.
"""

from __future__ import annotations

import duckdb

IDS_DDL = """
create schema if not exists build_state;
create table if not exists build_state.series (
    gpu_uuid varchar primary key,
    gpu_name varchar                 -- max(gpu_name) over the series' samples, as built
);
-- a warehouse made before the series had ids
alter table build_state.series add column if not exists series_id bigint;
-- a MIG device's GPU and slice (int_series_ids), after the series had ids
alter table build_state.series add column if not exists parent_gpu_uuid varchar;
alter table build_state.series add column if not exists mig_share float;
-- a host is its name at its site (host_key: json_array(cluster, host)), so that two sites'
-- hosts of the same name have ids of their own; a full build makes the table anew, so the
-- first (full) build after a release that keyed hosts by name alone drops that table first
create table if not exists build_state.hosts (
    host_key varchar primary key, host_id integer, host varchar, cluster varchar
);
create table if not exists build_state.teams (team varchar primary key, team_id integer);
create table if not exists build_state.users ("user" varchar primary key, user_id integer);
-- a Slurm job id (a string) and the integer that stands for it
create table if not exists build_state.jobs (job_id varchar primary key, job_key integer);
create table if not exists build_state.statuses (status varchar primary key, status_id integer);
"""

# model: (the id table, its name column, the columns kept: the id and any others); the
# model has them all
STABLE_IDS = {
    "int_series_ids": (
        "build_state.series",
        "gpu_uuid",
        ("series_id", "gpu_name", "parent_gpu_uuid", "mig_share"),
    ),
    "int_hosts": ("build_state.hosts", "host_key", ("host_id", "host", "cluster")),
    "int_teams": ("build_state.teams", "team", ("team_id",)),
    "int_users": ("build_state.users", '"user"', ("user_id",)),
    "int_jobs": ("build_state.jobs", "job_id", ("job_key",)),
    "int_statuses": ("build_state.statuses", "status", ("status_id",)),
}


def ensure_id_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(IDS_DDL)


def forget_ids(con: duckdb.DuckDBPyConnection) -> None:
    """Before a full build: every id is assigned afresh. The tables are made anew: deleting
    the rows one by one from their primary-key indexes costs seconds a build."""
    for table, _, _ in STABLE_IDS.values():
        con.execute(f"drop table if exists {table}")
    ensure_id_tables(con)


def record_new_ids(con: duckdb.DuckDBPyConnection, model_name: str) -> None:
    """After building one of the STABLE_IDS models: keep the ids it gave new names."""
    if model_name not in STABLE_IDS:
        return
    table, name_column, kept = STABLE_IDS[model_name]
    columns = ", ".join((name_column, *kept))
    con.execute(
        f"""
        insert into {table} ({columns})
        select {columns},
        from {model_name}
        where {name_column} not in (select {name_column} from {table})
        """
    )
