"""A tiny in-memory fleet for the SQL model tests: raw rows in, marts out.

Imported by the tests/test_models_*.py modules; it holds no tests itself.
"""

from __future__ import annotations

import atexit
import datetime as dt
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb

from gpufleet.config import Config, IdleConfig, SeriesConfig
from gpufleet.warehouse.base import SAMPLE_COLUMNS, ensure_raw_tables
from gpufleet.warehouse.build import BuildResult, build_models

H100 = "NVIDIA H100 80GB HBM3"
T0 = dt.datetime(2026, 11, 16, 10, 0, tzinfo=dt.UTC)  # a Monday, 10:00 UTC


def at(seconds: float) -> dt.datetime:
    """T0 + seconds."""
    return T0 + dt.timedelta(seconds=seconds)


def proc(pid: int, user: str | None, used_mem_bytes: int, job_id: str | None = None) -> dict:
    return {"pid": pid, "user": user, "used_mem_bytes": used_mem_bytes, "job_id": job_id}


# The load a row inserted by hand belongs to: a new one, as if ingested on its own.
NEXT_LOAD = "(select coalesce(max(load_id), 0) + 1 from samples_stored)"
# slurm_jobs' columns as the rows written here give them (seen_ts, added later, left null)
SLURM_JOB_COLUMNS = (
    '(job_id, job_id_raw, cluster, "user", account, partition, state, team, gpus, hosts, '
    "start_ts, end_ts, source_file)"
)

# A sample's columns where `Fleet.sample` or `Fleet.series` is not given them.
SAMPLE_DEFAULTS: dict[str, Any] = {
    "interval_s": 10.0,
    "host": "node1",
    "gpu_index": 0,
    "gpu_uuid": "GPU-A",
    "gpu_name": H100,
    "status": "ok",
    "gpu_util_pct": 50.0,
    "power_w": None,
    "energy_mj": None,
    "temp_gpu_c": None,
    "sm_clock_mhz": None,
    "clock_event_mask": 0,
    "processes": [],
}


class Fleet:
    """Raw tables in an in-memory DuckDB, filled row by row, then built."""

    def __init__(
        self,
        *,
        timezone: str = "UTC",
        threshold_pct: float = 5.0,
        min_minutes: float = 30.0,
        max_gap_factor: float = 2.5,
    ) -> None:
        self.con = duckdb.connect(":memory:")
        ensure_raw_tables(self.con)
        # A data directory of its own: the warehouse is in memory, but retention deletes
        # raw partitions and reports under it.
        data_dir = Path(tempfile.mkdtemp(prefix="gpufleet-fleet-"))
        self.config = replace(
            Config(data_dir=data_dir),
            timezone=timezone,
            idle=IdleConfig(threshold_pct=threshold_pct, min_minutes=min_minutes),
            series=SeriesConfig(max_gap_factor=max_gap_factor),
        )

    def sample(self, ts: dt.datetime, **columns: Any) -> None:
        """A sample at `ts`: `columns` (any sample column: sm_active_pct, xid_errors, ...)
        over SAMPLE_DEFAULTS, a load of its own."""
        self._insert([ts], **columns)

    def series(self, start: dt.datetime, count: int, *, step_s: float = 10.0, **kw: Any) -> None:
        """`count` samples at start, start + step_s, ...; `interval_s` defaults to step_s. One
        INSERT (a row's took about 2 ms: a series of hundreds, a second), each row a load of
        its own in order, as `count` calls of `sample` would give."""
        kw.setdefault("interval_s", step_s)
        self._insert([start + dt.timedelta(seconds=k * step_s) for k in range(count)], **kw)

    def _insert(self, times: list[dt.datetime], **columns: Any) -> None:
        """A row at each of `times` with `sample`'s defaults and `columns`, each a new load."""
        row: dict[str, Any] = {**SAMPLE_DEFAULTS, **columns}
        row["processes"] = row["processes"] or []
        types = dict(SAMPLE_COLUMNS)
        names = ", ".join(f'"{name}"' for name in row)
        values = ", ".join(f"?::{types[name]}" for name in row)
        self.con.execute(
            f"""
            insert into samples_stored (ts, {names}, load_id)
            select ts, {values}, (select coalesce(max(load_id), 0) from samples_stored) + k
            from (select unnest(?::timestamptz[]) as ts, unnest(range(1, ? + 1)) as k)
            order by k
            """,
            [*row.values(), times, len(times)],
        )

    def user(self, user: str, team: str) -> None:
        self.con.execute("insert into ref_users values (?, ?)", [user, team])

    def host_rule(self, rule_order: int, host_glob: str, team: str) -> None:
        self.con.execute(
            "insert into ref_hosts (rule_order, host_glob, team) values (?, ?, ?)",
            [rule_order, host_glob, team],
        )

    def price_rule(self, rule_order: int, gpu_glob: str, usd_per_gpu_hour: float) -> None:
        self.con.execute(
            "insert into ref_prices (rule_order, gpu_glob, usd_per_gpu_hour) values (?, ?, ?)",
            [rule_order, gpu_glob, usd_per_gpu_hour],
        )

    def allocation(
        self,
        *,
        job_id: str,
        user: str | None,
        team: str | None,
        start_ts: dt.datetime,
        end_ts: dt.datetime | None,
        host: str = "node1",
        gpu_index: int | None = 0,
        cluster: str | None = None,
        gpu_uuid: str | None = None,
    ) -> None:
        self.con.execute(
            'insert into allocations (job_id, "user", team, host, gpu_index, start_ts, end_ts,'
            " source_file, cluster, gpu_uuid)"
            " values (?, ?, ?, ?, ?, ?, ?, 'raw/allocations/test.csv', ?, ?)",
            [job_id, user, team, host, gpu_index, start_ts, end_ts, cluster, gpu_uuid],
        )

    def build(self) -> BuildResult:
        return build_models(self.con, self.config)

    def rows(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """Query results as dicts."""
        cursor = self.con.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def one(self, sql: str, params: list[Any] | None = None) -> dict[str, Any]:
        rows = self.rows(sql, params)
        assert len(rows) == 1, rows
        return rows[0]


# Fleets built once per test process (a pytest-xdist worker), saved to a file: by name,
# the file and the fleet's configuration.
_SAVED: dict[str, tuple[Path, Config]] = {}
_SAVED_DIR = Path(tempfile.mkdtemp(prefix="gpufleet-saved-fleets-"))
atexit.register(shutil.rmtree, _SAVED_DIR, ignore_errors=True)


def built_once(name: str, make: Callable[[], Fleet]) -> Fleet:
    """A fresh copy of the fleet `make()` returns, which runs once per test process under
    `name`: its database is saved to a file then (COPY FROM DATABASE: every schema, table,
    view and comment, rows in the same order), and each call loads that file into a new
    in-memory database, so tests that start from the same built fleet do not build it again
    and change only their own copy."""
    if name not in _SAVED:
        made = make()
        saved = Path(tempfile.mkdtemp(dir=_SAVED_DIR)) / "fleet.duckdb"
        made.con.execute(f"attach '{saved}' as saved; copy from database memory to saved")
        made.con.execute("detach saved")
        made.con.close()
        _SAVED[name] = (saved, made.config)
    saved, config = _SAVED[name]
    fleet = Fleet()
    fleet.config = replace(config, data_dir=fleet.config.data_dir)
    fleet.con.close()
    fleet.con = duckdb.connect(":memory:")
    fleet.con.execute(f"attach '{saved}' as saved (read_only); copy from database saved to memory")
    fleet.con.execute("detach saved")
    return fleet
