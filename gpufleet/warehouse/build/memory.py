"""A build's DuckDB takes what the rest of the process leaves of its memory budget.

A 15-minute cycle ingests, then builds, in one process. After a cycle that loads many hours
at once (a deployment that stopped for a day), polars' allocator still holds the pages the
ingest's batches freed (it keeps them 30 s: `gpufleet/__init__.py`), and DuckDB's whole
cap on top of them would take the process past its budget. So a build sets
DuckDB's cap at its start: `BUILD_MEMORY_LIMIT`, or less when the rest of the process
holds more than the budget leaves, and again before each step while it is less (so that
it rises once polars' allocator has given its pages back) or while the process holds more
than `MEASURE_ABOVE`. It never goes below `MIN_BUILD_MEMORY`: a tighter cap only makes
DuckDB spill to disk sooner.
"""

from __future__ import annotations

import os
import weakref

import duckdb

MIB = 1024 * 1024
PROCESS_MEMORY_BUDGET = 1900 * MIB  # the whole process, DuckDB included
# DuckDB's cap when the rest of the process holds little: '1536MB' as DuckDB reads it
# (10^6 bytes a MB)
BUILD_MEMORY_LIMIT = 1536 * 1000 * 1000
MIN_BUILD_MEMORY = 512 * MIB
# A process this large between two steps is measured again even at the full cap (DuckDB's
# own freed pages handed back first): a full build of several weeks grows between steps
# past what its start left room for. A build of a week stays below it, and is not
# measured again.
MEASURE_ABOVE = 1536 * MIB
# The cap fit_memory_limit set last on each connection, in bytes: kept here, not in a DuckDB
# variable, as reading that back was a statement a step (40 a small build, some 0.3 ms each).
_CAPS: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, int] = weakref.WeakKeyDictionary()


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


def fit_memory_limit(con: duckdb.DuckDBPyConnection, *, measure: bool = False) -> int:
    """Set DuckDB's cap for the build's next step (see the module's docstring); the cap.

    The process is measured at a build's start (`measure`), and after that while the cap
    is below `BUILD_MEMORY_LIMIT` or the process holds more than `MEASURE_ABOVE`: the rest
    of the process does not grow while it builds (only DuckDB's own freed pages do), and
    measuring costs each step time (handing DuckDB's freed pages back, which the step then
    faults in again), so it is done only where the cap may change."""
    current = _CAPS.get(con)
    if not measure and current is not None and current >= BUILD_MEMORY_LIMIT:
        resident = resident_bytes()
        if resident is None or resident <= MEASURE_ABOVE:
            return current
    # Setting the cap (here, to what it is) makes DuckDB hand the pages its allocator has
    # freed back to the system, so that they do not count as the rest of the process. The
    # next step faults them in again.
    con.execute(f"set memory_limit = '{current or BUILD_MEMORY_LIMIT}B'")
    limit = build_memory_limit(resident_bytes(), duckdb_bytes(con))
    con.execute(f"set memory_limit = '{limit}B'")
    _CAPS[con] = limit
    return limit
