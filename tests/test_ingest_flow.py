"""The Prefect flow around the ingest functions (one test harness per session)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import duckdb
import pytest

from gpufleet.errors import GpufleetError
from gpufleet.flows.ingest import ingest_flow
from gpufleet.warehouse.ingest import IngestResult, QuarantineWarning
from tests.test_ingest import DAY1, sample, write_samples

pytestmark = pytest.mark.usefixtures("prefect_harness")


def test_the_flow_loads_and_returns_a_printable_result(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write_samples(data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10), sample(10)])
    result = ingest_flow(data_dir=str(data_dir))
    assert isinstance(result, IngestResult)
    assert str(result).startswith(
        "ingest: 1 files, 2 new samples, 1 duplicates skipped, 0 quarantined"
    )
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from samples").fetchone() == (2,)
    assert ingest_flow(data_dir=str(data_dir)).samples_loaded == 0


@pytest.mark.parametrize("name", ["ingest", "ingest-and-build"])
def test_the_flows_report_a_quarantined_file_once_through_their_run_logger(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from gpufleet.flows.ingest_and_build import ingest_and_build

    data_dir = tmp_path / "data"
    write_samples(data_dir, f"{DAY1}/a.parquet", [sample(0)])
    (data_dir / DAY1 / "b.parquet").write_bytes(b"garbage")
    flow = ingest_flow if name == "ingest" else ingest_and_build
    with caplog.at_level(logging.WARNING), warnings.catch_warnings():
        warnings.simplefilter("error", QuarantineWarning)  # the run logger says it, not a warning
        result = flow(data_dir=str(data_dir))
    assert "1 files, 1 new samples" in str(result)
    message = f"quarantined {DAY1}/b.parquet: cannot read Parquet"
    said = [r for r in caplog.records if message in r.getMessage()]
    assert len(said) == 1 and said[0].name.startswith("prefect"), [r.name for r in said]
    assert (data_dir / "quarantine" / DAY1 / "b.parquet").is_file()
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
        recorded = con.execute("select path, moved_to from quarantined_files").fetchall()
    assert recorded == [(f"{DAY1}/b.parquet", f"quarantine/{DAY1}/b.parquet")]


def test_the_flow_fails_on_a_bad_reference_file_and_reads_a_config_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "ref").mkdir(parents=True)
    (data_dir / "ref" / "users.csv").write_text("user,team\nalice\n")
    config = tmp_path / "gpufleet.toml"
    config.write_text('timezone = "Europe/Berlin"\n')
    with pytest.raises(GpufleetError, match=r"users\.csv: line 2: expected 2 fields"):
        ingest_flow(data_dir=str(data_dir), config_path=str(config))
    assert not (data_dir / "warehouse.duckdb").exists()
