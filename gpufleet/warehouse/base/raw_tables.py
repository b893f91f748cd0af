"""DDL of the tables `ingest` writes and the SQL models read (the boundary between them).

`samples_stored` holds the samples (the columns of a sample file,
docs/reference.md#sample-files) that are kept in the warehouse, each with the publish that
loaded it (`load_id`); the `samples` table users query (docs/reference.md#tables) is a view
of it and of the lake's evicted files (`gpufleet.warehouse.lake`). The other tables hold
the reference files and allocations as loaded, with empty CSV cells as NULL.
"""

from __future__ import annotations

import functools

import duckdb
import pyarrow as pa

from gpufleet.collectors.schema import REQUIRED_COLUMNS, SAMPLE_SCHEMA
from gpufleet.warehouse.base.connect import connect
from gpufleet.warehouse.base.notices_sent import TABLE as NOTICES_SENT
from gpufleet.warehouse.base.notices_sent import ensure_sent_log

# The DuckDB type a column of each Arrow type loads into (lists and structs: of these).
_DUCKDB_TYPES = {
    pa.timestamp("us", tz="UTC"): "timestamptz",
    pa.bool_(): "boolean",
    pa.string(): "varchar",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.int16(): "smallint",
    pa.int32(): "integer",
    pa.int64(): "bigint",
    pa.uint16(): "usmallint",
    pa.uint32(): "uinteger",
    pa.uint64(): "ubigint",
}


def duckdb_type(arrow: pa.DataType) -> str:
    """The DuckDB type of a sample column of type `arrow` (as DuckDB reads it from Parquet)."""
    if pa.types.is_list(arrow):
        return f"{duckdb_type(arrow.value_type)}[]"
    if pa.types.is_struct(arrow):
        fields = ", ".join(f'"{field.name}" {duckdb_type(field.type)}' for field in arrow)
        return f"struct({fields})"
    return _DUCKDB_TYPES[arrow]


# (name, DuckDB type) of every sample column, in contract order: the collectors' schema's.
SAMPLE_COLUMNS = tuple((field.name, duckdb_type(field.type)) for field in SAMPLE_SCHEMA)
SAMPLE_TYPES = dict(SAMPLE_COLUMNS)
REQUIRED_SAMPLE_COLUMNS = REQUIRED_COLUMNS
# The columns sample files gained after the first release, appended in contract order: an
# older file (or a compacted file of an older release) has none of them and reads as NULL
# there, and a warehouse of an older release gets them when opened for writing.
# How many of the sample columns (the first ones) the files of the first release hold.
FIRST_RELEASE_COLUMNS = SAMPLE_SCHEMA.names.index("alloc_job_id")
ADDED_SAMPLE_COLUMNS = tuple(SAMPLE_SCHEMA.names[FIRST_RELEASE_COLUMNS:])
# The sample columns as a SELECT or INSERT list, in contract order.
QUOTED_SAMPLE_COLUMNS = ", ".join(f'"{name}"' for name in SAMPLE_SCHEMA.names)

_GLOB_LITERALS = str.maketrans({"[": "[[]", "*": "[*]", "?": "[?]"})


def literal_path(path: str) -> str:
    """`path` as a pattern that `read_parquet`/`parquet_schema` match only to that file.

    They read every path as a glob; host and file names are the collectors' own, so a
    `[`, `*` or `?` in one would otherwise match other files (`c[1].parquet` reads
    `c1.parquet`). Each is put in a bracket class of its own.
    """
    return path.translate(_GLOB_LITERALS)


# A samples_stored of an older release gains the newer columns (NULL in its rows), after
# load_id: the inserts name their columns.
_ADD_SAMPLE_COLUMNS = "".join(
    f'alter table samples_stored add column if not exists "{name}" {SAMPLE_TYPES[name]};\n'
    for name in ADDED_SAMPLE_COLUMNS
)

RAW_TABLES_DDL = f"""
create table if not exists samples_stored (
    {
    ", ".join(
        f'"{name}" {kind}' + (" not null" if name in REQUIRED_SAMPLE_COLUMNS else "")
        for name, kind in SAMPLE_COLUMNS
    )
},
    load_id bigint not null        -- the publish (build_state.generation) that loaded it
);
{_ADD_SAMPLE_COLUMNS}create view if not exists samples as
select {QUOTED_SAMPLE_COLUMNS} from samples_stored;
create table if not exists ref_users (
    "user" varchar not null,
    team varchar not null
);
create table if not exists ref_hosts (
    rule_order integer not null,   -- 1-based row order in hosts.csv: first match wins
    host_glob varchar not null,
    team varchar not null
);
-- the site whose hosts a row applies to (hosts.csv's optional `cluster`; NULL: every site),
-- added after the first release
alter table ref_hosts add column if not exists cluster varchar;
create table if not exists ref_prices (
    rule_order integer not null,   -- 1-based row order in prices.csv: first match wins
    gpu_glob varchar not null,
    usd_per_gpu_hour double not null
);
-- the rows of users.csv, hosts.csv and prices.csv with a valid_from date (the ref_ tables
-- above hold those without); rule_order counts every row of the file
create table if not exists ref_users_dated (
    "user" varchar not null,
    team varchar not null,
    valid_from date not null       -- local day the row applies from
);
create table if not exists ref_hosts_dated (
    rule_order integer not null,
    host_glob varchar not null,
    team varchar not null,
    valid_from date not null
);
alter table ref_hosts_dated add column if not exists cluster varchar;
create table if not exists ref_prices_dated (
    rule_order integer not null,
    gpu_glob varchar not null,
    usd_per_gpu_hour double not null,
    valid_from date not null
);
-- the site a prices.csv row prices (NULL: every site), added after the first release
alter table ref_prices add column if not exists cluster varchar;
alter table ref_prices_dated add column if not exists cluster varchar;
create table if not exists allocations (
    job_id varchar,
    "user" varchar,
    team varchar,                  -- null: look the user up in ref_users
    host varchar not null,
    gpu_index usmallint,           -- null: the row names its GPU by gpu_uuid alone
    start_ts timestamptz not null,
    end_ts timestamptz,            -- null: still running
    source_file varchar not null
);
-- the site (Slurm cluster) whose host of that name a row covers (NULL: every site's), added
-- after the first release
alter table allocations add column if not exists cluster varchar;
-- the MIG device or GPU a row holds by UUID (NULL: the GPU of gpu_index, then required),
-- added with MIG allocations (v1.2)
alter table allocations add column if not exists gpu_uuid varchar;
alter table allocations alter column gpu_index drop not null;
create table if not exists slurm_jobs (
    job_id varchar not null,       -- as Slurm prints it: 4242, 4242_7 (array task), 4242+1
    job_id_raw varchar,            -- its own SLURM_JOB_ID (4242_7 may be 4250); null: unknown
    cluster varchar,
    "user" varchar,
    account varchar,
    partition varchar,
    state varchar,                 -- sacct's current state (its first flag)
    team varchar,                  -- the account's team; null: look the user up in ref_users
    gpus integer,
    hosts varchar[],               -- the job's nodes as collector host names
    start_ts timestamptz not null,
    end_ts timestamptz,            -- null: still running
    seen_ts timestamptz,           -- when the import last saw it running; null: not given
    source_file varchar
);
-- a warehouse of a release before job_id_raw (its rows: null, as their files lack it)
alter table slurm_jobs add column if not exists job_id_raw varchar;
-- a warehouse of a release before seen_ts (its rows: null until their files are read again)
alter table slurm_jobs add column if not exists seen_ts timestamptz;
create table if not exists loaded_files (
    path varchar primary key,      -- relative to the data directory
    size_bytes bigint not null,
    mtime_ns bigint not null,
    row_count bigint not null,
    min_ts timestamptz,
    max_ts timestamptz,
    loaded_at timestamptz not null
);
-- The CRC-32 of a compacted file's bytes as compaction wrote it (NULL: a collector's file,
-- or a compacted file from before it was kept): a new mtime alone is no change
-- (warehouse/lake/content.py).
alter table loaded_files add column if not exists content_hash bigint;
create table if not exists quarantined_files (
    path varchar not null,         -- where the file was found, relative to the data directory
    reason varchar not null,
    quarantined_at timestamptz not null,
    moved_to varchar               -- where it was moved, relative to the data directory
);
alter table quarantined_files add column if not exists moved_to varchar;
create schema if not exists build_state;
-- The compacted host-day files whose samples are read from the lake (warehouse/lake/samples.py).
create table if not exists build_state.lake_files (
    path varchar primary key,      -- relative to the data directory
    day date not null,             -- the UTC date of its samples (its date= partition)
    row_count bigint not null,
    evicted_at timestamptz not null  -- when it joined the lake
);
-- The publish whose ingest wrote it from the rows it loaded, straight into the lake (its
-- samples never in samples_stored; a build takes them as new); NULL: a build evicted it.
alter table build_state.lake_files add column if not exists load_id bigint;
-- How many of the sample columns (the first ones, in contract order) the file holds: the
-- others read as NULL from it (a file of the release before `cluster` holds 26). NULL:
-- listed by a release before alloc_job_id, whose compacted files hold the first 24.
alter table build_state.lake_files add column if not exists sample_columns smallint;
"""


# A warehouse from before the lake kept every sample in a table named `samples`: it becomes
# samples_stored, its rows loaded before any publish (load 0), so the next build is a full one.
_MIGRATE_SAMPLES_TABLE = """
alter table samples rename to samples_stored;
alter table samples_stored add column load_id bigint default 0;
drop table if exists build_state.watermark;
"""


def ensure_raw_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the raw tables if they do not exist yet, or add the columns an older release's
    lack. One catalog query first: a warehouse that has them all, as the DDL leaves them,
    runs none of it (an ingest and a build each opened the warehouse this way 2-3 times)."""
    catalog = _catalog(con)
    if catalog >= _raw_catalog():
        return
    if _table("samples") in catalog:
        con.execute(_MIGRATE_SAMPLES_TABLE)
    con.execute(RAW_TABLES_DDL)
    # notices_sent as well, empty until a notice is sent, so that a query of it works from
    # the first ingest on.
    if _table(NOTICES_SENT) not in catalog:
        ensure_sent_log(con)


# A relation's columns as (kind, schema, name, column, type, nullable); (kind, schema, name,
# None, None, None) for the relation itself: a view or a table without its columns is no match.
_CATALOG_SQL = """
select 'table', schema_name, table_name, column_name, data_type, is_nullable
from duckdb_columns()
where database_name = current_database()
    and table_oid in (
        select table_oid from duckdb_tables() where database_name = current_database()
    )
union all
select 'table', schema_name, table_name, null, null, null from duckdb_tables()
where database_name = current_database()
union all
select 'view', schema_name, view_name, null, null, null from duckdb_views()
where database_name = current_database()
"""

_Relation = tuple[str, str, str, str | None, str | None, bool | None]


def _table(name: str) -> _Relation:
    """The catalog's entry of the table `name` in `main` (a view of that name is another)."""
    return ("table", "main", name, None, None, None)


def _catalog(con: duckdb.DuckDBPyConnection) -> set[_Relation]:
    return set(con.execute(_CATALOG_SQL).fetchall())


@functools.cache
def _raw_catalog() -> frozenset[_Relation]:
    """What RAW_TABLES_DDL leaves in an empty database, with notices_sent (its columns are
    its own module's to add)."""
    with connect() as con:
        con.execute(RAW_TABLES_DDL)
        return frozenset(_catalog(con) | {_table(NOTICES_SENT)})
