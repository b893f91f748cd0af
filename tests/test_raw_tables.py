"""ensure_raw_tables: the DDL runs only where it would change something."""

from __future__ import annotations

from pathlib import Path

import duckdb

from gpufleet.warehouse.base.raw_tables import ensure_raw_tables
from tests.scans import ScanCounter


def test_a_warehouse_that_has_the_raw_tables_runs_one_catalog_query(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        ensure_raw_tables(con)
        counter = ScanCounter(con, tmp_path / "profile.json")
        ensure_raw_tables(counter)  # type: ignore[arg-type]
    assert len(counter.statements) == 1
    assert "create" not in counter.statements[0]


def test_a_warehouse_that_lacks_a_column_or_a_table_gets_it(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        ensure_raw_tables(con)
        con.execute("alter table slurm_jobs drop column seen_ts")
        con.execute("drop table build_state.lake_files")
        con.execute("alter table allocations alter column gpu_index set not null")
        ensure_raw_tables(con)
        columns = {row[0]: row[1] for row in con.execute("describe allocations").fetchall()}
        assert "seen_ts" in {row[0] for row in con.execute("describe slurm_jobs").fetchall()}
        assert con.execute("select count(*) from build_state.lake_files").fetchone() == (0,)
        nullable = con.execute(
            "select is_nullable from duckdb_columns()"
            " where table_name = 'allocations' and column_name = 'gpu_index'"
        ).fetchone()
    assert "gpu_index" in columns
    assert nullable == (True,)
