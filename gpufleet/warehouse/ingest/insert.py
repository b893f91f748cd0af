"""A checked batch deduplicated and inserted: a sample (gpu_uuid, ts) is kept once, the
first row of it by file, then row, and none whose key is loaded already
(`create_existing_view`). A batch that repeats no key and none loaded before
(`keys_are_new`, the usual case) goes in as read, a whole completed host-day into its
compacted file (`lake/compact_ahead.py`); any other is deduplicated first
(`insert_first_new`)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from gpufleet.config import Config
from gpufleet.warehouse.base.raw_tables import QUOTED_SAMPLE_COLUMNS
from gpufleet.warehouse.base.sample_files import LoadedFile, SampleFile
from gpufleet.warehouse.ingest.check import Checked
from gpufleet.warehouse.lake.compact_ahead import NOT_AHEAD, CompactAhead
from gpufleet.warehouse.lake.samples import evicted_paths, samples_sql
from gpufleet.warehouse.publish.log import current_generation

logger = logging.getLogger("gpufleet.ingest")


@dataclass
class BatchOutcome:
    rows_read: int = 0
    rows_inserted: int = 0
    loaded: list[LoadedFile] = field(default_factory=list)
    bad: dict[str, str] = field(default_factory=dict)  # path -> reason

    def add(self, other: BatchOutcome) -> None:
        self.rows_read += other.rows_read
        self.rows_inserted += other.rows_inserted
        self.loaded += other.loaded
        self.bad.update(other.bad)


# The keys already loaded (`_ingest_existing`, `create_existing_view`) that rows of a batch
# (in table {batch}) could repeat: read only within its time range (zone maps skip the
# rest) and for its GPUs alone (an anti-join's hash table holds those, not the whole day).
EXISTING_KEYS_SQL = """
select gpu_uuid, ts
from _ingest_existing
where ts between $min_ts and $max_ts
    and gpu_uuid in (select gpu_uuid from {batch})
"""
# Whether EXISTING_KEYS_SQL has any row, the batch's GPUs given as a list ($gpus): most
# batches (a backfill's, a cycle's new flush) have none, and asking first spares them the
# join of their keys, which costs ten times as much.
_GPUS = "(select unnest($gpus) as gpu_uuid)"
ANY_EXISTING_SQL = f"select exists ({EXISTING_KEYS_SQL.format(batch=_GPUS)})"
_ROWS = "_ingest_rows"
# The rows of _ingest_rows (each key once) not loaded yet, in (gpu_uuid, ts) order.
INSERT_NEW_SQL = f"""
insert into samples_stored ({QUOTED_SAMPLE_COLUMNS}, load_id)
with existing as ({EXISTING_KEYS_SQL.format(batch=_ROWS)})
select {QUOTED_SAMPLE_COLUMNS}, $load_id
from {_ROWS} anti join existing using (gpu_uuid, ts)
order by gpu_uuid, ts
"""


def insert_batch(
    con: duckdb.DuckDBPyConnection, config: Config, checked: Checked, ahead: CompactAhead | None
) -> BatchOutcome:
    """Insert a checked batch's rows, as read or deduplicated (the module's docstring)."""
    outcome = BatchOutcome(bad=dict(checked.bad))
    if not checked.files:
        return outcome
    rows = checked.rows
    outcome.loaded = loaded_files(checked.files, rows)
    outcome.rows_read = rows.num_rows
    if keys_are_new(con, config, ahead, rows):
        logger.debug("ingest: %d files loaded as read", len(checked.files))
        # The host-days of its parts as compacted files written `ahead`, the rest inserted.
        if ahead is not None:
            ahead.write(rows, checked.files, checked.parts, checked.versions)
        if NOT_AHEAD in checked.parts:  # (a backfill writes every part ahead: none)
            con.register(_ROWS, rows)
            try:
                con.execute(
                    f"insert into samples_stored ({QUOTED_SAMPLE_COLUMNS}, load_id) "
                    f"select {QUOTED_SAMPLE_COLUMNS}, $load_id from {_ROWS} "
                    f"where _part = {NOT_AHEAD} order by gpu_uuid, ts",
                    {"load_id": current_generation(con)},
                ).fetchall()
            finally:
                con.unregister(_ROWS)
        outcome.rows_inserted = rows.num_rows
    else:
        logger.debug("ingest: %d files deduplicated", len(checked.files))
        outcome.rows_inserted = insert_first_new(con, config, rows, ahead)
    return outcome


class Keys(NamedTuple):
    """A batch's distinct GPUs and the range of its times."""

    gpus: list[str]
    min_ts: dt.datetime
    max_ts: dt.datetime


def create_existing_view(
    con: duckdb.DuckDBPyConnection, config: Config, keys: Keys, ahead: CompactAhead | None
) -> None:
    """Temp view `_ingest_existing`: the samples loaded so far that a batch of these `keys`
    could repeat (samples_stored, the lake's files of their days and the files this ingest
    wrote `ahead` for them with one of their GPUs)."""
    first, last = keys.min_ts.astimezone(dt.UTC).date(), keys.max_ts.astimezone(dt.UTC).date()
    paths = evicted_paths(con, config, first_day=first, last_day=last)
    if ahead is not None and ahead.written:
        paths += ahead.paths_between(first, last, set(keys.gpus))
    con.execute(
        "create or replace temp view _ingest_existing as "
        + samples_sql(paths, columns=("gpu_uuid", "ts"))
    )


def any_loaded(
    con: duckdb.DuckDBPyConnection, config: Config, keys: Keys, ahead: CompactAhead | None
) -> bool:
    """Whether a sample of one of the `keys`' GPUs within their times is loaded already (as
    `create_existing_view` finds them; `_ingest_existing` is left as that view)."""
    create_existing_view(con, config, keys, ahead)
    found = con.execute(ANY_EXISTING_SQL, keys._asdict()).fetchall()
    return bool(found and found[0][0])


def loaded_files(batch: Sequence[SampleFile], rows: pa.Table) -> list[LoadedFile]:
    """Each file of `batch` with its rows in `rows` (by `_file_index`): count, first and
    last ts."""
    keys = pl.from_arrow(rows.select(["_file_index", "ts"]))
    assert isinstance(keys, pl.DataFrame)
    ts = pl.col("ts")
    stats = keys.group_by("_file_index").agg(pl.len(), ts.min().alias("min"), ts.max().alias("max"))
    found = {row[0]: row[1:] for row in stats.iter_rows()}
    return [
        LoadedFile(file, *found.get(index, (0, None, None))) for index, file in enumerate(batch)
    ]


def keys_are_new(
    con: duckdb.DuckDBPyConnection, config: Config, ahead: CompactAhead | None, rows: pa.Table
) -> bool:
    """Whether the rows (sorted by _part, gpu_uuid, ts) hold no (gpu_uuid, ts) twice and
    none already loaded."""
    if len(rows) == 0:
        return True
    keys = new_keys(rows)
    if keys is None or not any_loaded(con, config, keys, ahead):
        return keys is not None
    con.register(_ROWS, rows)
    try:
        existing = con.execute(
            f"with existing as ({EXISTING_KEYS_SQL.format(batch=_ROWS)}) "
            f"select count(*) from {_ROWS} semi join existing using (gpu_uuid, ts)",
            {"min_ts": keys.min_ts, "max_ts": keys.max_ts},
        ).fetchall()
    finally:
        con.unregister(_ROWS)
    return bool(existing) and not existing[0][0]


def new_keys(rows: pa.Table) -> Keys | None:
    """The keys of `rows` (sorted by _part, gpu_uuid, ts), or None when a (gpu_uuid, ts) is
    in them twice: when each GPU's rows are together and in increasing time, none is (two
    comparisons of neighbours, no hash table); otherwise the keys are counted."""
    gpus = rows.column("gpu_uuid").combine_chunks()
    distinct = pc.unique(gpus)
    if len(gpus) > 1:
        together = len(pc.run_end_encode(gpus).values) == len(distinct)
        times = rows.column("ts").combine_chunks()
        earlier, later = slice(0, len(gpus) - 1), slice(1, None)
        increasing = pc.or_(
            pc.not_equal(gpus[later], gpus[earlier]),
            pc.greater(times[later], times[earlier]),
        )
        if not together or not pc.all(increasing).as_py():
            keys = pl.from_arrow(rows.select(["gpu_uuid", "ts"]))
            assert isinstance(keys, pl.DataFrame)
            if keys.is_duplicated().any():
                return None
    span = pc.min_max(rows.column("ts"))
    return Keys(distinct.to_pylist(), span["min"].as_py(), span["max"].as_py())


def insert_first_new(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    table: pa.Table,
    ahead: CompactAhead | None,
) -> int:
    """Insert into samples_stored the first row of each (gpu_uuid, ts) of `table` (each
    file's rows in their order; by `_file_index` first when it is there) not loaded yet;
    how many."""
    if table.num_rows == 0:
        return 0
    rows = pl.from_arrow(table)
    assert isinstance(rows, pl.DataFrame)
    by = ["gpu_uuid", "ts", *(["_file_index"] if "_file_index" in rows.columns else [])]
    rows = rows.sort(by, maintain_order=True)
    repeated = (pl.col("gpu_uuid") == pl.col("gpu_uuid").shift()) & (
        pl.col("ts") == pl.col("ts").shift()
    )
    if rows.select(repeated.any()).item():
        rows = rows.unique(["gpu_uuid", "ts"], keep="first", maintain_order=True)
    low, high = rows.get_column("ts").min(), rows.get_column("ts").max()
    assert isinstance(low, dt.datetime) and isinstance(high, dt.datetime)
    keys = Keys(rows.get_column("gpu_uuid").unique().to_list(), low, high)
    con.register(_ROWS, rows.to_arrow(compat_level=pl.CompatLevel.oldest()))
    try:
        create_existing_view(con, config, keys, ahead)
        inserted = con.execute(
            INSERT_NEW_SQL, {"min_ts": low, "max_ts": high, "load_id": current_generation(con)}
        ).fetchall()
    finally:
        con.unregister(_ROWS)
    return int(inserted[0][0]) if inserted else 0
