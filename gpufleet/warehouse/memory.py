"""A build's DuckDB takes what the rest of the process leaves of its memory budget.

A 15-minute cycle ingests, then builds, in one process. After a cycle that loads many hours
at once (a deployment that stopped for a day), polars' allocator still holds the pages the
ingest's batches freed (it keeps them 30 s: `gpufleet/__init__.py`), and a build that let
DuckDB take its whole cap on top of them peaked at 2.6 GB at 1,000 GPUs. So the build sets
DuckDB's cap before each step: `BUILD_MEMORY_LIMIT`, or less when the rest of the process
holds more than the budget leaves. It never goes below `MIN_BUILD_MEMORY`: a tighter cap
only makes DuckDB spill to disk sooner.
"""

from __future__ import annotations

import os

import duckdb

MIB = 1024 * 1024
PROCESS_MEMORY_BUDGET = 1900 * MIB  # the whole process, DuckDB included
BUILD_MEMORY_LIMIT = 1536 * MIB  # DuckDB's cap when the rest of the process holds little
MIN_BUILD_MEMORY = 512 * MIB


def resident_bytes() -> int | None:
    """The process's resident memory now; None where /proc is not there (not Linux)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def duckdb_bytes(con: duckdb.DuckDBPyConnection) -> int:
    """The memory DuckDB's buffer manager holds for this connection's database instance."""
    row = con.execute("select coalesce(sum(memory_usage_bytes), 0) from duckdb_memory()").fetchone()
    return int(row[0]) if row else 0


def build_memory_limit(resident: int | None, held_by_duckdb: int) -> int:
    """DuckDB's cap, in bytes, for a process with `resident` bytes of which DuckDB holds
    `held_by_duckdb`."""
    if resident is None:
        return BUILD_MEMORY_LIMIT
    rest = max(0, resident - held_by_duckdb)
    return max(MIN_BUILD_MEMORY, min(BUILD_MEMORY_LIMIT, PROCESS_MEMORY_BUDGET - rest))


def fit_memory_limit(con: duckdb.DuckDBPyConnection) -> int:
    """Set DuckDB's cap for the build's next step (see the module's docstring); the cap."""
    limit = build_memory_limit(resident_bytes(), duckdb_bytes(con))
    con.execute(f"set memory_limit = '{limit // MIB}MiB'")
    return limit
