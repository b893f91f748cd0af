"""Loading a batch through a staging table: casting, finding bad files, dropping duplicates.

The batch's rows are staged per schema group with every value cast to the contract type;
files with a NULL in a required column, a value that does not fit or one out of its range
(`values.py`: the rules, and the order they are checked in) are set aside for quarantine,
the first bad row of each naming the reason, and only the first row of each (gpu_uuid, ts)
not already loaded is inserted.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.base.folder_sites import folder_site, site_problem_sql, site_sql
from gpufleet.warehouse.base.raw_tables import (
    QUOTED_SAMPLE_COLUMNS,
    REQUIRED_SAMPLE_COLUMNS,
    SAMPLE_COLUMNS,
    literal_path,
)
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest.batch import (
    EXISTING_KEYS_SQL,
    BatchOutcome,
    add_loaded_files,
    create_existing_view,
)
from gpufleet.warehouse.ingest.schemas import CONTRACT_TYPES, unreadable_reason
from gpufleet.warehouse.ingest.values import (
    TimeLimits,
    range_problem_sql,
    time_window,
    ts_problem_sql,
)
from gpufleet.warehouse.lake.compact_ahead import CompactAhead
from gpufleet.warehouse.publish.log import current_generation

_QUOTED = QUOTED_SAMPLE_COLUMNS
_STAGING_DDL = (
    "create or replace temp table _ingest_batch (_file_index integer, _row bigint, "
    + ", ".join(f'"{name}" {kind}' for name, kind in SAMPLE_COLUMNS)
    + ", _problem varchar)"
)

# The batch's rows that are new: the first of their (gpu_uuid, ts) in the batch (by file,
# then row; a hash aggregate over the keys, no sort of the wide rows) and absent from
# `samples`.
NEW_ROWS_SQL = f"""
with
existing as ({EXISTING_KEYS_SQL.format(batch="_ingest_batch")}),
first_rows as (
    select arg_min(rowid, _file_index::bigint * 4294967296 + _row) as batch_rowid
    from _ingest_batch
    group by gpu_uuid, ts
),
final as (
    select {_QUOTED}, $load_id as load_id
    from _ingest_batch as batch
    where batch.rowid in (select batch_rowid from first_rows)
        and not exists (
            select 1
            from existing
            where existing.gpu_uuid = batch.gpu_uuid and existing.ts = batch.ts
        )
)
select * from final
order by gpu_uuid, ts
"""


def load_staged_batch(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    schemas: dict[str, dict[str, str]],
    ahead: CompactAhead | None = None,
    *,
    limits: TimeLimits,
) -> BatchOutcome:
    """Insert one batch's new rows into `samples_stored` through the staging table, with
    bad files (a time outside `limits` among the reasons) set aside and duplicates dropped
    (also those of the files written `ahead`)."""
    outcome = BatchOutcome()
    con.execute(_STAGING_DDL)
    _stage_batch(con, config, batch, schemas, outcome.bad, limits)
    _set_aside_bad_files(con, batch, outcome.bad)
    add_loaded_files(con, "_ingest_batch", batch, outcome)
    if outcome.rows_read:
        outcome.rows_inserted = _insert_new_rows(con, config, ahead)
    con.execute("drop table _ingest_batch")
    return outcome


def _stage_batch(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    schemas: dict[str, dict[str, str]],
    bad: dict[str, str],
    limits: TimeLimits,
) -> None:
    """Stage every file's rows, one read_parquet per schema group; a file that does not
    read goes into `bad` (path -> reason)."""
    # Files of one schema go through one read_parquet; indexes keep the batch's file order.
    groups: dict[tuple[tuple[str, str], ...], list[tuple[int, SampleFile]]] = {}
    for index, file in enumerate(batch):
        columns = schemas[file.path]
        key = tuple(sorted((n, t) for n, t in columns.items() if n in CONTRACT_TYPES))
        groups.setdefault(key, []).append((index, file))
    for key, members in groups.items():
        columns = dict(key)
        try:
            _stage_group(con, config, members, columns, limits)
        except duckdb.Error:
            # A file whose footer reads but whose data does not: find it file by file.
            for member in members:
                try:
                    _stage_group(con, config, [member], columns, limits)
                except duckdb.OutOfMemoryException:
                    raise  # the machine's problem, not the file's
                except duckdb.Error as exc:
                    path = member[1].path
                    bad[path] = unreadable_reason(exc, str(config.data_dir / path), path)


def _stage_group(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    members: Sequence[tuple[int, SampleFile]],
    columns: dict[str, str],
    limits: TimeLimits,
) -> None:
    """Insert one schema group's rows into the staging table (all or nothing)."""
    paths = [literal_path(str(config.data_dir / file.path)) for _, file in members]
    indexes = [index for index, _ in members]
    windows = [time_window(file.path, limits) for _, file in members]
    sites = [folder_site(file.path) for _, file in members]
    # `file_index` is read_parquet's 0-based position of the row's file in `paths`.
    con.execute(
        f"""
        insert into _ingest_batch
        select
            list_extract($indexes::integer[], src.file_index::integer + 1) as _file_index,
            src.file_row_number as _row,
            {_staging_select(columns)}
        from read_parquet($paths, file_row_number = true, hive_partitioning = false) as src
        """,
        {
            "paths": paths,
            "indexes": indexes,
            "lows": [window.low for window in windows],
            "highs": [window.high for window in windows],
            "early": [window.too_early for window in windows],
            "late": [window.too_late for window in windows],
            "sites": sites,
        },
    )


def _staging_select(columns: dict[str, str]) -> str:
    """SELECT list that casts one schema group's columns to the contract types.

    Every cast is a try_cast; `_problem` names the first of a row's problems, in the order
    of `values.py`: a NULL in a required column, a value that did not survive its cast, a
    value out of its range (`ts` out of its file's window: the lists `$lows`, `$highs`,
    `$early` and `$late`, by file), each in column order, then a `cluster` that is not the
    site of its file's folder (`$sites`, by file; `base/folder_sites.py`), which a NULL
    `cluster` takes. The file holding it is quarantined.
    """
    site = "list_extract($sites::varchar[], src.file_index::integer + 1)"
    selects: list[str] = []
    nulls: list[str] = []
    unfit: list[str] = []
    ranges: list[str] = []
    for name, kind in SAMPLE_COLUMNS:
        quoted = f'"{name}"'
        if name not in columns:
            selects.append(f"{site if name == 'cluster' else 'null'}::{kind} as {quoted}")
            continue
        value = f"try_cast(src.{quoted} as {kind})"
        selects.append(f"{site_sql(value, site) if name == 'cluster' else value} as {quoted}")
        if name in REQUIRED_SAMPLE_COLUMNS:
            nulls.append(
                f"case when src.{quoted} is null then 'null in required column {name}' end"
            )
        unfit.append(
            f"case when src.{quoted} is not null and {value} is null "
            f"then 'column {name}: value ' || left(src.{quoted}::varchar, 40) "
            f"|| ' does not fit {kind.upper()}' end"
        )
        if name == "ts":
            position = "src.file_index::integer + 1"
            ranges.append(
                ts_problem_sql(
                    value,
                    f"list_extract($lows::timestamptz[], {position})",
                    f"list_extract($highs::timestamptz[], {position})",
                    f"list_extract($early::varchar[], {position})",
                    f"list_extract($late::varchar[], {position})",
                )
            )
        elif name == "cluster":
            ranges.append(site_problem_sql(value, site))
        elif (check := range_problem_sql(name, value)) is not None:
            ranges.append(check)
    problems = nulls + unfit + ranges
    problem = f"coalesce({', '.join(problems)})" if problems else "null::varchar"
    return ", ".join(selects) + f", {problem} as _problem"


def _set_aside_bad_files(
    con: duckdb.DuckDBPyConnection, batch: Sequence[SampleFile], bad: dict[str, str]
) -> None:
    """Add the files with a staged `_problem` to `bad`, and drop every bad file's rows."""
    for index, reason in con.execute(
        "select _file_index, arg_min(_problem, _row) from _ingest_batch "
        "where _problem is not null group by _file_index"
    ).fetchall():
        bad[batch[index].path] = reason
    bad_indexes = [i for i, f in enumerate(batch) if f.path in bad]
    if bad_indexes:
        con.execute(
            "delete from _ingest_batch where list_contains($bad, _file_index)",
            {"bad": bad_indexes},
        )


def _insert_new_rows(
    con: duckdb.DuckDBPyConnection, config: Config, ahead: CompactAhead | None
) -> int:
    """Insert the staged rows that are new (NEW_ROWS_SQL); the rows inserted."""
    min_ts, max_ts = con.execute("select min(ts), max(ts) from _ingest_batch").fetchone() or (
        None,
        None,
    )
    create_existing_view(con, config, min_ts, max_ts, ahead, "_ingest_batch")
    inserted = con.execute(
        f"insert into samples_stored ({_QUOTED}, load_id) {NEW_ROWS_SQL}",
        {"min_ts": min_ts, "max_ts": max_ts, "load_id": current_generation(con)},
    ).fetchone()
    return int(inserted[0]) if inserted else 0
