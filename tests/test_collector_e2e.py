"""`gpufleet collect` as a real process on the fake NVML: SIGKILL, restart, SIGTERM."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpufleet.collectors.schema import COLLECTOR_SCHEMA, SAMPLE_SCHEMA
from tests.fake_nvml import fleet_scenario

REPO = Path(__file__).resolve().parents[1]
INTERVAL_S = 0.25


def start_collector(scenario: Path, data_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fake_nvml_run",
            str(scenario),
            "--",
            "--data-dir",
            str(data_dir),
            "collect",
            "--interval",
            str(INTERVAL_S),
            "--host",
            "e2e-host",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def spooled_ticks(data_dir: Path) -> list[list[dict]]:
    """The complete ticks in the spool right now."""
    ticks = []
    for segment in sorted((data_dir / "raw" / ".spool").rglob("*.jsonl")):
        for line in segment.read_bytes().splitlines(keepends=True):
            if line.endswith(b"\n"):
                ticks.append(json.loads(line))
    return ticks


def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def read_all(data_dir: Path) -> list[dict]:
    files = sorted((data_dir / "raw" / "samples").rglob("*"))
    assert all(not f.name.startswith(".") for f in files)  # no temporary file left visible
    rows = []
    for path in (f for f in files if f.is_file()):
        assert path.suffix == ".parquet"
        table = pq.read_table(path)
        assert table.schema.names[: len(SAMPLE_SCHEMA)] == SAMPLE_SCHEMA.names
        assert [f.type for f in table.schema] == [f.type for f in COLLECTOR_SCHEMA]
        assert table.schema.metadata[b"gpufleet.schema_version"] == b"1"
        file_rows = table.to_pylist()
        keys = [(r["gpu_uuid"], r["ts"]) for r in file_rows]
        assert keys == sorted(keys)
        rows.extend(file_rows)
    return rows


def us(ts: dt.datetime) -> int:
    return round(ts.timestamp() * 1_000_000)


@pytest.mark.slow
def test_sigkill_loses_at_most_the_tick_in_progress_and_sigterm_flushes(tmp_path):
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(fleet_scenario(2)))
    data_dir = tmp_path / "data"

    first = start_collector(scenario, data_dir)
    wait_for(lambda: len(spooled_ticks(data_dir)) >= 5)
    seen_before_kill = spooled_ticks(data_dir)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    killed_at_us = time.time_ns() // 1000
    recovered = spooled_ticks(data_dir)
    assert len(recovered) >= len(seen_before_kill)

    second = start_collector(scenario, data_dir)
    wait_for(lambda: any((data_dir / "raw" / "samples").rglob("*.parquet")))  # leftover first

    def new_ticks() -> list[list[dict]]:
        return [tick for tick in spooled_ticks(data_dir) if tick[0]["ts"] > killed_at_us]

    wait_for(lambda: len(new_ticks()) >= 5)
    seen_before_term = new_ticks()
    second.send_signal(signal.SIGTERM)
    _, stderr = second.communicate(timeout=20)
    assert second.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "collecting 2 GPU(s) on e2e-host" in stderr

    assert not list((data_dir / "raw" / ".spool").rglob("*.jsonl"))  # everything flushed
    rows = read_all(data_dir)
    assert {r["status"] for r in rows} == {"ok"}
    ticks = sorted({us(r["ts"]) for r in rows})
    assert len(rows) == 2 * len(ticks)  # both GPUs on every tick

    first_run = [t for t in ticks if t <= killed_at_us]
    second_run = [t for t in ticks if t > killed_at_us]
    # Every tick spooled before the kill survived it, in order and without gaps...
    assert first_run == [tick[0]["ts"] for tick in recovered]
    assert all(b - a < 2.5 * INTERVAL_S * 1e6 for a, b in itertools.pairwise(first_run))
    # ...and only the tick in progress can be missing at the end.
    assert killed_at_us - first_run[-1] < 2 * INTERVAL_S * 1e6 + 500_000
    # SIGTERM wrote every tick of the second run, the last ones included.
    assert set(tick[0]["ts"] for tick in seen_before_term) <= set(second_run)
    assert len(second_run) >= len(seen_before_term)


@pytest.mark.slow
def test_sigint_flushes_and_exits_zero(tmp_path):
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(fleet_scenario(1)))
    data_dir = tmp_path / "data"
    process = start_collector(scenario, data_dir)
    wait_for(lambda: len(spooled_ticks(data_dir)) >= 2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "interrupted" not in stderr
    assert len(read_all(data_dir)) >= 2
    assert not list((data_dir / "raw" / ".spool").rglob("*.jsonl"))


@pytest.mark.slow
def test_missing_nvml_in_a_real_process_is_one_line(tmp_path):
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps(fleet_scenario(1, library_missing=True)))
    process = start_collector(scenario, tmp_path / "data")
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 1
    assert stderr.startswith("gpufleet: error: cannot use NVML") and stderr.count("\n") == 1
