"""What the two ways of loading a batch of files share, and what loading one gives.

`BatchOutcome` (rows read and inserted, files loaded and set aside), the samples already
loaded that a batch's rows could repeat (`create_existing_view`, `EXISTING_KEYS_SQL`,
`ANY_EXISTING_SQL`), and each loaded file's row count and time range.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.base.sample_files import LoadedFile, SampleFile
from gpufleet.warehouse.lake.compact_ahead import CompactAhead
from gpufleet.warehouse.lake.samples import evicted_paths, samples_sql


@dataclass
class BatchOutcome:
    rows_read: int = 0
    rows_inserted: int = 0
    loaded: list[LoadedFile] = field(default_factory=list)
    bad: dict[str, str] = field(default_factory=dict)  # path -> reason


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
# Whether EXISTING_KEYS_SQL has any row, the batch's GPUs given as a list ($gpus): most
# batches (a backfill's, a cycle's new flush) have none, and asking first spares them the
# join of their keys, which costs ten times as much.
ANY_EXISTING_SQL = """
select exists (
    select 1
    from _ingest_existing
    where ts between $min_ts and $max_ts and gpu_uuid in (select unnest($gpus))
)
"""


def create_existing_view(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    min_ts: dt.datetime | None,
    max_ts: dt.datetime | None,
    ahead: CompactAhead | None = None,
    batch: str = "",
    gpus: set[str] | None = None,
) -> None:
    """Temp view `_ingest_existing`: the samples loaded so far that a batch of rows from
    `min_ts` to `max_ts` could repeat (samples_stored, the lake's files of those days and
    the files this ingest wrote `ahead` for them with a GPU of the table `batch`; `gpus`:
    the batch's distinct GPUs, when the caller has them already)."""
    if min_ts is None or max_ts is None:
        paths: list[str] = []
    else:
        first, last = min_ts.astimezone(dt.UTC).date(), max_ts.astimezone(dt.UTC).date()
        paths = evicted_paths(con, config, first_day=first, last_day=last)
        if ahead is not None and ahead.written:
            if gpus is None:
                rows = con.execute(f"select distinct gpu_uuid from {batch}").fetchall()
                gpus = {row[0] for row in rows}
            paths += ahead.paths_between(first, last, gpus)
    con.execute(
        "create or replace temp view _ingest_existing as "
        + samples_sql(paths, columns=("gpu_uuid", "ts"))
    )


def add_loaded_files(
    con: duckdb.DuckDBPyConnection, table: str, batch: Sequence[SampleFile], outcome: BatchOutcome
) -> None:
    """Add the batch's files not set aside to `outcome.loaded`, each with its rows in `table`
    (by `_file_index`: rows, first and last ts), and count those rows as read."""
    stats = {
        index: (rows, min_ts, max_ts)
        for index, rows, min_ts, max_ts in con.execute(
            f"select _file_index, count(*), min(ts), max(ts) from {table} group by all"
        ).fetchall()
    }
    for index, file in enumerate(batch):
        if file.path not in outcome.bad:
            rows, min_ts, max_ts = stats.get(index, (0, None, None))
            outcome.loaded.append(LoadedFile(file, rows, min_ts, max_ts))
            outcome.rows_read += rows
