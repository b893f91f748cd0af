"""The full build: every model from scratch, the per-series ones a range of GPUs at a time.

`build/run.py` calls `build_all_models` when a build cannot be incremental. Over
FULL_BUILD_CHUNK_SAMPLES samples, each of the CHUNKED_MODELS is built a slice of the GPUs
at a time, so that its window fits in the build's memory; a slice reads only the lake
files that may hold its GPUs (`lake/ranges.py`). With a FanOut, Dask workers build those
models instead (`fanout.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from gpufleet.warehouse.build.ids import record_new_ids
from gpufleet.warehouse.build.memory import fit_memory_limit
from gpufleet.warehouse.build.models import (
    DOCS_FILE_NAME,
    PERSISTENT,
    TABLES,
    Model,
    apply_all_docs,
    create_empty,
    create_model,
    drop_model,
    render,
    shared_docs,
)
from gpufleet.warehouse.build.steps import StepClock
from gpufleet.warehouse.lake.ranges import uuid_ranges
from gpufleet.warehouse.lake.samples import LakeFiles, samples_sql

if TYPE_CHECKING:
    from gpufleet.warehouse.build.fanout import FanOut

# A full build of more samples than this builds the per-series models a slice of the
# GPUs at a time: the window over a week of 1,000 GPUs does not fit in the build's memory.
# Smaller slices cost more per sample; larger ones make int_run_pieces spill to disk.
FULL_BUILD_CHUNK_SAMPLES = 8_000_000
# The footer cache keeps each lake file's parsed footer in the process, several times what
# DuckDB counts against its memory limit; over thousands of files it takes the memory the
# build's cap assumes is free (the cap falls to its floor, and a large delete runs out of
# memory). Above this many files it is off.
METADATA_CACHE_FILES = 1_000
# model: (the relation sliced, the staging view that reads it when it is a raw table)
CHUNKED_MODELS = {
    "samples_attributed_rows": ("samples", "stg_samples"),
    "int_run_pieces": ("samples_attributed_rows", ""),
}
# model: (the view it reads through, the relation that view joins which grows with the
# history, the SQL of a slice's part of it). The allocations' hour pieces are joined on the
# sample's host_id: a slice joins those of its own hosts only (the hosts of its raw rows,
# `_chunk`, which stg_samples passes as they are: reading them through stg_samples would
# run its MIG join). Joined whole, every slice built its three joins' hash tables over the
# whole history's pieces: a cost that grows with slices x history, the square of the
# samples (bench/sizing.md, 2026-11-29).
SLICE_JOINS = {
    "samples_attributed_rows": (
        "int_samples_attributed",
        "int_allocation_segments",
        """
        select * from int_allocation_segments
        where host_id in (select host_id from int_hosts where host in (select host from _chunk))""",
    ),
}

# Marts a cycle looks rows up in by a column that grows with time (`incremental/`, the other
# slot's replay, the data tests, the kept runs): a full build writes them in that order, so
# that DuckDB's zone maps skip the row groups of older days (or runs that ended earlier);
# the rows a cycle adds are appended after them. A hash aggregate leaves them in no order.
ORDERED_MARTS = {
    "idle_episodes": "end_ts",
    "thermal_events": "end_ts",
    "run_pieces": "day",
    "gpu_hourly": "day",
    "gpu_team_daily": "day",
}


def build_all_models(
    con: duckdb.DuckDBPyConnection,
    models: Mapping[str, Model],
    order: list[str],
    sql_dir: Path,
    *,
    fan_out: FanOut | None = None,
    lake: LakeFiles | None = None,
    clock: StepClock | None = None,
) -> None:
    """A full build: every model from scratch; the marts end up as documented tables (and
    views). The caller starts the id tables afresh first (ids.forget_ids). With `fan_out`,
    the CHUNKED_MODELS are built a GPU range per partition on its workers (`fanout.py`).
    `lake`: the files the `samples` view names (lake.samples.evicted_files), of which a
    slice reads only those that may hold its GPUs; None reads the view as it is. `clock`
    times each model (its step named after it) and the build's own steps (`steps.py`)."""
    clock = clock or StepClock.start()
    docs = shared_docs(sql_dir)
    marts = [name for name in order if models[name].layer == "marts"]
    undocumented = sorted(set(marts) - docs.keys())
    if undocumented:
        raise ValueError(f"{sql_dir / 'marts' / DOCS_FILE_NAME}: no [{undocumented[0]}]")
    # The models open each lake file a dozen times (the id models, then every slice), and
    # no file changes during a full build: its footer is parsed once, by the count below,
    # not at every open. Off again after, as a cycle swaps files
    # under the same paths. Only for a small lake: see METADATA_CACHE_FILES.
    if lake is None or len(lake) <= METADATA_CACHE_FILES:
        con.execute("set parquet_metadata_cache = true")
    try:
        with clock.step("count_samples") as counted:
            row = con.execute("select count(*) from samples").fetchone()  # the lake's footers
            samples = counted.rows = int(row[0] if row else 0)
        chunks = max(1, -(-samples // FULL_BUILD_CHUNK_SAMPLES))
        fanned = [name for name in order if name in CHUNKED_MODELS] if fan_out else []
        for name in order:
            if name in fanned:
                if fan_out and name == fanned[0]:  # all at once, where the first is due
                    with clock.step("+".join(fanned), is_model=True):
                        fan_out.build_models(con, models, order, fanned, samples, sql_dir)
                record_new_ids(con, name)
                continue
            with clock.model(con, name, is_table=models[name].materialized in TABLES) as built:
                if chunks > 1 and name in CHUNKED_MODELS:
                    _create_in_chunks(con, models, name, chunks, lake)  # fits the cap per slice
                else:
                    fit_memory_limit(con)
                    order_by = ORDERED_MARTS.get(name, "")
                    built.rows = create_model(con, models[name], order_by=order_by)
                record_new_ids(con, name)
        with clock.step("comments"):
            # The marts, then the tables ingest writes that users query too (samples,
            # quarantined_files).
            documented = [*marts, *sorted(docs.keys() - set(marts))]
            apply_all_docs(
                con, {name: docs[name] for name in documented}, sql_dir / "marts" / DOCS_FILE_NAME
            )
    finally:
        con.execute("reset parquet_metadata_cache")
        for name in reversed(order):
            if models[name].materialized not in PERSISTENT:
                drop_model(con, models[name])


def _create_in_chunks(
    con: duckdb.DuckDBPyConnection,
    models: Mapping[str, Model],
    name: str,
    chunks: int,
    lake: LakeFiles | None,
) -> None:
    """A per-series model, a slice of the GPUs at a time: its windows never cross series,
    and a slice's window fits in the build's memory where the whole fleet's does not."""
    model = models[name]
    source, view = CHUNKED_MODELS[name]
    create_empty(con, model)
    source_model = models.get(source)
    # Slices are ranges of gpu_uuid: both sources are stored sorted by it within each load
    # or build, so zone maps skip most row groups (a hash of the uuid would read them all).
    # A model's rows have series ids instead (int_series_ids), which a full build numbers
    # in uuid order: the range of a slice's ids skips the same row groups.
    # int_series_ids holds every gpu_uuid of the samples once (built before both models):
    # a distinct over the samples would open every file of the lake again.
    uuids = [
        row[0] for row in con.execute("select gpu_uuid from int_series_ids order by 1").fetchall()
    ]
    bounds = [
        (uuids[len(uuids) * chunk // chunks], uuids[len(uuids) * (chunk + 1) // chunks - 1])
        for chunk in range(chunks)
        if len(uuids) * chunk // chunks < len(uuids) * (chunk + 1) // chunks
    ]
    in_slice = "gpu_uuid between getvariable('chunk_first_uuid') and getvariable('chunk_last_uuid')"
    if source_model is not None:
        in_slice = f"""
            series_id between getvariable('chunk_first_id') and getvariable('chunk_last_id')
            and series_id in (select series_id from int_series_ids where {in_slice})"""

    def read_slice(relation: str) -> None:
        con.execute(
            f"create or replace temp view _chunk as select * from {relation} where {in_slice}"
        )

    read_slice(source)
    # the raw samples: a slice names only the lake files that may hold its GPUs
    ranges = uuid_ranges(con, lake) if source_model is None and lake is not None else None
    joined = SLICE_JOINS.get(name)
    if joined is not None:  # the view reads the slice's part of the relation (_chunk_joined)
        con.execute(f"create or replace temp table _chunk_joined as from {joined[1]} limit 0")
        create_model(con, models[joined[0]], {joined[1]: "_chunk_joined"})
    try:
        for first, last in bounds:
            fit_memory_limit(con)
            if ranges is not None:
                read_slice(f"({samples_sql(ranges.holding(first, last))})")
            con.execute("set variable chunk_first_uuid = ?", [first])
            con.execute("set variable chunk_last_uuid = ?", [last])
            if joined is not None:
                con.execute(f"create or replace temp table _chunk_joined as {joined[2]}")
            if source_model is None:  # a raw table: the staging view reads the slice
                create_model(con, models[view], {source: "_chunk"})
                con.execute(f"insert into {name} by name\n{model.sql}")
            else:
                for variable, extreme in (("chunk_first_id", "min"), ("chunk_last_id", "max")):
                    con.execute(
                        f"set variable {variable} = (select {extreme}(series_id) "
                        "from int_series_ids where gpu_uuid between ? and ?)",
                        [first, last],
                    )
                con.execute(f"insert into {name} by name\n{render(model, {source: '_chunk'})}")
    finally:
        if source_model is None:
            create_model(con, models[view])
        if joined is not None:
            create_model(con, models[joined[0]])
            con.execute("drop table if exists temp._chunk_joined")
        con.execute("drop view if exists temp._chunk")
        for variable in ("uuid", "id"):
            con.execute(f"reset variable chunk_first_{variable}")
            con.execute(f"reset variable chunk_last_{variable}")
