"""The lake's part in the warehouse: samples of built, compacted days kept in their files.

The contract's `samples` view (`samples_stored` and the evicted files), reading the samples of
some days, and `evict_built_days`, which moves a verified host-day's rows out of the file.
Why an evicted file must never be rewritten or moved: `docs/warehouse.md` (the lake).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base.raw_tables import (
    FIRST_RELEASE_COLUMNS,
    QUOTED_SAMPLE_COLUMNS,
    SAMPLE_COLUMNS,
    literal_path,
)
from gpufleet.warehouse.base.sql_text import literal

STORED = "samples_stored"
logger = logging.getLogger("gpufleet.lake")

_COLUMNS = QUOTED_SAMPLE_COLUMNS
_NAMES = tuple(name for name, _ in SAMPLE_COLUMNS)
_COMPACTED_PATH = r"^raw/samples/date=([0-9]{4}-[0-9]{2}-[0-9]{2})/host=[^/]+/compacted-[^/]+$"

# Lake files by absolute path, each with how many of the sample columns (the first ones,
# in contract order) it holds (`build_state.lake_files.sample_columns`).
LakeFiles = Mapping[str, int]


def held_columns(path: str) -> int:
    """How many of the sample columns the file at `path` holds, from its footer: those
    before the first one it lacks (a compacted file has all of its release's columns)."""
    try:
        names = set(pq.read_schema(path).names)
    except (OSError, pa.ArrowException):
        return len(_NAMES)  # read as it is: the read names the problem
    return next((n for n, name in enumerate(_NAMES) if name not in names), len(_NAMES))


def stored_held(value: int | None) -> int:
    """The columns a file holds by its `lake_files.sample_columns` (NULL: listed by a
    release before the newer columns, whose files hold the first release's)."""
    return FIRST_RELEASE_COLUMNS if value is None else value


def lake_source(files: Iterable[str] | LakeFiles, *, filename: bool = False) -> str:
    """SQL reading these files (absolute paths) in the contract's column order (then
    `filename` if asked), NULL in the columns a file lacks (an older release's): one
    read_parquet per number of columns held. A mapping says how many each holds; of a
    plain list of paths each file's footer says."""
    held = files if isinstance(files, Mapping) else {path: held_columns(path) for path in files}
    groups: dict[int, list[str]] = {}
    for path, count in held.items():
        groups.setdefault(min(count, len(_NAMES)), []).append(path)
    options = "hive_partitioning = false" + (", filename = true" if filename else "")
    reads = []
    for count, paths in groups.items():
        columns = ", ".join(
            f'"{name}"' if n < count else f'null::{kind} as "{name}"'
            for n, (name, kind) in enumerate(SAMPLE_COLUMNS)
        )
        listed = ", ".join(literal(literal_path(path)) for path in paths)
        extra = ", filename" if filename else ""
        reads.append(f"select {columns}{extra} from read_parquet([{listed}], {options})")
    return "\nunion all\n".join(reads)


def evicted_files(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    first_day: dt.date | None = None,
    last_day: dt.date | None = None,
) -> dict[str, int]:
    """The evicted files (absolute paths) of UTC days in [first_day, last_day], each with
    how many sample columns it holds."""
    rows = _listed(con, config, "path, sample_columns", first_day, last_day)
    return {path: stored_held(count) for path, count in rows}


def evicted_paths(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    first_day: dt.date | None = None,
    last_day: dt.date | None = None,
) -> list[str]:
    """The evicted files (absolute paths) of UTC days in [first_day, last_day] (read from
    a warehouse of an older release too: the analysts' reader does)."""
    return [path for (path,) in _listed(con, config, "path", first_day, last_day)]


def _listed(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    columns: str,
    first_day: dt.date | None,
    last_day: dt.date | None,
) -> list[tuple[Any, ...]]:
    """`columns` (path first) of the lake's files of days in [first_day, last_day], path
    absolute; a GpufleetError names a file that is missing."""
    rows = con.execute(
        f"""
        select {columns} from build_state.lake_files
        where ($first is null or day >= $first) and ($last is null or day <= $last)
        order by path
        """,
        {"first": first_day, "last": last_day},
    ).fetchall()
    root = config.data_dir.absolute()
    for path, *_ in rows:
        if not (root / path).is_file():
            raise GpufleetError(
                f"{root / path}: this compacted file holds samples the warehouse no longer "
                "keeps (build_state.lake_files) and is missing; put it back (from a backup) "
                "where it was"
            )
    return [(str(root / path), *rest) for path, *rest in rows]


def samples_sql(files: Sequence[str] | LakeFiles, *, columns: Sequence[str] = _NAMES) -> str:
    """`samples_stored` and the lake files `files` (as `lake_source` takes them): every
    sample they hold, once, with these of its columns. Columns of the first release only
    (a batch's keys) are read from the files as they are, whatever else a file holds."""
    listed = ", ".join(f'"{name}"' for name in columns)
    sql = f"select {listed} from {STORED}"
    if not files:
        return sql
    if all(_NAMES.index(name) < FIRST_RELEASE_COLUMNS for name in columns):
        paths = ", ".join(literal(literal_path(path)) for path in files)
        source = f"read_parquet([{paths}], hive_partitioning = false)"
    else:
        source = f"({lake_source(files)})"
    return sql + f"\nunion all\nselect {listed} from {source}"


def create_samples_since(
    con: duckdb.DuckDBPyConnection, config: Config, name: str, since: dt.datetime | None
) -> None:
    """Temp view `name`: every sample from `since` on (and some before), reading only the
    evicted files of the UTC days from since's on (files hold one UTC day each)."""
    files = (
        evicted_files(con, config, first_day=since.astimezone(dt.UTC).date())
        if since is not None
        else {}
    )
    con.execute(f"create or replace temp view {name} as {samples_sql(files)}")


def refresh_samples_view(con: duckdb.DuckDBPyConnection, config: Config) -> LakeFiles:
    """(Re)create the contract's `samples` view over `samples_stored` and the lake; the
    lake files it names (as `evicted_files` gives them)."""
    files = evicted_files(con, config)
    con.execute(f"create or replace view samples as {samples_sql(files)}")
    return files


def samples_view_is_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the `samples` view has every sample column (a warehouse of an older release
    has the older ones: `refresh_samples_view` makes it anew)."""
    rows = con.execute(
        """
        select count(*) from duckdb_columns()
        where database_name = current_database() and schema_name = 'main'
            and table_name = 'samples' and list_contains($names, column_name)
        """,
        {"names": list(_NAMES)},
    ).fetchall()
    return rows == [(len(_NAMES),)]


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
    staying: list[Differing] = []
    root = config.data_dir.absolute()
    for day, relative in candidates:
        present = [path for path in relative if (root / path).is_file()]
        if not present:
            continue
        absolute = {str(root / path): path for path in present}
        day_evicted, differing = _evict_day(con, day, absolute)
        evicted += day_evicted
        staying += differing
    if staying:  # one line however many: files brought in by hand can be hundreds
        first = min(staying)
        logger.warning(
            "lake: %d compacted file%s stay%s in the warehouse, %d samples differing from "
            "the warehouse's (%s: %d of its %d)",
            len(staying),
            "" if len(staying) == 1 else "s",
            "s" if len(staying) == 1 else "",
            sum(file.differ for file in staying),
            first.path,
            first.differ,
            first.rows,
        )
    if evicted:
        refresh_samples_view(con, config)
    return evicted


# A host-day file can go when each of its rows is in samples_stored with the same values
# and no other file of the day holds its (gpu_uuid, ts): a 64-bit hash of the whole row
# compares the values (NULLs included).
_ROW_HASH = f"hash({_COLUMNS})"


def _evict_day(
    con: duckdb.DuckDBPyConnection, day: dt.date, files: dict[str, str]
) -> tuple[int, list[Differing]]:
    """Evict the verified files of one UTC day; the rows evicted, and the files that stay."""
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    held = {path: held_columns(path) for path in files}  # a file of an older release too
    _read_lake_rows(con, held)
    good, differing = _verified_files(con, files, start)
    evicted = _move_to_lake(con, day, files, good, start, held) if good else 0
    con.execute("drop table temp._lake_rows")
    return evicted, differing


def _read_lake_rows(con: duckdb.DuckDBPyConnection, files: LakeFiles) -> None:
    """Temp table `_lake_rows`: each row's file, key and row hash, and its key's copies."""
    con.execute(
        f"""
        create or replace temp table _lake_rows as
        select filename, gpu_uuid, ts, {_ROW_HASH} as row_hash,
            count(*) over (partition by gpu_uuid, ts) as copies,
        from ({lake_source(files, filename=True)})
        """
    )


class Differing(NamedTuple):
    """A compacted file that stays out of the lake: some of its rows differ."""

    path: str  # as the warning prints it
    differ: int  # its samples not in samples_stored with the same values
    rows: int


def _verified_files(
    con: duckdb.DuckDBPyConnection, files: dict[str, str], start: dt.datetime
) -> tuple[list[str], list[Differing]]:
    """The files (absolute paths) whose every row is in samples_stored with the same values
    and its key in no other file, and the others."""
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
    differing = [
        Differing(printable(files.get(name, name)), rows - same, rows)
        for name, rows, same in verdicts
        if rows != same
    ]
    return good, differing


def _move_to_lake(
    con: duckdb.DuckDBPyConnection,
    day: dt.date,
    files: dict[str, str],
    good: list[str],
    start: dt.datetime,
    held: LakeFiles,
) -> int:
    """Delete the `good` files' rows from samples_stored and list the files in
    build_state.lake_files (with the sample columns each holds, `held`); the rows deleted."""
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
        insert into build_state.lake_files (path, day, row_count, evicted_at, sample_columns)
        select files.relative, $day, count(*), now(), any_value(files.held)
        from _lake_rows
        inner join (
            select unnest($names) as filename, unnest($relatives) as relative,
                unnest($held::smallint[]) as held
        ) as files using (filename)
        group by files.relative
        """,
        {
            "day": day,
            "names": good,
            "relatives": [files[name] for name in good],
            "held": [held[name] for name in good],
        },
    )
    return int(deleted[0]) if deleted else 0
