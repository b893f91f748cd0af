"""Stale input is an error: `gpufleet ingest` fails in one line when the raw location is
missing or empty, or no new sample file arrived within `[ingest] stale_after_minutes` (by
file time, not sample time), after loading and publishing what it found."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import duckdb
import pytest

from gpufleet.cli import main
from gpufleet.config import Config, IngestConfig, load_config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.ingest import ingest
from tests.test_ingest import DAY1, DAY2, sample, write_samples

HOUR_S = 3600


def _age(path: Path, seconds: float) -> None:
    """Give `path` (a file, or every file below a folder) an mtime `seconds` ago."""
    when = time.time() - seconds
    for file in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
        os.utime(file, (when, when))


def _samples_in_warehouse(config: Config) -> int:
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        row = con.execute("select count(*) from samples").fetchone()
    return int(row[0]) if row else 0


def test_the_key_defaults_to_60_and_is_checked(tmp_path: Path) -> None:
    assert Config().ingest.stale_after_minutes == 60
    path = tmp_path / "gpufleet.toml"
    path.write_text("[ingest]\nstale_after_minutes = 0\n")
    assert load_config(config_path=path, environ={}).ingest.stale_after_minutes == 0
    path.write_text("[ingest]\nstale_after_minutes = -5\n")
    with pytest.raises(GpufleetError, match=r"gpufleet\.toml: line 2: .*must be >= 0"):
        load_config(config_path=path, environ={})
    path.write_text("[ingest]\nstale_after_minutes = 1.5\n")
    with pytest.raises(GpufleetError, match="a whole number of minutes"):
        load_config(config_path=path, environ={})
    path.write_text("[ingest]\nstale_after = 5\n")
    with pytest.raises(GpufleetError, match=r"unknown key 'ingest\.stale_after'"):
        load_config(config_path=path, environ={})


def test_a_new_data_directory_is_no_error(config: Config, capsys: pytest.CaptureFixture) -> None:
    result = ingest(config)
    assert result.input_problem == "" and not result.failures
    assert f"note: no sample files yet in {config.samples_dir}" in str(result)
    assert main(["--data-dir", str(config.data_dir), "ingest"]) == 0
    (config.samples_dir).mkdir(parents=True)  # an empty folder, nothing ever loaded
    assert main(["--data-dir", str(config.data_dir), "ingest"]) == 0
    assert "gpufleet: error" not in capsys.readouterr().err


def test_old_samples_in_new_files_are_fresh_input(config: Config) -> None:
    """Simulated or backfilled samples are days old; the files arrived now."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    first = ingest(config)
    assert first.samples_loaded == 2 and first.input_problem == ""
    again = ingest(config)  # nothing new, within the hour
    assert again.samples_loaded == 0 and again.input_problem == ""


def test_no_new_file_within_the_limit_fails_after_loading(
    config: Config, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The engine's path (a Prefect harness of other tests in the session would run the flow).
    monkeypatch.setattr("gpufleet.flows.server.prefect_server_configured", lambda: False)
    path = write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    _age(path, 2 * HOUR_S)
    result = ingest(config)
    assert result.samples_loaded == 2 and _samples_in_warehouse(config) == 2  # loaded first
    assert result.input_problem.startswith(
        f"{config.samples_dir}: no new sample file for 120 minutes (newest sample file: "
    )
    assert "stale_after_minutes = 60" in result.input_problem
    assert result.failures == (result.input_problem,)

    assert main(["--data-dir", str(config.data_dir), "ingest"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("ingest: 0 files")  # the summary still printed
    errors = captured.err.strip().splitlines()
    assert errors[-1].startswith(f"gpufleet: error: {config.samples_dir}: no new sample file")
    assert sum(line.startswith("gpufleet: error") for line in errors) == 1

    # A compacted file judged the same (its mtime is when compaction wrote it).
    _age(config.samples_dir, 2 * HOUR_S)
    assert ingest(config).input_problem

    write_samples(config.data_dir, f"{DAY2}/b.parquet", [sample(86_400)])
    assert ingest(config).input_problem == ""  # a new file arrived


def test_zero_turns_the_age_check_off(config: Config) -> None:
    config = Config(data_dir=config.data_dir, ingest=IngestConfig(stale_after_minutes=0))
    _age(write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)]), 48 * HOUR_S)
    assert ingest(config).input_problem == ""
    shutil.rmtree(config.samples_dir)  # a missing location is still an error
    assert "missing" in ingest(config).input_problem


def test_a_missing_location_fails_in_one_line(
    config: Config, capsys: pytest.CaptureFixture
) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    ingest(config)
    moved = config.data_dir / "raw" / "elsewhere"
    config.samples_dir.rename(moved)
    result = ingest(config)
    assert result.input_problem.startswith(
        f"{config.samples_dir}: the raw samples location is missing or not a folder"
    )
    assert "newest sample file: 20" in result.input_problem
    assert main(["--data-dir", str(config.data_dir), "ingest"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and str(config.samples_dir) in errors[0]
    config.samples_dir.write_text("not a folder")
    assert "missing or not a folder" in ingest(config).input_problem
    config.samples_dir.unlink()
    moved.rename(config.samples_dir)
    assert ingest(config).input_problem == ""


def test_an_empty_mount_fails_once_files_were_loaded(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    ingest(config)
    config.samples_dir.rename(config.data_dir / "raw" / "elsewhere")
    config.samples_dir.mkdir()  # the mount point, with nothing mounted on it
    problem = ingest(config).input_problem
    assert problem.startswith(f"{config.samples_dir}: no sample file in the raw samples location")
    assert "1 were loaded from it before" in problem


@pytest.mark.usefixtures("prefect_harness")
def test_the_flows_fail_after_loading_and_building(config: Config) -> None:
    from gpufleet.flows.ingest import ingest_flow
    from gpufleet.flows.ingest_and_build import ingest_and_build

    _age(write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)]), 2 * HOUR_S)
    with pytest.raises(GpufleetError, match="no new sample file for 120 minutes"):
        ingest_flow(data_dir=str(config.data_dir))
    assert _samples_in_warehouse(config) == 1

    _age(write_samples(config.data_dir, f"{DAY2}/b.parquet", [sample(86_400)]), 2 * HOUR_S)
    with pytest.raises(GpufleetError, match="no new sample file for 120 minutes"):
        ingest_and_build(data_dir=str(config.data_dir))
    assert _samples_in_warehouse(config) == 2
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        built = con.execute("select count(*) from build_state.watermark").fetchone()
        assert built == (1,)  # the models were updated before the run failed
