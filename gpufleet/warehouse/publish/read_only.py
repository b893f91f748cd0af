"""Opening the published warehouse read-only: the one way readers open it.

Reports, notices, showback, `gpufleet query`, the analyst API and ingest (for what the
published warehouse last read) all open it here. A reader gets the snapshot published
last and never blocks the writer (`slots.py`: a publish links a new file in its place).
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base.connect import connect


def connect_read_only(config: Config, *, tables: Sequence[str] = ()) -> duckdb.DuckDBPyConnection:
    """A read-only connection on the published warehouse snapshot, or a GpufleetError that
    says what to run: when there is no warehouse yet, or it lacks one of `tables` (the
    tables of schema main the caller reads, which only a build makes)."""
    warehouse = config.warehouse_path
    if not warehouse.is_file():
        todo = "'gpufleet ingest' and 'gpufleet build'" if tables else "'gpufleet ingest'"
        raise GpufleetError(f"{warehouse}: no warehouse yet; run {todo} first")
    try:
        con = connect(str(warehouse), read_only=True)
    except duckdb.Error as exc:
        raise GpufleetError(f"{warehouse}: cannot open the warehouse: {exc}") from exc
    if tables:
        present = {
            name
            for (name,) in con.execute(
                "select table_name from information_schema.tables "
                "where table_schema = 'main' and table_catalog = current_database()"
            ).fetchall()
        }
        missing = [name for name in tables if name not in present]
        if missing:
            con.close()
            raise GpufleetError(
                f"{warehouse}: the warehouse has no {', '.join(missing)}; "
                "run 'gpufleet build' first"
            )
    return con
