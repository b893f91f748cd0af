"""The build flow: models run on a private warehouse copy that is then published."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from gpufleet.config import Config
from gpufleet.flows.build import build_flow
from gpufleet.warehouse.publish import write_transaction


def test_build_flow_publishes_documented_marts(prefect_harness: None, tmp_path: Path) -> None:
    (tmp_path / "gpufleet.toml").write_text('timezone = "Europe/Berlin"\n', encoding="utf-8")
    config = Config(data_dir=tmp_path)
    with write_transaction(config) as con:
        con.execute("insert into ref_users values ('alice', 'ml')")
        # Six 10 s samples of alice's process at 50 % from 2026-11-16 22:59:10Z (Berlin 23:59:10):
        # ts 22:59:10 .. 22:59:50 fall on Nov 16 (5 samples), 23:00:00Z is Berlin midnight.
        con.execute(
            """
            insert into samples_stored (ts, interval_s, host, gpu_index, gpu_uuid, gpu_name, status,
                                        gpu_util_pct, processes, load_id)
            select timestamptz '2026-11-16 22:59:10+00' + to_seconds(10 * k), 10, 'node1', 0,
                   'GPU-A', 'NVIDIA H100 80GB HBM3', 'ok', 50,
                   [{'pid': 1, 'user': 'alice', 'used_mem_bytes': 1, 'job_id': 'j1'}], 1
            from range(6) as r(k)
            """
        )

    result = build_flow(data_dir=str(tmp_path))

    assert result.mart_rows["samples_attributed"] == 6
    assert result.mart_rows["team_daily"] == 2
    assert "team_daily" in str(result)
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        # the view is counted as the table it names, row for row (count_mart_rows)
        viewed = con.execute("select count(*) from samples_attributed").fetchone()
        assert viewed == (result.mart_rows["samples_attributed"],)
        rows = con.execute(
            "select day, team, gpu_hours, avg_util_pct from team_daily order by day"
        ).fetchall()
        comment = con.execute(
            "select comment from duckdb_tables() where table_name = 'team_daily'"
        ).fetchone()
        temps = con.execute(
            "select count(*) from duckdb_tables() where table_name like 'int_%'"
        ).fetchone()
    assert rows == [
        (dt.date(2026, 11, 16), "ml", pytest.approx(50 / 3600), pytest.approx(50.0)),
        (dt.date(2026, 11, 17), "ml", pytest.approx(10 / 3600), pytest.approx(50.0)),
    ]
    assert comment is not None and comment[0]
    assert temps == (0,)
