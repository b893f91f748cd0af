"""`gpufleet status`: the last file per host, the last ingest and build, the backlog and the
stale hosts, read-only (never the writers' lock); exit status 1 when stale."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli import main
from gpufleet.config import Config
from gpufleet.status import read_status
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import lock_path, writer_lock
from tests.refused_reads import run_gpufleet
from tests.test_ingest import DAY1, DAY2, T0, sample, write_samples

pytestmark = pytest.mark.fleet

HOUR_S = 3600
H2 = DAY1.replace("host=h1", "host=h2")


def _age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


def _status(config: Config, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["--data-dir", str(config.data_dir), "status", "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_new_data_directory(config: Config, capsys: pytest.CaptureFixture[str]) -> None:
    code, status = _status(config, capsys)
    assert code == 0
    assert status["hosts"] == [] and status["last_ingest_ts"] is None
    assert status["note"] == f"no sample files yet in {config.samples_dir}"
    assert status["location_state"] == "missing" and not status["is_stale"]


def test_files_not_ingested_yet_are_the_backlog(
    config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    code, status = _status(config, capsys)
    assert code == 0
    assert status["backlog"] == {"files": 1, "bytes": path.stat().st_size}
    assert [h["host"] for h in status["hosts"]] == ["h1"]


def test_hosts_ingest_build_backlog_and_stale_hosts(
    config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    old = write_samples(
        config.data_dir, f"{H2}/a.parquet", [{**sample(0, gpu="GPU-b"), "host": "h2"}]
    )
    _age(old, 2 * HOUR_S)
    ingest(config)
    build(config)
    later = write_samples(config.data_dir, f"{DAY2}/b.parquet", [sample(86_400)])

    code, status = _status(config, capsys)
    assert code == 1  # h2 is stale
    assert status["stale_hosts"] == ["h2"]
    assert [(h["host"], h["cluster"], h["is_stale"]) for h in status["hosts"]] == [
        ("h2", None, True),
        ("h1", None, False),
    ]
    assert status["hosts"][0]["last_file_ts"] < status["hosts"][1]["last_file_ts"]
    assert status["backlog"] == {"files": 1, "bytes": later.stat().st_size}
    assert status["last_ingest_ts"] is not None and status["last_build_ts"] is not None
    assert status["problem"] is None  # h1's files are fresh: the input as a whole is not stale
    assert status["stale_after_minutes"] == 60

    assert main(["--data-dir", str(config.data_dir), "status"]) == 1
    text = capsys.readouterr().out
    assert "last ingest: 20" in text and "last build:  20" in text
    assert "backlog:     1 files" in text
    assert "hosts: 2, 1 stale (no file for 60 minutes)" in text
    lines = text.splitlines()
    h2 = next(line for line in lines if line.strip().startswith("h2"))
    assert h2.split()[1] == "-" and h2.endswith("stale")


def test_the_whole_input_stale_and_the_check_off(
    config: Config, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _age(write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)]), 3 * HOUR_S)
    ingest(config)
    code, status = _status(config, capsys)
    assert code == 1 and status["is_stale"]
    assert status["problem"].startswith(f"{config.samples_dir}: no new sample file for 180")
    off = tmp_path / "off.toml"
    off.write_text("[ingest]\nstale_after_minutes = 0\n")
    assert main(["--data-dir", str(config.data_dir), "--config", str(off), "status"]) == 0
    assert "0 stale (check off)" in capsys.readouterr().out


def test_a_retired_host_is_listed_but_not_stale(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    _age(write_samples(config.data_dir, f"{H2}/a.parquet", [sample(0, gpu="GPU-b")]), 8 * 86_400)
    status = read_status(config)
    assert [(h.host, h.is_stale, h.is_retired) for h in status.hosts] == [
        ("h1", False, False),
        ("h2", False, True),
    ]
    assert not status.is_stale


def test_a_missing_location_after_loading_is_stale(
    config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    ingest(config)
    config.samples_dir.rename(config.data_dir / "raw" / "elsewhere")
    code, status = _status(config, capsys)
    assert code == 1 and status["location_state"] == "missing"
    assert "missing or not a folder" in status["problem"]
    assert [h["host"] for h in status["hosts"]] == ["h1"]  # from what the warehouse loaded


def test_folders_that_cannot_be_read_are_named_with_why(config: Config, tmp_path: Path) -> None:
    """A refused folder is named, not skipped, and `raw/samples` refused reads "permission
    denied", not "(empty)" (#56); the command runs where the mode bars it, root or not."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    ingest(config)
    write_samples(config.data_dir, f"{DAY2}/b.parquet", [sample(0)])
    args = ("--data-dir", str(config.data_dir), "status")
    (config.data_dir / DAY2).chmod(0)
    try:
        folder = run_gpufleet(tmp_path, *args)
    finally:
        (config.data_dir / DAY2).chmod(0o755)
    config.samples_dir.chmod(0)
    try:
        location = run_gpufleet(tmp_path, *args, "--json")
    finally:
        config.samples_dir.chmod(0o755)

    assert folder.returncode == 1, folder.stderr
    lines = folder.stdout.splitlines()
    assert lines[0] == f"raw samples: {config.samples_dir} (ok), files loaded: 1"
    assert (
        f"unreadable: {DAY2}: cannot be read (permission denied): the sample files below it "
        "are not loaded"
    ) in lines
    assert lines[-1] == (
        f"stale: {config.samples_dir}: 1 folder or file below it cannot be read, so the "
        f"sample files there are not loaded: {DAY2} (permission denied)"
    )
    assert location.returncode == 1, location.stderr
    status = json.loads(location.stdout)
    assert status["location_state"] == "unreadable"
    assert status["problem"].startswith(
        f"{config.samples_dir}: the raw samples location cannot be read (permission denied)"
    )
    assert status["unreadable"] == [
        {"path": "raw/samples", "reason": "permission denied", "is_folder": True}
    ]
    assert [h["host"] for h in status["hosts"]] == ["h1"]  # from what the warehouse loaded


def test_status_answers_while_a_writer_holds_the_lock(
    config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    ingest(config)
    started = time.monotonic()
    with writer_lock(lock_path(config), 1.0):
        code, status = _status(config, capsys)
    assert code == 0 and status["files_loaded"] == 1
    assert time.monotonic() - started < 30  # never waited for the lock


def test_the_last_sample_is_the_newest_samples_time_not_the_files(
    config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files written days after their samples (a backfill, a copy): `last sample` is the
    samples' time, loaded (loaded_files' max_ts) or not yet (the file's own statistics)."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(600)])
    ingest(config)
    code, status = _status(config, capsys)
    [h1] = status["hosts"]
    assert h1["last_sample_ts"] == (T0 + dt.timedelta(seconds=600)).isoformat()
    assert h1["last_file_ts"] > h1["last_sample_ts"]
    write_samples(config.data_dir, f"{DAY2}/b.parquet", [sample(86_400 + 30)])
    code, status = _status(config, capsys)
    [h1] = status["hosts"]
    assert h1["last_sample_ts"] == (T0 + dt.timedelta(seconds=86_430)).isoformat()
    assert main(["--data-dir", str(config.data_dir), "status"]) == code
    text = capsys.readouterr().out
    assert "last sample                last file arrived" in text
    assert f"  {(T0 + dt.timedelta(seconds=86_430)).isoformat()}  " in text


def test_slurm_nodes_with_allocations_but_no_samples_are_listed(
    config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(s) for s in range(0, 600, 10)])
    allocations = config.allocations_dir / "slurm.csv"
    allocations.parent.mkdir(parents=True)
    start, end = T0.isoformat(), (T0 + dt.timedelta(hours=3)).isoformat()
    allocations.write_text(
        "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
        f"7,alice,vision,gpu09,0,{start},{end}\n"
        f"7,alice,vision,gpu09,1,{start},{end}\n"
        f"8,alice,vision,h1,0,{start},{end}\n"
    )
    ingest(config)
    build(config)
    _, status = _status(config, capsys)
    assert status["allocated_only"] == [
        {
            "host": "gpu09",
            "cluster": None,
            "last_day": T0.date().isoformat(),
            "alloc_gpu_hours": 6.0,
        }
    ]
    main(["--data-dir", str(config.data_dir), "status"])
    text = capsys.readouterr().out
    assert "Slurm nodes with allocations but no samples (last 7 days): 1" in text
    assert "  gpu09: 6.0 GPU-hours allocated, not measured, last on 2026-11-16" in text
