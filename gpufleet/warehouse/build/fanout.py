"""A full build's per-series models, a range of GPUs per Dask worker (docs/dask.md).

With `[compute] dask` set, the flows pass a `FanOut` into the build: `run` runs partitions
somewhere (Prefect tasks on a Dask cluster: gpufleet/flows/fanout.py) and returns what each
wrote. This module is the pipeline host's side: when the build reaches the first of the
CHUNKED_MODELS, it writes the inputs every worker needs as Parquet under
`<data_dir>/scratch/build-<id>/` (the intermediate and reference tables the models read,
and each range's rows of `samples_stored`: the lake's files the workers read where they
lie), runs the partitions, and loads their Parquet partials into the build's private copy
of the warehouse, which is published once as every build is. A failed partition fails the
build before anything is published; the scratch folder goes either way. The folder is new
for each build (a late partition of a build given up writes nowhere a later one reads),
and what earlier builds left in `scratch/build-*` goes as a build starts.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.base.sql_text import literal
from gpufleet.warehouse.build import full as full_module
from gpufleet.warehouse.build import models as models_module
from gpufleet.warehouse.build.memory import fit_memory_limit
from gpufleet.warehouse.build.models import BUILD_SETTINGS, Model, create_empty
from gpufleet.warehouse.build.partition import Partition, PartitionResult
from gpufleet.warehouse.lake.fanout import scratch_folder
from gpufleet.warehouse.lake.ranges import uuid_ranges
from gpufleet.warehouse.lake.samples import STORED, evicted_files, samples_sql

SCRATCH_DIR_NAME = "scratch"
# The worker's variables holding its range's first and last gpu_uuid: its `samples` view
# reads them (a view takes no parameters; DuckDB folds `getvariable` into the lake files'
# filters, as it would a literal).
_RANGE = "gpu_uuid between getvariable('fanout_first_uuid') and getvariable('fanout_last_uuid')"
_VIEWS = ("temp_view", "view")


@dataclass(kw_only=True)
class FanOutReport:
    """What the last fanned-out build did, for `bench/dask_build.py`."""

    partitions: list[Partition] = field(default_factory=list)
    results: list[PartitionResult] = field(default_factory=list)
    export_seconds: float = 0.0  # the host writing the inputs
    input_bytes: int = 0
    run_seconds: float = 0.0  # the partitions, from the first submitted to the last done
    load_seconds: float = 0.0  # the host loading the partials
    load_cpu_seconds: float = 0.0  # its CPU time in that (every thread: DuckDB's included)


@dataclass(kw_only=True)
class FanOut:
    """How a full build fans out: `run` takes the partitions and returns each one's result
    in their order, or raises (a GpufleetError of one line) when one failed."""

    config: Config
    run: Callable[[Sequence[Partition]], Sequence[PartitionResult]]
    workers: Callable[[], int]  # how many there are: at least as many partitions
    threads: int | None = None  # each worker's DuckDB threads (None: all its cores)
    memory_limit: str | None = None  # each worker's DuckDB memory limit (None: its default)
    last: FanOutReport | None = None

    def build_models(
        self,
        con: duckdb.DuckDBPyConnection,
        models: Mapping[str, Model],
        order: list[str],
        fanned: list[str],
        samples: int,
        sql_dir: Path,
    ) -> None:
        """Create the per-series models `fanned` (in build order) on `con` from partitions
        run by `run`: at least one per worker, and one per FULL_BUILD_CHUNK_SAMPLES samples."""
        early = [
            f"{name} reads {other}"
            for name in fanned
            for other in models[name].depends_on
            if other not in fanned and order.index(other) > order.index(fanned[0])
        ]
        if early:  # the partitions build them together, so they may read nothing built later
            raise ValueError(f"a fanned-out build needs {'; '.join(early)} built before")
        self.last = FanOutReport()
        count = max(1, self.workers(), -(-samples // full_module.FULL_BUILD_CHUNK_SAMPLES))
        macros = (sql_dir / models_module.MACROS_FILE_NAME).read_text(encoding="utf-8")
        scratch = scratch_folder(self.config, "build")
        try:
            partitions = _write_inputs(con, self, models, order, fanned, count, scratch, macros)
            self.last.partitions = partitions
            started = time.perf_counter()
            self.last.results = list(self.run(partitions)) if partitions else []
            self.last.run_seconds = time.perf_counter() - started
            started, started_cpu = time.perf_counter(), time.process_time()
            for name in fanned:
                fit_memory_limit(con)
                create_empty(con, models[name])
                paths = [str(p.output_path(name)) for p in partitions]
                if paths:
                    con.execute(
                        f"insert into {name} by name select * from read_parquet(?)", [paths]
                    )
            self.last.load_seconds = time.perf_counter() - started
            self.last.load_cpu_seconds = time.process_time() - started_cpu
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class _Inputs:
    views: list[str]  # models the workers create as views (in build order)
    tables: list[str]  # relations of the warehouse the workers get as tables


def partition_bounds(uuids: Sequence[str], count: int) -> list[tuple[str, str]]:
    """`count` ranges of the sorted `uuids` (first, last), each with as many GPUs (+-1)."""
    return [
        (uuids[len(uuids) * part // count], uuids[len(uuids) * (part + 1) // count - 1])
        for part in range(count)
        if len(uuids) * part // count < len(uuids) * (part + 1) // count
    ]


def _catalog(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every table and view the build's connection resolves: 'schema.name' (and 'name'
    for those of main and temp) -> 'table' or 'view'."""
    rows = con.execute(
        """
        select schema_name, table_name, temporary, 'table' from duckdb_tables()
        where database_name in (current_database(), 'temp')
        union all
        select schema_name, view_name, temporary, 'view' from duckdb_views()
        where not internal and database_name in (current_database(), 'temp')
        order by temporary  -- a temp relation hides one of main of the same name
        """
    ).fetchall()
    found: dict[str, str] = {}
    for schema, name, temporary, kind in rows:
        if schema == "main":
            found[name] = kind
        if not temporary:
            found[f"{schema}.{name}"] = kind
    return found


def _worker_inputs(
    con: duckdb.DuckDBPyConnection, models: Mapping[str, Model], order: list[str], built: set[str]
) -> _Inputs:
    """The views and tables the models `built` read (their syntax trees': `Model.reads`),
    through the views among the models. `samples` is the workers' own."""
    catalog = _catalog(con)
    views: set[str] = set()
    tables: set[str] = set()
    pending = list(built)
    seen: set[str] = set()
    while pending:
        model = models[pending.pop()]
        for name in model.reads:
            if name in seen or name in built or name in ("samples", STORED):
                continue
            seen.add(name)
            other = models.get(name)
            if other is not None and other.materialized in _VIEWS:
                views.add(name)
                pending.append(name)
            elif name in catalog:
                tables.add(name)
    return _Inputs(views=[name for name in order if name in views], tables=sorted(tables))


def _export(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    query: str,
    path: Path,
    *,
    view: bool = False,
    parameters: Sequence[object] = (),
) -> list[tuple[str, tuple[object, ...]]]:
    """Write `query` (rows of `relation`; its `parameters`) to `path`; the statements that
    make it on a worker a table of the same name and column types, or a `view` of the file
    (read as it goes)."""
    con.execute(f"copy ({query}) to ? (format parquet)", [*parameters, str(path)])
    statements: list[tuple[str, tuple[object, ...]]] = []
    schema, _, _ = relation.rpartition(".")
    if schema:
        statements.append((f"create schema if not exists {schema}", ()))
    columns = con.execute(f"describe select * from {relation}").fetchall()
    if view:  # a view takes no parameters: the path is written into it
        typed = ", ".join(f'"{name}"::{kind} as "{name}"' for name, kind, *_ in columns)
        read = f"read_parquet({literal(str(path))})"
        return [*statements, (f"create view {relation} as select {typed} from {read}", ())]
    listed = ", ".join(f'"{name}" {kind}' for name, kind, *_ in columns)
    statements.append((f"create table {relation} ({listed})", ()))
    statements.append((f"insert into {relation} select * from read_parquet(?)", (str(path),)))
    return statements


def _settings(
    con: duckdb.DuckDBPyConnection, macros: str, variables: Mapping[str, object]
) -> list[tuple[str, tuple[object, ...]]]:
    """The build's settings, variables and macros, as the host has them."""
    statements: list[tuple[str, tuple[object, ...]]] = [(s, ()) for s in BUILD_SETTINGS]
    for setting in ("TimeZone", "Calendar"):
        row = con.execute("select current_setting(?)", [setting]).fetchone()
        if row and row[0]:
            statements.append((f"set {setting} = ?", (str(row[0]),)))
    statements += [(f"set variable {name} = ?", (value,)) for name, value in variables.items()]
    statements.append((macros, ()))
    return statements


def _write_inputs(
    con: duckdb.DuckDBPyConnection,
    fan_out: FanOut,
    models: Mapping[str, Model],
    order: list[str],
    fanned: list[str],
    count: int,
    scratch: Path,
    macros: str,
) -> list[Partition]:
    """Write what the workers read under `scratch`; the partitions, `count` at most."""
    assert fan_out.last is not None
    started = time.perf_counter()
    uuids = [r[0] for r in con.execute("select gpu_uuid from int_series_ids order by 1").fetchall()]
    inputs_dir = scratch / "inputs"
    inputs_dir.mkdir(parents=True)
    needed = _worker_inputs(con, models, order, set(fanned))
    setup = _settings(con, macros, models_module.model_variables(fan_out.config))
    # model read through a view: (that view, the relation it joins that grows with the
    # history, the SQL of a slice's part of it), as the embedded slices have them
    joins = {join[0]: join for name, join in full_module.SLICE_JOINS.items() if name in fanned}
    joined = {relation for _, relation, _ in joins.values()}
    for n, table in enumerate(needed.tables):  # the host's temp tables are plain ones there
        path = inputs_dir / f"t{n:04d}.parquet"
        # a relation a partition joins only part of: a view of its file, read once for it
        setup += _export(con, table, f"select * from {table}", path, view=table in joined)
    # each partition's view names only the lake files that may hold its GPUs
    ranges = uuid_ranges(con, evicted_files(con, fan_out.config))
    partitions = []
    bounds = partition_bounds(uuids, count)
    for index, (first, last) in enumerate(bounds):
        path = inputs_dir / f"{STORED}-{index:05d}.parquet"
        query = f"select * from {STORED} where gpu_uuid between ? and ?"
        own = _export(con, STORED, query, path, view=True, parameters=(first, last))
        own.append(("set variable fanout_first_uuid = ?", (first,)))
        own.append(("set variable fanout_last_uuid = ?", (last,)))
        own.append(
            (
                f"create view samples as select * from "
                f"({samples_sql(ranges.holding(first, last))}) where {_RANGE}",
                (),
            )
        )
        own += _own_pieces(joins.values())
        own += [
            (f"create view {name} as\n{_joined_view(models[name], joins)}", ())
            for name in needed.views
        ]
        partitions.append(
            Partition(
                index=index,
                count=len(bounds),
                first_uuid=first,
                last_uuid=last,
                output_dir=str(scratch / "partials"),
                temp_dir=str(scratch / "spill" / f"{index:05d}"),
                setup=tuple(setup + own),
                models=tuple((name, models[name].sql) for name in fanned),
                threads=fan_out.threads,
                memory_limit=fan_out.memory_limit,
            )
        )
    fan_out.last.input_bytes = sum(path.stat().st_size for path in inputs_dir.iterdir())
    fan_out.last.export_seconds = time.perf_counter() - started
    return partitions


def _own_pieces(joins: Collection[tuple[str, str, str]]) -> list[tuple[str, tuple[object, ...]]]:
    """The partition's part of the relation its views join (`_chunk_joined`; full.SLICE_JOINS
    reads a slice's raw rows as `_chunk`, here the partition's `samples`), so that the joins
    build their hash tables over its own hosts' rows, not the whole history's."""
    if not joins:
        return []
    ((_, _, part),) = joins  # one relation, as each embedded slice has
    return [
        ("create temp view _chunk as select * from samples", ()),
        (f"create temp table _chunk_joined as {part}", ()),
    ]


def _joined_view(model: Model, joins: Mapping[str, tuple[str, str, str]]) -> str:
    """The select of `model`, a view, reading its partition's part of what it joins."""
    join = joins.get(model.name)
    return models_module.render(model, {join[1]: "_chunk_joined"} if join else None)
