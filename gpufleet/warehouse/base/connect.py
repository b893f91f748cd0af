"""Every DuckDB connection the pipeline opens, and how many threads it may use: by default
one per core (DuckDB's own default); `GPUFLEET_THREADS` caps them for every gpufleet process
on a host that others share (docs/reference.md, its environment variables), as
`OMP_NUM_THREADS` does for numerical libraries."""

from __future__ import annotations

import os
from collections.abc import Mapping

import duckdb

from gpufleet.errors import GpufleetError

THREADS_VARIABLE = "GPUFLEET_THREADS"

Setting = str | bool | int | float | list[str]  # a value of duckdb.connect's `config`


def thread_cap() -> int | None:
    """`GPUFLEET_THREADS` as a number of threads, None when unset or empty."""
    value = os.environ.get(THREADS_VARIABLE, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise GpufleetError(f"{THREADS_VARIABLE}={value!r}: not a whole number of threads above 0")
    return int(value)


def connect(
    database: str = ":memory:",
    *,
    read_only: bool = False,
    config: Mapping[str, Setting] | None = None,
) -> duckdb.DuckDBPyConnection:
    """`duckdb.connect` with `config`, its threads no more than `GPUFLEET_THREADS`."""
    settings = dict(config or {})
    cap = thread_cap()
    if cap is not None:
        asked = settings.get("threads")
        settings["threads"] = min(cap, asked) if isinstance(asked, int) and asked > 0 else cap
    return duckdb.connect(database, read_only=read_only, config=settings)
