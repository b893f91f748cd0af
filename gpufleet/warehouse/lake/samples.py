"""The lake's part in the warehouse: samples of built, compacted days kept in their files.

The contract's `samples` view (`samples_stored` and the evicted files), reading the samples of
some days, and `evict_built_days`, which moves a verified host-day's rows out of the file.
Why an evicted file must never be rewritten or moved: `docs/warehouse.md` (the lake).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable

import duckdb

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base.raw_tables import QUOTED_SAMPLE_COLUMNS, literal_path

STORED = "samples_stored"
logger = logging.getLogger("gpufleet.lake")

_COLUMNS = QUOTED_SAMPLE_COLUMNS
_COMPACTED_PATH = r"^raw/samples/date=([0-9]{4}-[0-9]{2}-[0-9]{2})/host=[^/]+/compacted-[^/]+$"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def lake_source(paths: Iterable[str]) -> str:
    """SQL reading these files (absolute paths) in the contract's column order."""
    listed = ", ".join(_quote(literal_path(path)) for path in paths)
    return f"select {_COLUMNS} from read_parquet([{listed}], hive_partitioning = false)"


def evicted_paths(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    first_day: dt.date | None = None,
    last_day: dt.date | None = None,
) -> list[str]:
    """The evicted files (absolute paths) of UTC days in [first_day, last_day]."""
    rows = con.execute(
        """
        select path from build_state.lake_files
        where ($first is null or day >= $first) and ($last is null or day <= $last)
        order by path
        """,
        {"first": first_day, "last": last_day},
    ).fetchall()
    root = config.data_dir.absolute()
    for (path,) in rows:
        if not (root / path).is_file():
            raise GpufleetError(
                f"{root / path}: this compacted file holds samples the warehouse no longer "
                "keeps (build_state.lake_files) and is missing; put it back (from a backup) "
                "where it was"
            )
    return [str(root / row[0]) for row in rows]


def samples_sql(paths: list[str], *, columns: str = _COLUMNS) -> str:
    """`samples_stored` and the files `paths`: every sample they hold, once."""
    sql = f"select {columns} from {STORED}"
    if paths:
        sql += f"\nunion all\nselect {columns} from ({lake_source(paths)})"
    return sql


def create_samples_since(
    con: duckdb.DuckDBPyConnection, config: Config, name: str, since: dt.datetime | None
) -> None:
    """Temp view `name`: every sample from `since` on (and some before), reading only the
    evicted files of the UTC days from since's on (files hold one UTC day each)."""
    paths = (
        evicted_paths(con, config, first_day=since.astimezone(dt.UTC).date())
        if since is not None
        else []
    )
    con.execute(f"create or replace temp view {name} as {samples_sql(paths)}")


def refresh_samples_view(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    """(Re)create the contract's `samples` view over `samples_stored` and the lake."""
    paths = evicted_paths(con, config)
    con.execute(f"create or replace view samples as {samples_sql(paths)}")


def evict_built_days(con: duckdb.DuckDBPyConnection, config: Config) -> int:
    """Move the rows of compacted host-days from `samples_stored` to the lake (each file
    verified to hold exactly them, then listed in `build_state.lake_files`); the number of
    samples evicted. Call only when the marts include every row of `samples_stored` (at the
    end of a build)."""
    candidates = con.execute(
        f"""
        select
            regexp_extract(path, '{_COMPACTED_PATH}', 1)::date as day,
            list(path order by path),
        from loaded_files
        where regexp_matches(path, '{_COMPACTED_PATH}')
            and path not in (select path from build_state.lake_files)
        group by day
        order by day
        """
    ).fetchall()
    evicted = 0
    root = config.data_dir.absolute()
    for day, relative in candidates:
        present = [path for path in relative if (root / path).is_file()]
        if not present:
            continue
        absolute = {str(root / path): path for path in present}
        evicted += _evict_day(con, day, absolute)
    if evicted:
        refresh_samples_view(con, config)
    return evicted


# A host-day file can go when each of its rows is in samples_stored with the same values
# and no other file of the day holds its (gpu_uuid, ts): a 64-bit hash of the whole row
# compares the values (NULLs included).
_ROW_HASH = f"hash({_COLUMNS})"


def _evict_day(con: duckdb.DuckDBPyConnection, day: dt.date, files: dict[str, str]) -> int:
    """Evict the verified files of one UTC day; the rows evicted."""
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    _read_lake_rows(con, files)
    good = _verified_files(con, files, start)
    evicted = _move_to_lake(con, day, files, good, start) if good else 0
    con.execute("drop table temp._lake_rows")
    return evicted


def _read_lake_rows(con: duckdb.DuckDBPyConnection, files: dict[str, str]) -> None:
    """Temp table `_lake_rows`: each row's file, key and row hash, and its key's copies."""
    listed = ", ".join(_quote(literal_path(path)) for path in files)
    con.execute(
        f"""
        create or replace temp table _lake_rows as
        select filename, gpu_uuid, ts, {_ROW_HASH} as row_hash,
            count(*) over (partition by gpu_uuid, ts) as copies,
        from read_parquet([{listed}], hive_partitioning = false, filename = true)
        """
    )


def _verified_files(
    con: duckdb.DuckDBPyConnection, files: dict[str, str], start: dt.datetime
) -> list[str]:
    """The files (absolute paths) whose every row is in samples_stored with the same values
    and its key in no other file; a warning names each other one."""
    verdicts = con.execute(
        f"""
        select
            lake.filename,
            count(*) as rows,
            count(*) filter (where lake.copies = 1 and stored.row_hash = lake.row_hash) as same,
        from _lake_rows as lake
        left join (
            select gpu_uuid, ts, {_ROW_HASH} as row_hash,
            from {STORED}
            where ts >= $start and ts < $end
        ) as stored using (gpu_uuid, ts)
        group by lake.filename
        """,
        {"start": start, "end": start + dt.timedelta(days=1)},
    ).fetchall()
    good = [name for name, rows, same in verdicts if rows == same]
    for name, rows, same in verdicts:
        if rows != same:
            logger.warning(
                "lake: %s stays in the warehouse: %d of its %d samples differ from the warehouse's",
                printable(files.get(name, name)),
                rows - same,
                rows,
            )
    return good


def _move_to_lake(
    con: duckdb.DuckDBPyConnection,
    day: dt.date,
    files: dict[str, str],
    good: list[str],
    start: dt.datetime,
) -> int:
    """Delete the `good` files' rows from samples_stored and list the files in
    build_state.lake_files; the rows deleted."""
    deleted = con.execute(
        f"""
        delete from {STORED} as stored
        using (select gpu_uuid, ts from _lake_rows where list_contains($good, filename)) as lake
        where stored.gpu_uuid = lake.gpu_uuid and stored.ts = lake.ts
            and stored.ts >= $start and stored.ts < $end
        """,
        {"good": good, "start": start, "end": start + dt.timedelta(days=1)},
    ).fetchone()
    con.execute(
        """
        insert into build_state.lake_files (path, day, row_count, evicted_at)
        select files.relative, $day, count(*), now()
        from _lake_rows
        inner join (select unnest($names) as filename, unnest($relatives) as relative) as files
            using (filename)
        group by files.relative
        """,
        {"day": day, "names": good, "relatives": [files[name] for name in good]},
    )
    return int(deleted[0]) if deleted else 0
