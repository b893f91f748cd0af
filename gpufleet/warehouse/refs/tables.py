"""Writing the reference tables, allocations and Slurm job records into the warehouse.

`replace_references` replaces each table's rows with a file's, and says whether a row the
models read changed. The contacts (users' addresses, teams' leads) are kept in tables of
their own, `ref_user_emails` and `ref_teams`: the models never read them, so a changed
address neither changes `ref_users` nor makes the next build a full one. The size and
modification time each allocation and job file had when read are kept in
`build_state.allocation_files`, so that an unchanged file is not read again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base.catalog import has_table
from gpufleet.warehouse.base.table_docs import TableDoc, document, table_comments
from gpufleet.warehouse.publish.read_only import connect_read_only
from gpufleet.warehouse.refs.jobs import read_jobs
from gpufleet.warehouse.refs.listing import ReadListed, listed_files
from gpufleet.warehouse.refs.read import read_allocations
from gpufleet.warehouse.refs.records import AllocationFile, References, SetAside


def published_allocation_files(config: Config) -> dict[str, tuple[int, int]]:
    """(size, mtime_ns) of each allocation and job file as the published warehouse last
    read it, for `read_references(known=...)`; empty when there is no warehouse (or none
    readable: every file is read then, as on the first ingest), and when no such file is
    listed, without opening the warehouse (every ingest asks)."""
    if not config.warehouse_path.is_file() or not (
        listed_files(config.allocations_dir) or listed_files(config.jobs_dir)
    ):
        return {}
    try:
        with contextlib.closing(connect_read_only(config)) as con:
            return _allocation_files(con)
    except (GpufleetError, duckdb.Error):
        return {}


def _allocation_files(
    con: duckdb.DuckDBPyConnection, *, exists: bool = False
) -> dict[str, tuple[int, int]]:
    """build_state.allocation_files as a dict (empty when the table is not there; `exists`:
    it is known to be)."""
    if not exists and not has_table(con, ALLOCATION_FILES):
        return {}
    rows = con.execute(
        "select path, size_bytes, mtime_ns from build_state.allocation_files"
    ).fetchall()
    return {path: (size, mtime) for path, size, mtime in rows}


_TS = pa.timestamp("us", tz="UTC")
_ARROW_SCHEMAS: dict[str, pa.Schema] = {
    "ref_users": pa.schema([("user", pa.string()), ("team", pa.string())]),
    "ref_user_emails": pa.schema([("user", pa.string()), ("email", pa.string())]),
    "ref_teams": pa.schema(
        [("team", pa.string()), ("lead_email", pa.string()), ("cc", pa.list_(pa.string()))]
    ),
    "ref_hosts": pa.schema(
        [
            ("rule_order", pa.int32()),
            ("host_glob", pa.string()),
            ("team", pa.string()),
            ("cluster", pa.string()),
        ]
    ),
    "ref_prices": pa.schema(
        [
            ("rule_order", pa.int32()),
            ("gpu_glob", pa.string()),
            ("usd_per_gpu_hour", pa.float64()),
            ("cluster", pa.string()),
        ]
    ),
    "ref_users_dated": pa.schema(
        [("user", pa.string()), ("team", pa.string()), ("valid_from", pa.date32())]
    ),
    "ref_hosts_dated": pa.schema(
        [
            ("rule_order", pa.int32()),
            ("host_glob", pa.string()),
            ("team", pa.string()),
            ("valid_from", pa.date32()),
            ("cluster", pa.string()),
        ]
    ),
    "ref_prices_dated": pa.schema(
        [
            ("rule_order", pa.int32()),
            ("gpu_glob", pa.string()),
            ("usd_per_gpu_hour", pa.float64()),
            ("valid_from", pa.date32()),
            ("cluster", pa.string()),
        ]
    ),
    "allocations": pa.schema(
        [
            ("job_id", pa.string()),
            ("user", pa.string()),
            ("team", pa.string()),
            ("host", pa.string()),
            ("gpu_index", pa.uint16()),
            ("start_ts", _TS),
            ("end_ts", _TS),
            ("source_file", pa.string()),
            ("cluster", pa.string()),
            ("gpu_uuid", pa.string()),
        ]
    ),
    "slurm_jobs": pa.schema(
        [
            ("job_id", pa.string()),
            ("job_id_raw", pa.string()),
            ("cluster", pa.string()),
            ("user", pa.string()),
            ("account", pa.string()),
            ("partition", pa.string()),
            ("state", pa.string()),
            ("team", pa.string()),
            ("gpus", pa.int32()),
            ("hosts", pa.list_(pa.string())),
            ("start_ts", _TS),
            ("end_ts", _TS),
            ("seen_ts", _TS),
            ("source_file", pa.string()),
        ]
    ),
}


def _row_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The rows of each table `replace_references` writes and of ALLOCATION_FILES, in one
    statement: most are empty and stay so, and an empty table needs no comparison (an ingest
    ran ten). A union of counts: scalar subqueries took DuckDB 25 times as long to plan."""
    tables = [*_ARROW_SCHEMAS, ALLOCATION_FILES]
    counts = con.execute(
        " union all ".join(f"select '{table}', count(*) from {table}" for table in tables)
    ).fetchall()
    return {str(table): int(count) for table, count in counts}


def _replace_table(
    con: duckdb.DuckDBPyConnection,
    table: str,
    rows: Sequence[tuple[Any, ...]],
    *,
    keep: str = "false",
    stored: int | None = None,
) -> bool:
    """Replace every row of `table` but those `keep` (a condition on its columns) holds
    for with `rows` (one insert through Arrow); True if anything changed. `stored`: the
    rows `table` holds, when known (an empty table is not compared)."""
    if stored == 0 and not rows:
        return False
    schema = _ARROW_SCHEMAS[table]
    arrays = [
        pa.array([row[position] for row in rows], type=column.type)
        for position, column in enumerate(schema)
    ]
    arrow = pa.Table.from_arrays(arrays, schema=schema)
    names = ", ".join(f'"{name}"' for name in schema.names)
    con.register("_ref_rows", arrow)
    try:
        changed = stored == 0 or _differs(con, table, names, keep)
        if changed:
            if stored != 0:
                con.execute(f"delete from {table} where not ({keep})")
            con.execute(f"insert into {table} ({names}) select {names} from _ref_rows")
    finally:
        con.unregister("_ref_rows")
    return changed


def _differs(con: duckdb.DuckDBPyConnection, table: str, names: str, keep: str) -> bool:
    """Whether the rows of `table` but those `keep` holds for differ from `_ref_rows`."""
    replaced = f"(select {names} from {table} where not ({keep}))"
    difference = con.execute(
        f"""
        select count(*) from (
            (select {names} from {replaced} except all select {names} from _ref_rows)
            union all
            (select {names} from _ref_rows except all select {names} from {replaced})
        )
        """
    ).fetchall()  # fetched to the end: DuckDB refuses to unregister under an open result
    return bool(difference[0][0])


# The contact tables: created here, as only the ingest of the reference files writes them.
CONTACT_TABLES_DDL = """
create table if not exists ref_user_emails (
    "user" varchar not null,
    email varchar not null
);
create table if not exists ref_teams (
    team varchar not null,
    lead_email varchar not null,
    cc varchar[] not null
);
"""
CONTACT_TABLES_DOCS: tuple[TableDoc, ...] = (
    (
        "ref_user_emails",
        None,
        "ref/users.csv's optional email column: where the idle notices of each user go "
        "(gpufleet notify idle). Loaded by gpufleet ingest.",
    ),
    ("ref_user_emails", "user", "Process owner or allocation user, as in ref_users."),
    ("ref_user_emails", "email", "The user's email address."),
    (
        "ref_teams",
        None,
        "ref/teams.csv: each team's lead, who receives the team's mail (and the idle notices "
        "of its users without an address). Loaded by gpufleet ingest.",
    ),
    ("ref_teams", "team", "Team name, as in ref_users and the marts."),
    ("ref_teams", "lead_email", "Email address of the team's lead."),
    ("ref_teams", "cc", "Addresses copied on the team's mail (may be empty)."),
)


CONTACT_TABLES = ("ref_user_emails", "ref_teams")


def ensure_contact_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create ref_user_emails and ref_teams if they do not exist yet, and document them
    where their comments differ: one catalog query when they are there as documented (every
    ingest runs this)."""
    current = table_comments(con, CONTACT_TABLES)
    if any((table, None) not in current for table in CONTACT_TABLES):
        con.execute(CONTACT_TABLES_DDL)
    document(con, CONTACT_TABLES_DOCS, current=current)


ALLOCATION_FILES = "build_state.allocation_files"
ALLOCATION_FILES_DDL = """
create schema if not exists build_state;
create table if not exists build_state.allocation_files (
    path varchar primary key,      -- relative to the data directory
    size_bytes bigint not null,
    mtime_ns bigint not null
);
"""


def _replace_listed(
    con: duckdb.DuckDBPyConnection,
    table: str,
    rows: Sequence[tuple[Any, ...]],
    files: Sequence[AllocationFile],
    unread: frozenset[str],
    stored: dict[str, tuple[int, int]],
    read: ReadListed,
    set_aside: list[SetAside] | None,
    count: int,
) -> bool:
    """Make `table` (of `count` rows) the rows of the `files` listed: the files not read
    keep their rows when this warehouse read them at the same (size, mtime) (else they are
    read now, their bad lines added to `set_aside`: another ingest published in between);
    every other row is replaced. True if any row changed."""
    rows = list(rows)
    kept: list[str] = []
    for file in files:
        if file.source not in unread:
            continue
        if stored.get(file.source) == file.signature:
            kept.append(file.source)
        else:
            rows.extend(read(file.path, file.source, set_aside=set_aside))
    if count == 0:  # no row to keep
        return _replace_table(con, table, rows, stored=0)
    con.execute("create or replace temp table _kept_sources (source_file varchar)")
    try:
        con.execute("insert into _kept_sources select unnest(?::varchar[])", [kept])
        return _replace_table(
            con,
            table,
            rows,
            keep="source_file in (select source_file from _kept_sources)",
            stored=count,
        )
    finally:
        con.execute("drop table temp._kept_sources")


def _replace_scheduler_files(
    con: duckdb.DuckDBPyConnection,
    references: References,
    set_aside: list[SetAside] | None,
    counts: dict[str, int],
) -> bool:
    """Make `allocations` and `slurm_jobs` the rows of the files listed, and record each
    file's (size, mtime) in build_state.allocation_files, but a file set aside whole (it is
    read again while it is there: it goes to quarantine/). True if any row changed."""
    stored = _allocation_files(con, exists=True) if counts[ALLOCATION_FILES] else {}
    changed = _replace_listed(
        con,
        "allocations",
        references.allocations,
        references.allocation_files,
        references.unread,
        stored,
        read_allocations,
        set_aside,
        counts["allocations"],
    )
    changed |= _replace_listed(
        con,
        "slurm_jobs",
        references.jobs,
        references.job_files,
        references.unread,
        stored,
        read_jobs,
        set_aside,
        counts["slurm_jobs"],
    )
    whole = {item.source for item in (*references.set_aside, *(set_aside or ())) if item.whole_file}
    listed = {
        file.source: file.signature
        for file in (*references.allocation_files, *references.job_files)
        if file.source not in whole
    }
    if stored != listed:
        con.execute("delete from build_state.allocation_files")
        con.execute(
            "insert into build_state.allocation_files"
            " select unnest(?::varchar[]), unnest(?::bigint[]), unnest(?::bigint[])",
            [list(listed), [size for size, _ in listed.values()], [m for _, m in listed.values()]],
        )
    return changed


def replace_references(
    con: duckdb.DuckDBPyConnection,
    references: References,
    *,
    set_aside: list[SetAside] | None = None,
) -> bool:
    """Replace ref_users, ref_hosts, ref_prices (the rows without `valid_from`), their
    `_dated` tables (the rows with), allocations and slurm_jobs, and the contacts; True if a
    row the models read changed (a changed address needs no build). The bad lines of the
    allocation and job files read here (another ingest published since `references` were
    read) go to `set_aside` (None: the first fails)."""
    users, hosts, prices = references.users, references.hosts, references.prices
    ensure_contact_tables(con)
    con.execute(ALLOCATION_FILES_DDL)
    counts = _row_counts(con)
    modelled: dict[str, Sequence[tuple[Any, ...]]] = {
        "ref_users": [row for row in users if row.valid_from is None],
        "ref_hosts": [
            (r.rule_order, r.host_glob, r.team, r.cluster) for r in hosts if r.valid_from is None
        ],
        "ref_prices": [
            (r.rule_order, r.gpu_glob, r.usd_per_gpu_hour, r.cluster)
            for r in prices
            if r.valid_from is None
        ],
        "ref_users_dated": [
            (r.user, r.team, r.valid_from) for r in users if r.valid_from is not None
        ],
        "ref_hosts_dated": [
            (r.rule_order, r.host_glob, r.team, r.valid_from, r.cluster)
            for r in hosts
            if r.valid_from is not None
        ],
        "ref_prices_dated": [
            (r.rule_order, r.gpu_glob, r.usd_per_gpu_hour, r.valid_from, r.cluster)
            for r in prices
            if r.valid_from is not None
        ],
    }
    changed = [
        *(
            _replace_table(con, table, rows, stored=counts[table])
            for table, rows in modelled.items()
        ),
        _replace_scheduler_files(con, references, set_aside, counts),
    ]
    contacts: dict[str, Sequence[tuple[Any, ...]]] = {
        "ref_user_emails": [(user.user, user.email) for user in users if user.email is not None],
        "ref_teams": [(t.team, t.lead_email, list(t.cc)) for t in references.teams],
    }
    for table, rows in contacts.items():
        _replace_table(con, table, rows, stored=counts[table])
    return any(changed)
