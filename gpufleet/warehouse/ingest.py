"""`gpufleet ingest`: load new raw sample files, the reference files and the allocations.

The work, in order:

1. Read and validate every reference file (`gpufleet.warehouse.refs`); a bad one fails the ingest
   before the warehouse is touched.
2. List the sample files under `raw/samples` (recursively, `*.parquet`, skipping every
   path component that starts with `.` or `_`).
3. In one `write_transaction`: compare the list with `loaded_files` (a file already
   loaded is skipped; one whose size or mtime changed since is quarantined as "changed
   after load"); read every new file's schema in bulk with `parquet_schema` and
   quarantine files that cannot be read or whose columns cannot be cast to the contract
   types without loss; load the rest in batches (one `read_parquet` per batch and
   schema, no Python loop over rows). A batch of files with the contract's exact types,
   no NULL in a required column and no repeated (gpu_uuid, ts) goes from the files
   straight into `samples` once its keys are checked; any other is staged first, to
   cast, find bad files and duplicates: deduplicate on (gpu_uuid, ts) within the batch and
   against the samples of the batch's GPUs already loaded in its time range, insert sorted by
   (gpu_uuid, ts) (a batch is at most one day, so zone maps on ts still skip the other
   days, and each series' values sit together and compress 2-3x better), record the
   files in `loaded_files`; replace the reference tables;
   compact every fully loaded host-day before today (UTC) into one sorted file
   (`gpufleet.warehouse.compact`).
4. After the publish, move quarantined files to `<data_dir>/quarantine/<their relative
   path>` (a UTC time stamp is added to the name if that is taken) and warn about each.

Type acceptance (the file's column -> the contract type; anything else quarantines):
`ts` must be a timestamp with a time zone (UTC-adjusted) in any unit (s/ms/us/ns; below-
microsecond digits are truncated); float columns accept any float or integer type;
integer columns accept any integer type whose values fit (a value that does not fit, like
-1 for `gpu_index`, quarantines the file); text columns need text; `mig_enabled` needs a
boolean; `processes` needs a list of structs (fields matched by name, missing ones NULL,
extra ones dropped). A required column that is missing or holds a NULL quarantines the file.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import shutil
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import duckdb
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.warehouse.compact import CompactionResult, compact_completed_days
from gpufleet.warehouse.lake import evicted_paths, samples_sql
from gpufleet.warehouse.raw_tables import (
    QUOTED_SAMPLE_COLUMNS,
    REQUIRED_SAMPLE_COLUMNS,
    SAMPLE_COLUMNS,
    literal_path,
)
from gpufleet.warehouse.refs import References, read_references, replace_references
from gpufleet.warehouse.slots import DEFAULT_LOCK_TIMEOUT_S, current_generation, write_transaction

logger = logging.getLogger("gpufleet.ingest")

MAX_FILES_PER_BATCH = 2000
# DuckDB would take up to 80 % of the machine's memory; capped, it evicts the pages it has
# written (a week's backfill at 1,000 GPUs peaked at 2.6 GB uncapped).
INGEST_MEMORY_LIMIT = "1536MB"
QUARANTINE_CHANGED = "changed after load"

Log = Callable[[str], None]


class QuarantineWarning(UserWarning):
    """A raw file could not be loaded and was moved to quarantine/."""


@dataclass(frozen=True)
class SampleFile:
    """A raw sample file as found on disk."""

    path: str  # relative to the data directory, with '/' separators
    size_bytes: int
    mtime_ns: int


class LoadedFile(NamedTuple):
    file: SampleFile
    row_count: int  # rows read from the file, duplicates included
    min_ts: dt.datetime | None
    max_ts: dt.datetime | None


@dataclass(frozen=True)
class QuarantinedFile:
    path: str  # where it was found, relative to the data directory
    reason: str
    moved_to: str  # where it goes, relative to the data directory


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    """What one ingest did; `str()` is the line the CLI prints."""

    files_loaded: int = 0
    samples_loaded: int = 0
    duplicates_skipped: int = 0
    quarantined: tuple[QuarantinedFile, ...] = ()
    batches: int = 0
    users: int = 0
    host_rules: int = 0
    price_rules: int = 0
    allocations: int = 0

    references_changed: bool = False  # a reference or allocation row differs from before
    compaction: CompactionResult | None = None

    @property
    def loaded_anything(self) -> bool:
        """Whether the models' inputs changed: new samples or different reference rows."""
        return self.samples_loaded > 0 or self.references_changed

    def __str__(self) -> str:
        line = (
            f"ingest: {self.files_loaded:,} files, {self.samples_loaded:,} new samples, "
            f"{self.duplicates_skipped:,} duplicates skipped, "
            f"{len(self.quarantined):,} quarantined; "
            f"refs: {self.users:,} users, {self.host_rules:,} host rules, "
            f"{self.price_rules:,} price rules, {self.allocations:,} allocations"
        )
        lines = [line, *(f"  quarantined {q.path}: {q.reason}" for q in self.quarantined)]
        if self.compaction is not None and self.compaction.partitions:
            lines.append(str(self.compaction))
        return "\n".join(lines)


# --- finding files ---------------------------------------------------------------------


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def find_sample_files(config: Config) -> list[SampleFile]:
    """Every visible `*.parquet` below raw/samples, sorted by path."""
    root = config.samples_dir
    found: list[SampleFile] = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = [d for d in subdirectories if not _hidden(d)]
        for name in names:
            if _hidden(name) or not name.endswith(".parquet"):
                continue
            path = Path(directory) / name
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue  # compacted or quarantined under our feet
            relative = path.relative_to(config.data_dir).as_posix()
            found.append(SampleFile(relative, stat.st_size, stat.st_mtime_ns))
    found.sort(key=lambda f: f.path)
    return found


def split_new_files(
    con: duckdb.DuckDBPyConnection, files: Sequence[SampleFile]
) -> tuple[list[SampleFile], list[tuple[SampleFile, str]]]:
    """(files never loaded, files loaded before that changed since, with the reason)."""
    listing = pa.table(
        {
            "path": pa.array([f.path for f in files], pa.string()),
            "size_bytes": pa.array([f.size_bytes for f in files], pa.int64()),
            "mtime_ns": pa.array([f.mtime_ns for f in files], pa.int64()),
        }
    )
    con.register("_ingest_listing", listing)
    try:
        rows = con.execute(
            """
            select
                listing.path,
                loaded.path is null as is_new,
                loaded.size_bytes as loaded_size_bytes,
                loaded.mtime_ns as loaded_mtime_ns,
            from _ingest_listing as listing
            left join loaded_files as loaded using (path)
            where loaded.path is null
                or loaded.size_bytes <> listing.size_bytes
                or loaded.mtime_ns <> listing.mtime_ns
            """
        ).fetchall()
    finally:
        con.unregister("_ingest_listing")
    by_path = {f.path: f for f in files}
    new: list[SampleFile] = []
    changed: list[tuple[SampleFile, str]] = []
    for path, is_new, size_bytes, mtime_ns in rows:
        file = by_path[path]
        if is_new:
            new.append(file)
        else:
            changed.append(
                (
                    file,
                    f"{QUARANTINE_CHANGED} (was {size_bytes:,} bytes, "
                    f"mtime {_ns_iso(mtime_ns)}; now {file.size_bytes:,} bytes, "
                    f"mtime {_ns_iso(file.mtime_ns)})",
                )
            )
    new.sort(key=lambda f: f.path)
    changed.sort(key=lambda item: item[0].path)
    return new, changed


def _ns_iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="seconds")


# --- schemas ---------------------------------------------------------------------------

_INTEGER_TYPES = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT"}
)
_FLOAT_TYPES = frozenset({"FLOAT", "DOUBLE"})
_TZ_TIMESTAMP_TYPES = frozenset({"TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ", "TIMESTAMPTZ_NS"})
_CONTRACT_TYPES = dict(SAMPLE_COLUMNS)
_RESERVED_COLUMNS = ("file_index", "file_row_number")  # read_parquet's virtual columns


def _accepts(target: str, source: str) -> bool:
    """Whether a file column of DuckDB type `source` may load into contract type `target`."""
    if target == "timestamptz":
        return source in _TZ_TIMESTAMP_TYPES
    if target == "float":
        return source in _FLOAT_TYPES or source in _INTEGER_TYPES or source.startswith("DECIMAL")
    if target in {"usmallint", "bigint", "smallint", "integer", "ubigint"}:
        return source in _INTEGER_TYPES
    if target == "varchar":
        return source == "VARCHAR"
    if target == "boolean":
        return source == "BOOLEAN"
    if target.endswith("[]"):  # processes: a list of structs
        return source.startswith("STRUCT(") and source.endswith(")[]")
    raise AssertionError(f"no acceptance rule for contract type {target}")


def schema_problem(columns: dict[str, str]) -> str | None:
    """Why a file with these top-level columns (name -> DuckDB type) cannot load, if so."""
    for name in _RESERVED_COLUMNS:
        if name in columns:
            return f"column '{name}' is reserved for read_parquet's own use"
    for name in REQUIRED_SAMPLE_COLUMNS:
        if name not in columns:
            return f"missing required column '{name}'"
    for name, target in SAMPLE_COLUMNS:
        source = columns.get(name)
        if source is not None and not _accepts(target, source):
            return f"column '{name}' is {source}, expected {target.upper()}"
    return None


def _top_level_columns(rows: Iterable[tuple[Any, ...]]) -> dict[str, dict[str, str]]:
    """file -> {column: duckdb type} from `parquet_schema` rows (file, name, children, type)."""
    result: dict[str, dict[str, str]] = {}
    # Rows come per file in schema order: the root, then a depth-first walk of the tree.
    pending: dict[str, list[int]] = {}  # file -> stack of children still to visit per level
    for file, name, children, duckdb_type in rows:
        stack = pending.get(file)
        if stack is None:  # the root of a new file
            pending[file] = [children or 0]
            result[file] = {}
            continue
        while stack and stack[-1] == 0:
            stack.pop()
        if not stack:
            continue
        if len(stack) == 1:
            result[file][name] = duckdb_type
        stack[-1] -= 1
        if children:
            stack.append(children)
    return result


def _parquet_schemas(
    con: duckdb.DuckDBPyConnection, absolute_paths: list[str]
) -> dict[str, dict[str, str]]:
    # One signature per file (its schema elements in order); each distinct one is parsed once.
    # A list of structs, not joined text: column names come from the files, and may hold
    # any character.
    rows = con.execute(
        """
        select
            file_name,
            list(
                (name, coalesce(num_children, 0), coalesce(duckdb_type, ''))
                order by column_id
            ) as elements,
        from parquet_schema($files)
        group by file_name
        """,
        {"files": [literal_path(path) for path in absolute_paths]},
    ).fetchall()
    parsed: dict[tuple[tuple[str, int, str], ...], dict[str, str]] = {}
    result: dict[str, dict[str, str]] = {}
    for file, elements in rows:
        signature = tuple((str(n), int(c), str(t)) for n, c, t in elements)
        columns = parsed.get(signature)
        if columns is None:
            tree = [("", name, children, kind) for name, children, kind in signature]
            columns = parsed[signature] = _top_level_columns(tree).get("", {})
        result[file] = dict(columns)
    return result


def read_schemas(
    con: duckdb.DuckDBPyConnection, config: Config, files: Sequence[SampleFile]
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """({path: {column: type}} for readable files, {path: reason} for unreadable ones).

    One `parquet_schema` call per chunk of files; only when it fails is each file of the
    chunk read alone, to find the one that cannot be read.
    """
    schemas: dict[str, dict[str, str]] = {}
    unreadable: dict[str, str] = {}
    for start in range(0, len(files), MAX_FILES_PER_BATCH):
        chunk = files[start : start + MAX_FILES_PER_BATCH]
        absolute = {str(config.data_dir / f.path): f.path for f in chunk}
        try:
            found = _parquet_schemas(con, list(absolute))
        except duckdb.Error:
            found = {}
            for path in absolute:
                try:
                    found.update(_parquet_schemas(con, [path]))
                except duckdb.OutOfMemoryException:
                    raise  # the machine's problem, not the file's
                except duckdb.Error as exc:
                    unreadable[absolute[path]] = _unreadable(exc, path, absolute[path])
        for path, columns in found.items():
            schemas[absolute[path]] = columns
    return schemas, unreadable


def _unreadable(exc: BaseException, full: str, relative: str) -> str:
    """The quarantine reason for a file DuckDB could not read, naming it by `relative`."""
    text = _one_line(exc).replace(literal_path(full), relative).replace(full, relative)
    return f"cannot read Parquet: {text}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


# --- loading ---------------------------------------------------------------------------


def plan_batches(
    files: Sequence[SampleFile], max_files: int = MAX_FILES_PER_BATCH
) -> list[list[SampleFile]]:
    """Consecutive runs of files (sorted by path) of one `date=` partition, at most `max_files`.

    One day per batch keeps each batch's time range, and so the part of `samples` that
    deduplication has to look at, about one day wide.
    """
    batches: list[list[SampleFile]] = []
    current_key: str | None = None
    for file in sorted(files, key=lambda f: f.path):
        key = next((part for part in file.path.split("/") if part.startswith("date=")), "")
        if not batches or key != current_key or len(batches[-1]) >= max_files:
            batches.append([])
            current_key = key
        batches[-1].append(file)
    return batches


_QUOTED = QUOTED_SAMPLE_COLUMNS
_STAGING_DDL = (
    "create or replace temp table _ingest_batch (_file_index integer, _row bigint, "
    + ", ".join(f'"{name}" {kind}' for name, kind in SAMPLE_COLUMNS)
    + ", _problem varchar)"
)

# The keys already loaded that rows of a batch (in table {batch}) could repeat: read only
# within the batch's time range (zone maps skip the rest) and only for the batch's GPUs
# (an anti-join's hash table holds those, not the whole day), from samples_stored and the
# evicted files of the batch's days (`_ingest_existing`, made by `create_existing_view`).
EXISTING_KEYS_SQL = """
select gpu_uuid, ts
from _ingest_existing
where ts between $min_ts and $max_ts
    and gpu_uuid in (select gpu_uuid from {batch})
"""


def create_existing_view(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    min_ts: dt.datetime | None,
    max_ts: dt.datetime | None,
) -> None:
    """Temp view `_ingest_existing`: the samples loaded so far that a batch of rows from
    `min_ts` to `max_ts` could repeat (samples_stored and the lake's files of those days)."""
    paths = (
        evicted_paths(
            con,
            config,
            first_day=min_ts.astimezone(dt.UTC).date(),
            last_day=max_ts.astimezone(dt.UTC).date(),
        )
        if min_ts is not None and max_ts is not None
        else []
    )
    con.execute(
        "create or replace temp view _ingest_existing as "
        + samples_sql(paths, columns="gpu_uuid, ts")
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


def _staging_select(columns: dict[str, str]) -> str:
    """SELECT list that casts one schema group's columns to the contract types.

    Every cast is a try_cast; `_problem` names the first value that did not survive it
    (or a NULL in a required column), and the file holding it is quarantined.
    """
    selects: list[str] = []
    problems: list[str] = []
    for name, kind in SAMPLE_COLUMNS:
        quoted = f'"{name}"'
        if name not in columns:
            selects.append(f"null::{kind} as {quoted}")
            continue
        selects.append(f"try_cast(src.{quoted} as {kind}) as {quoted}")
        if name in REQUIRED_SAMPLE_COLUMNS:
            problems.append(
                f"case when src.{quoted} is null then 'null in required column {name}' end"
            )
        problems.append(
            f"case when src.{quoted} is not null and try_cast(src.{quoted} as {kind}) is null "
            f"then 'column {name}: value ' || left(src.{quoted}::varchar, 40) "
            f"|| ' does not fit {kind.upper()}' end"
        )
    problem = f"coalesce({', '.join(problems)})" if problems else "null::varchar"
    return ", ".join(selects) + f", {problem} as _problem"


@dataclass
class BatchOutcome:
    rows_read: int = 0
    rows_inserted: int = 0
    loaded: list[LoadedFile] = field(default_factory=list)
    bad: dict[str, str] = field(default_factory=dict)  # path -> reason


@functools.cache
def _contract_type_names() -> dict[str, str]:
    """Each sample column's contract type as `parquet_schema` spells it (DuckDB's name)."""
    con = duckdb.connect()
    names: dict[str, str] = {}
    for name, kind in SAMPLE_COLUMNS:
        row = con.execute(f"select typeof(null::{kind})").fetchone()
        assert row is not None
        names[name] = row[0]
    return names


def _uniform_contract_columns(
    batch: Sequence[SampleFile], schemas: dict[str, dict[str, str]]
) -> dict[str, str] | None:
    """The batch's contract columns when every file has the same ones, of the contract's
    exact types (nothing to cast); None otherwise."""
    names = _contract_type_names()
    first: dict[str, str] | None = None
    for file in batch:
        columns = {n: t for n, t in schemas[file.path].items() if n in _CONTRACT_TYPES}
        if first is None:
            if any(names[n] != t for n, t in columns.items()):
                return None
            first = columns
        elif columns != first:
            return None
    return first


_REQUIRED_NULL = " or ".join(f'"{name}" is null' for name in REQUIRED_SAMPLE_COLUMNS)


def _load_uniform_batch(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    columns: dict[str, str],
) -> BatchOutcome | None:
    """The common case without a staging table: files of the contract's types, no NULL in a
    required column, and no (gpu_uuid, ts) twice in the batch or already in `samples`. The
    keys are read first; the rows then go from the files straight into `samples`, sorted.
    None when the batch is not such a case (`load_batch` then stages it)."""
    paths = [literal_path(str(config.data_dir / file.path)) for file in batch]
    source = "read_parquet($paths, hive_partitioning = false)"
    try:
        con.execute(
            f"""
            create or replace temp table _ingest_keys as
            select file_index::integer as _file_index, gpu_uuid, ts, {_REQUIRED_NULL} as _null,
            from {source}
            """,
            {"paths": paths},
        )
    except duckdb.Error:
        return None  # a file that does not read: staging finds which
    try:
        bounds = con.execute("select min(ts), max(ts) from _ingest_keys").fetchone()
        min_ts, max_ts = bounds if bounds else (None, None)
        create_existing_view(con, config, min_ts, max_ts)
        problems = con.execute(
            f"""
            with existing as ({EXISTING_KEYS_SQL.format(batch="_ingest_keys")})
            select
                (select count(*) from _ingest_keys where _null)
                + (select count(*) from (
                    select 1 from _ingest_keys group by gpu_uuid, ts having count(*) > 1))
                + (select count(*) from _ingest_keys semi join existing using (gpu_uuid, ts))
            """,
            {"min_ts": min_ts, "max_ts": max_ts},
        ).fetchone()
        if problems is None or problems[0]:
            return None
        stats = {
            index: (rows, min_ts, max_ts)
            for index, rows, min_ts, max_ts in con.execute(
                "select _file_index, count(*), min(ts), max(ts) from _ingest_keys group by all"
            ).fetchall()
        }
    finally:
        con.execute("drop table if exists _ingest_keys")
    selects = ", ".join(
        f'src."{name}"' if name in columns else f'null::{kind} as "{name}"'
        for name, kind in SAMPLE_COLUMNS
    )
    try:
        inserted = con.execute(
            f"insert into samples_stored ({_QUOTED}, load_id) "
            f"select {selects}, $load_id from {source} as src order by gpu_uuid, ts",
            {"paths": paths, "load_id": current_generation(con)},
        ).fetchone()
    except duckdb.Error:
        # A column past the keys does not read; the insert left nothing (it is one
        # statement: the write transaction's connection autocommits), staging finds the file.
        return None
    outcome = BatchOutcome(rows_inserted=int(inserted[0]) if inserted else 0)
    for index, file in enumerate(batch):
        rows, min_ts, max_ts = stats.get(index, (0, None, None))
        outcome.loaded.append(LoadedFile(file, rows, min_ts, max_ts))
        outcome.rows_read += rows
    return outcome


def load_batch(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    schemas: dict[str, dict[str, str]],
) -> BatchOutcome:
    """Insert one batch's new rows into `samples`: straight from the files in the common
    case, else staged, with bad files set aside and duplicates dropped."""
    columns = _uniform_contract_columns(batch, schemas)
    if columns is not None:
        outcome = _load_uniform_batch(con, config, batch, columns)
        if outcome is not None:
            logger.debug("ingest: %d files loaded straight from the files", len(batch))
            return outcome
    logger.debug("ingest: %d files staged", len(batch))
    outcome = BatchOutcome()
    con.execute(_STAGING_DDL)
    # Files of one schema go through one read_parquet; indexes keep the batch's file order.
    groups: dict[tuple[tuple[str, str], ...], list[tuple[int, SampleFile]]] = {}
    for index, file in enumerate(batch):
        columns = schemas[file.path]
        key = tuple(sorted((n, t) for n, t in columns.items() if n in _CONTRACT_TYPES))
        groups.setdefault(key, []).append((index, file))
    for key, members in groups.items():
        columns = dict(key)
        try:
            _stage_group(con, config, members, columns)
        except duckdb.Error:
            # A file whose footer reads but whose data does not: find it file by file.
            for member in members:
                try:
                    _stage_group(con, config, [member], columns)
                except duckdb.OutOfMemoryException:
                    raise  # the machine's problem, not the file's
                except duckdb.Error as exc:
                    path = member[1].path
                    outcome.bad[path] = _unreadable(exc, str(config.data_dir / path), path)

    for index, reason in con.execute(
        "select _file_index, min(_problem) from _ingest_batch "
        "where _problem is not null group by _file_index"
    ).fetchall():
        outcome.bad[batch[index].path] = reason
    bad_indexes = [i for i, f in enumerate(batch) if f.path in outcome.bad]
    if bad_indexes:
        con.execute(
            "delete from _ingest_batch where list_contains($bad, _file_index)",
            {"bad": bad_indexes},
        )

    stats = {
        index: (rows, min_ts, max_ts)
        for index, rows, min_ts, max_ts in con.execute(
            "select _file_index, count(*), min(ts), max(ts) from _ingest_batch group by all"
        ).fetchall()
    }
    for index, file in enumerate(batch):
        if file.path not in outcome.bad:
            rows, min_ts, max_ts = stats.get(index, (0, None, None))
            outcome.loaded.append(LoadedFile(file, rows, min_ts, max_ts))
            outcome.rows_read += rows

    if outcome.rows_read:
        min_ts, max_ts = con.execute("select min(ts), max(ts) from _ingest_batch").fetchone() or (
            None,
            None,
        )
        create_existing_view(con, config, min_ts, max_ts)
        inserted = con.execute(
            f"insert into samples_stored ({_QUOTED}, load_id) {NEW_ROWS_SQL}",
            {"min_ts": min_ts, "max_ts": max_ts, "load_id": current_generation(con)},
        ).fetchone()
        outcome.rows_inserted = int(inserted[0]) if inserted else 0
    con.execute("drop table _ingest_batch")
    return outcome


def _stage_group(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    members: Sequence[tuple[int, SampleFile]],
    columns: dict[str, str],
) -> None:
    """Insert one schema group's rows into the staging table (all or nothing)."""
    paths = [literal_path(str(config.data_dir / file.path)) for _, file in members]
    indexes = [index for index, _ in members]
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
        {"paths": paths, "indexes": indexes},
    )


def record_loaded(
    con: duckdb.DuckDBPyConnection,
    loaded: Sequence[LoadedFile],
    loaded_at: dt.datetime,
) -> None:
    """Add the loaded files to `loaded_files` in one insert."""
    ts = pa.timestamp("us", tz="UTC")
    table = pa.table(
        {
            "path": pa.array([item.file.path for item in loaded], pa.string()),
            "size_bytes": pa.array([item.file.size_bytes for item in loaded], pa.int64()),
            "mtime_ns": pa.array([item.file.mtime_ns for item in loaded], pa.int64()),
            "row_count": pa.array([item.row_count for item in loaded], pa.int64()),
            "min_ts": pa.array([item.min_ts for item in loaded], ts),
            "max_ts": pa.array([item.max_ts for item in loaded], ts),
            "loaded_at": pa.array([loaded_at] * len(loaded), ts),
        }
    )
    con.register("_ingest_loaded", table)
    try:
        con.execute(
            "insert into loaded_files (path, size_bytes, mtime_ns, row_count, min_ts, max_ts, "
            "loaded_at) select * from _ingest_loaded"
        )
    finally:
        con.unregister("_ingest_loaded")


def quarantine_destination(config: Config, path: str, now: dt.datetime) -> str:
    """Where a quarantined file goes: quarantine/<its relative path>, made unique if taken."""
    target = Path("quarantine") / path
    if (config.data_dir / target).exists():
        stamp = now.strftime("%Y%m%dT%H%M%S%fZ")
        target = target.with_name(f"{target.stem}.{stamp}{target.suffix}")
    return target.as_posix()


def record_quarantined(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    bad: Sequence[tuple[str, str]],
    now: dt.datetime,
) -> tuple[QuarantinedFile, ...]:
    """Add the files to `quarantined_files`; returns them with their destinations."""
    items = tuple(
        QuarantinedFile(path, reason, quarantine_destination(config, path, now))
        for path, reason in bad
    )
    if items:
        ts = pa.timestamp("us", tz="UTC")
        table = pa.table(
            {
                "path": pa.array([q.path for q in items], pa.string()),
                "reason": pa.array([q.reason for q in items], pa.string()),
                "quarantined_at": pa.array([now] * len(items), ts),
                "moved_to": pa.array([q.moved_to for q in items], pa.string()),
            }
        )
        con.register("_ingest_quarantined", table)
        try:
            con.execute(
                "insert into quarantined_files (path, reason, quarantined_at, moved_to) "
                "select * from _ingest_quarantined"
            )
        finally:
            con.unregister("_ingest_quarantined")
    return items


def load_samples(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    files: Sequence[SampleFile],
    *,
    now: dt.datetime | None = None,
    progress: Log | None = None,
) -> IngestResult:
    """Load the files not loaded yet into `samples` through `con` (inside a transaction)."""
    now = now or dt.datetime.now(dt.UTC)
    say = progress or logger.info
    new, changed = split_new_files(con, files)
    bad: dict[str, str] = {file.path: reason for file, reason in changed}

    schemas, unreadable = read_schemas(con, config, new)
    bad.update(unreadable)
    for path, columns in schemas.items():
        problem = schema_problem(columns)
        if problem:
            bad[path] = problem
    loadable = [f for f in new if f.path not in bad]

    batches = plan_batches(loadable)
    if batches:
        plural = "batch" if len(batches) == 1 else "batches"
        say(f"ingest: {len(loadable):,} new files in {len(batches)} {plural}")
    files_loaded = rows_read = rows_inserted = 0
    for number, batch in enumerate(batches, start=1):
        first = batch[0].path.split("/")
        where = next((p for p in first if p.startswith("date=")), first[-1])
        say(f"ingest: batch {number}/{len(batches)} ({len(batch):,} files, {where})")
        outcome = load_batch(con, config, batch, schemas)
        bad.update(outcome.bad)
        record_loaded(con, outcome.loaded, now)
        files_loaded += len(outcome.loaded)
        rows_read += outcome.rows_read
        rows_inserted += outcome.rows_inserted

    quarantined = record_quarantined(con, config, sorted(bad.items()), now)
    return IngestResult(
        files_loaded=files_loaded,
        samples_loaded=rows_inserted,
        duplicates_skipped=rows_read - rows_inserted,
        quarantined=quarantined,
        batches=len(batches),
    )


def load_warehouse(
    config: Config,
    references: References,
    files: Sequence[SampleFile],
    *,
    progress: Log | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    compact: bool = True,
    today: dt.date | None = None,
) -> IngestResult:
    """One write transaction: new samples, loaded/quarantined files, reference tables,
    and the compaction of host-days before `today` (UTC; default: the real today)."""
    with write_transaction(config, lock_timeout_s=lock_timeout_s) as con:
        con.execute("set memory_limit = ?", [INGEST_MEMORY_LIMIT])
        result = load_samples(con, config, files, progress=progress)
        references_changed = replace_references(con, references)
        compaction = (
            compact_completed_days(
                con,
                config,
                exclude=[item.path for item in result.quarantined],
                progress=progress,
                today=today,
            )
            if compact
            else None
        )
    return IngestResult(
        files_loaded=result.files_loaded,
        samples_loaded=result.samples_loaded,
        duplicates_skipped=result.duplicates_skipped,
        quarantined=result.quarantined,
        batches=result.batches,
        users=len(references.users),
        host_rules=len(references.hosts),
        price_rules=len(references.prices),
        allocations=len(references.allocations),
        references_changed=references_changed,
        compaction=compaction,
    )


def move_to_quarantine(
    config: Config, quarantined: Sequence[QuarantinedFile], *, warn: Log | None = None
) -> None:
    """Move each quarantined file to its destination and warn about it (after the publish)."""
    for item in quarantined:
        source = config.data_dir / item.path
        target = config.data_dir / item.moved_to
        message = f"quarantined {item.path}: {item.reason}"
        if source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)
        logger.warning(message)
        warnings.warn(message, QuarantineWarning, stacklevel=2)
        if warn is not None:
            warn(message)


def ingest(
    config: Config,
    *,
    progress: Log | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    compact: bool = True,
    today: dt.date | None = None,
) -> IngestResult:
    """The whole ingest without Prefect: validate refs, load, compact, publish, quarantine."""
    references = read_references(config)
    files = find_sample_files(config)
    result = load_warehouse(
        config,
        references,
        files,
        progress=progress,
        lock_timeout_s=lock_timeout_s,
        compact=compact,
        today=today,
    )
    move_to_quarantine(config, result.quarantined)
    return result
