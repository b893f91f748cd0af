"""Loading a batch straight from its files, the common case, with no staging table.

A batch qualifies when every file has the same contract columns of the contract's exact
types, no required column holds a NULL, no value is out of its range (`values.py`), and no
(gpu_uuid, ts) is repeated in the batch or already loaded. The files are read once: the
keys of the rows read are checked, then the rows go into `samples_stored`, and the caller
writes compacted host-days from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from gpufleet.config import Config
from gpufleet.warehouse.base.folder_sites import fill_sites, folder_site
from gpufleet.warehouse.base.raw_tables import (
    QUOTED_SAMPLE_COLUMNS,
    REQUIRED_SAMPLE_COLUMNS,
    SAMPLE_COLUMNS,
    literal_path,
)
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest.batch import (
    ANY_EXISTING_SQL,
    EXISTING_KEYS_SQL,
    BatchOutcome,
    add_loaded_files,
    create_existing_view,
)
from gpufleet.warehouse.ingest.schemas import CONTRACT_TYPES, BatchProbe, contract_type_names
from gpufleet.warehouse.ingest.values import TimeLimits, time_window, value_problems
from gpufleet.warehouse.lake.compact_ahead import NOT_AHEAD, CompactAhead
from gpufleet.warehouse.publish.log import current_generation

_SOURCE = "read_parquet($paths, hive_partitioning = false)"
_REQUIRED_NULL = " or ".join(f'"{name}" is null' for name in REQUIRED_SAMPLE_COLUMNS)


def uniform_contract_columns(
    batch: Sequence[SampleFile], schemas: dict[str, dict[str, str]]
) -> dict[str, str] | None:
    """The batch's contract columns when every file has the same ones, of the contract's
    exact types (nothing to cast); None otherwise."""
    names = contract_type_names()
    first: dict[str, str] | None = None
    for file in batch:
        columns = {n: t for n, t in schemas[file.path].items() if n in CONTRACT_TYPES}
        if first is None:
            if any(names[n] != t for n, t in columns.items()):
                return None
            first = columns
        elif columns != first:
            return None
    return first


def load_uniform_batch(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    columns: dict[str, str],
    probe: BatchProbe,
    *,
    ahead: CompactAhead | None,
    parts: list[int],
    limits: TimeLimits,
) -> BatchOutcome | None:
    """Load a batch of the common case (see the module's docstring) from its files, read
    once: the host-days of `parts` as compacted files written `ahead`, the other rows into
    samples_stored, sorted. None when the batch is not such a case (`load_batch` then
    stages it)."""
    paths = [literal_path(str(config.data_dir / file.path)) for file in batch]
    selects = ", ".join(
        f'src."{name}"' if name in columns else f'null::{kind} as "{name}"'
        for name, kind in SAMPLE_COLUMNS
    )
    # Each file's part joins in from a small table (a list parameter indexed per row is
    # copied per row).
    # Read through the probe's connection, which has the files' footers parsed already.
    reader = probe.reader
    reader.register(
        "_ingest_parts",
        pa.table({"file_index": pa.array(range(len(batch)), pa.int64()), "_part": parts}),
    )
    try:
        rows = reader.sql(
            f"""
            select
                {selects},
                src.file_index::integer as _file_index,
                part._part,
                {_REQUIRED_NULL} as _null,
            from {_SOURCE} as src
            inner join _ingest_parts as part on part.file_index = src.file_index
            order by part._part, src.gpu_uuid, src.ts
            """,
            params={"paths": paths},
        ).to_arrow_table()
    except duckdb.Error:
        return None  # a file that does not read: staging finds which
    finally:
        reader.unregister("_ingest_parts")
    frame = pl.from_arrow(rows)
    assert isinstance(frame, pl.DataFrame)
    windows = [time_window(file.path, limits) for file in batch]
    sites = [folder_site(file.path) for file in batch]
    if value_problems(frame, windows, file_index="_file_index", sites=sites):
        return None  # a value out of its range: staging finds the files and their reasons
    return load_rows(con, config, batch, rows, ahead=ahead, parts=parts, versions=probe.versions)


def load_rows(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    rows: pa.Table,
    *,
    ahead: CompactAhead | None,
    parts: list[int],
    versions: Mapping[str, str],
) -> BatchOutcome | None:
    """Load a batch's rows, read once (the contract's columns, then `_file_index`, `_part`
    and `_null`, sorted by _part, gpu_uuid, ts): the host-days of `parts` as compacted files
    written `ahead` (`versions`: each file's collector version, by absolute path), the other
    rows into samples_stored (a NULL `cluster` the site of its file's folder,
    `base/folder_sites.py`). None when a required column holds a NULL or a key repeats."""
    rows = fill_sites(rows, [folder_site(file.path) for file in batch], "_file_index")
    con.register("_ingest_keys", rows)
    try:
        outcome = BatchOutcome()
        if not _keys_are_new(con, config, ahead, rows):
            return None
        add_loaded_files(con, "_ingest_keys", batch, outcome)
        if ahead is not None:
            ahead.write(rows, batch, parts, versions)
        if NOT_AHEAD in parts:  # (a backfill writes every part ahead: nothing to insert)
            con.execute(
                f"insert into samples_stored ({QUOTED_SAMPLE_COLUMNS}, load_id) "
                f"select {QUOTED_SAMPLE_COLUMNS}, $load_id from _ingest_keys "
                f"where _part = {NOT_AHEAD} order by gpu_uuid, ts",
                {"load_id": current_generation(con)},
            ).fetchall()
    finally:
        con.unregister("_ingest_keys")
    outcome.rows_inserted = rows.num_rows
    return outcome


def _keys_are_new(
    con: duckdb.DuckDBPyConnection, config: Config, ahead: CompactAhead | None, rows: pa.Table
) -> bool:
    """Whether the keys read (`rows`, registered as `_ingest_keys`) hold no NULL in a
    required column, and no (gpu_uuid, ts) twice or already loaded."""
    if pc.any(rows.column("_null")).as_py():
        return False
    times = pc.min_max(rows.column("ts"))
    min_ts, max_ts = times["min"].as_py(), times["max"].as_py()
    gpus = rows.column("gpu_uuid").combine_chunks()
    distinct = pc.unique(gpus)
    if repeats_a_key(con, rows, gpus, distinct):
        return False
    gpu_names = distinct.to_pylist()
    create_existing_view(con, config, min_ts, max_ts, ahead, "_ingest_keys", gpus=set(gpu_names))
    overlap = con.execute(
        ANY_EXISTING_SQL, {"min_ts": min_ts, "max_ts": max_ts, "gpus": gpu_names}
    ).fetchall()
    if overlap and not overlap[0][0]:
        return True
    existing = con.execute(
        f"""
        with existing as ({EXISTING_KEYS_SQL.format(batch="_ingest_keys")})
        select count(*) from _ingest_keys semi join existing using (gpu_uuid, ts)
        """,
        {"min_ts": min_ts, "max_ts": max_ts},
    ).fetchall()
    return bool(existing) and not existing[0][0]


def repeats_a_key(
    con: duckdb.DuckDBPyConnection, rows: pa.Table, gpus: pa.Array, distinct: pa.Array
) -> bool:
    """Whether a (gpu_uuid, ts) is in `rows` (sorted by _part, gpu_uuid, ts) twice; `gpus`
    is its gpu_uuid column, `distinct` that column's distinct values.

    When each GPU's rows are together (its files are in one part, as a host's are) and in
    strictly increasing time, no key repeats: two comparisons of neighbours, no hash table
    of the batch's keys. Otherwise the keys are counted."""
    if len(gpus) < 2:
        return False
    together = len(pc.run_end_encode(gpus).values) == len(distinct)
    times = rows.column("ts").combine_chunks()
    earlier, later = slice(0, len(gpus) - 1), slice(1, None)
    increasing = pc.or_(
        pc.not_equal(gpus[later], gpus[earlier]),
        pc.greater(times[later], times[earlier]),
    )
    if together and pc.all(increasing).as_py():
        return False
    repeated = con.execute(
        "select count(*) from "
        "(select 1 from _ingest_keys group by gpu_uuid, ts having count(*) > 1)"
    ).fetchall()
    return bool(repeated) and bool(repeated[0][0])
