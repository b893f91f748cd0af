"""What the pipeline bench measures gpufleet against: the floor, and the peer.

The floor is the least work that reads what the models use: every sample column that
sql/staging/stg_samples.sql reads (`FLOOR_COLUMNS`, those every raw file holds), each with
the cheapest aggregate that still decodes its values (`max`, `bool_or`; a list's length
and its first element's fields), and nothing that hashes (no `count(distinct ...)`). It is
read by each reader there is (DuckDB over one glob, over ingest's batches, over per-day
batches of 2,000 files, over the list of files; polars over ingest's batches), warm: the
bench reads the files once untimed first, and takes the fastest reader's best run.

The peer is what a user would run instead of gpufleet: one DuckDB statement that loads the
raw files into a table of a database file (`PEER_SQL`), as typed, in its own process
(`python -m bench.step peer`: time, peak RSS, bytes of its file a sample).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb

from gpufleet.warehouse.base import SAMPLE_COLUMNS

# The sample columns sql/staging/stg_samples.sql reads, in contract order.
FLOOR_COLUMNS = (
    "ts", "interval_s", "host", "gpu_index", "gpu_uuid", "gpu_name", "status",
    "gpu_util_pct", "mem_used_bytes", "mem_total_bytes", "power_w", "energy_mj",
    "temp_gpu_c", "sm_clock_mhz", "clock_event_mask", "processes", "alloc_job_id",
    "alloc_user", "cluster", "sm_active_pct", "tensor_active_pct", "dram_active_pct",
    "xid_errors", "ecc_uncorrected_volatile", "ecc_corrected_volatile",
    "remapped_rows_pending", "remapped_rows_failure", "retired_pages_pending",
    "pcie_replay_count", "parent_gpu_uuid", "mig_slice_fraction",
)  # fmt: skip
PROCESS_FIELDS = ("pid", "user", "used_mem_bytes", "job_id")
CONTRACT_TYPES = dict(SAMPLE_COLUMNS)

# The statement a user would write to load the raw files into DuckDB (the peer).
PEER_SQL = "create table samples as select * from read_parquet(?)"


@functools.cache
def floor_columns(files_glob: str) -> tuple[str, ...]:
    """The FLOOR_COLUMNS (and, as "processes.<field>", the PROCESS_FIELDS) that every file
    of `files_glob` holds: a column some writer leaves out is left out of the floor."""
    rows = (
        duckdb.connect()
        .execute(
            "select name, count(distinct file_name) = (select count(distinct file_name) "
            "from parquet_schema($1)) from parquet_schema($1) group by name",
            [files_glob],
        )
        .fetchall()
    )
    everywhere = {name for name, in_every_file in rows if in_every_file}
    columns = [name for name in FLOOR_COLUMNS if name in everywhere]
    if "processes" in columns:
        columns += [f"processes.{field}" for field in PROCESS_FIELDS if field in everywhere]
    return tuple(columns)


def _duckdb_aggregate(column: str) -> str:
    if column.startswith("processes."):
        return f'max(processes[1]."{column.split(".", 1)[1]}")'
    kind = CONTRACT_TYPES[column]
    if kind.endswith("[]"):
        return f'sum(len("{column}"))'
    if kind == "boolean":
        return f'bool_or("{column}")'
    return f'max("{column}")'


def floor_sql(columns: Sequence[str]) -> str:
    """One pass over the files `?` names, aggregating each of `columns` as cheaply as reads
    its values."""
    aggregates = ",\n    ".join(_duckdb_aggregate(column) for column in columns)
    return f"select count(*),\n    {aggregates}\nfrom read_parquet(?, hive_partitioning = false)"


def duckdb_floor_seconds(
    files_glob: str, batches: Sequence[Sequence[str]] | None = None, *, memory_limit: str = ""
) -> float:
    """Seconds DuckDB takes for `floor_sql` over `files_glob` in one query, or over each of
    `batches` (DuckDB path literals) in turn."""
    sql = floor_sql(floor_columns(files_glob))
    con = duckdb.connect()
    if memory_limit:
        con.execute(f"set memory_limit = '{memory_limit}'")
    started = time.perf_counter()
    for files in batches if batches is not None else [files_glob]:
        con.execute(sql, [list(files) if batches is not None else files])
        con.fetchall()
    return time.perf_counter() - started


def polars_floor_seconds(files_glob: str, batches: Sequence[Sequence[str]]) -> float:
    """Seconds polars (the reader ingest uses) takes for the same aggregates over each of
    `batches` (plain paths) in turn, every file's columns cast up to the widest type a
    writer may use."""
    import polars as pl

    columns = floor_columns(files_glob)
    fields = [column.split(".", 1)[1] for column in columns if column.startswith("processes.")]
    wide: dict[str, pl.DataType] = {
        "timestamptz": pl.Datetime("us", "UTC"),
        "float": pl.Float64(),
        "double": pl.Float64(),
        "varchar": pl.String(),
        "boolean": pl.Boolean(),
        "ubigint": pl.UInt64(),
        "integer[]": pl.List(pl.Int64),
    }
    process = pl.Struct(
        {"pid": pl.UInt32, "user": pl.String, "used_mem_bytes": pl.Int64, "job_id": pl.String}
    )
    schema: dict[str, pl.DataType] = {
        column: pl.List(process)
        if column == "processes"
        else wide.get(CONTRACT_TYPES[column], pl.Int64())
        for column in columns
        if "." not in column
    }
    aggregates: list[pl.Expr] = [pl.len()]
    for column, kind in schema.items():
        if column == "processes":
            aggregates.append(pl.col(column).list.len().sum())
            aggregates += [
                pl.col(column).list.first().struct.field(field).max().alias(f"p_{field}")
                for field in fields
            ]
        elif isinstance(kind, pl.List):
            aggregates.append(pl.col(column).list.len().sum())
        elif kind == pl.Boolean:
            aggregates.append(pl.col(column).any())
        else:
            aggregates.append(pl.col(column).max())
    started = time.perf_counter()
    for files in batches:
        pl.scan_parquet(
            list(files),
            hive_partitioning=False,
            glob=False,
            schema=schema,
            extra_columns="ignore",
            cast_options=pl.ScanCastOptions(integer_cast="upcast", float_cast="upcast"),
        ).select(aggregates).collect()
    return time.perf_counter() - started


def peer_load(data_dir: Path) -> dict[str, object]:
    """Run PEER_SQL over `data_dir`'s raw sample files into `data_dir`/peer.duckdb, as a
    user types it; a fleet of mixed schemas needs `union_by_name = true`, which is then
    used (and said). The database file is deleted after it is measured."""
    target = data_dir / "peer.duckdb"
    target.unlink(missing_ok=True)
    files_glob = str(data_dir / "raw" / "samples" / "**" / "*.parquet")
    statement = PEER_SQL
    with duckdb.connect(str(target)) as con:
        try:
            con.execute(statement, [files_glob])
        except duckdb.Error:
            con.execute("drop table if exists samples")
            statement = PEER_SQL.replace("?)", "?, union_by_name = true)")
            con.execute(statement, [files_glob])
        counted = con.execute("select count(*) from samples").fetchone()
    rows = int(counted[0]) if counted else 0
    size = target.stat().st_size
    target.unlink()
    return {"rows": rows, "bytes": size, "statement": statement}
