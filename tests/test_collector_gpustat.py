"""`gpufleet collect --slurm-gpustat DIR`: the Slurm job holding each GPU, from jobstats' prolog
files, in `alloc_job_id`/`alloc_user` (docs/collector.md#which-slurm-job-holds-a-gpu)."""

from __future__ import annotations

import io
import os
import pwd
import signal
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from gpufleet.cli import main
from gpufleet.collectors.collect import Collector
from gpufleet.collectors.gpustat import GpustatDir, Holder
from tests.fake_nvml import ManualClock, fleet_scenario, install_fake

WALL_START = 1_795_000_000.0  # 2026-11-18T11:06:40Z
ME = os.getuid()
MY_NAME = pwd.getpwuid(ME).pw_name


def unknown_uid() -> int:
    for uid in range(987_650, 987_700):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    pytest.skip("no uid without a passwd entry found")


@pytest.fixture
def clocks() -> tuple[ManualClock, ManualClock]:
    return ManualClock(1000.0), ManualClock(WALL_START)


def make_collector(tmp_path: Path, clocks: Any, gpustat: Path | None) -> Collector:
    mono, wall = clocks
    return Collector(
        data_dir=tmp_path / "data",
        interval_s=10.0,
        flush_s=600.0,
        host="node-1",
        wall_clock=wall,
        monotonic=mono,
        stderr=io.StringIO(),
        fsync=False,
        slurm_gpustat=gpustat,
    )


def tick(collector: Collector, clocks: Any) -> list[tuple[str | None, str | None]]:
    for clock in clocks:
        clock.advance(10.0)
    return [(row.alloc_job_id, row.alloc_user) for row in collector.tick()]


def log(collector: Collector) -> str:
    stream = collector._stderr
    assert isinstance(stream, io.StringIO)
    return stream.getvalue()


def written_rows(collector: Collector) -> list[dict[str, Any]]:
    assert collector.flush()
    files = sorted(collector.samples_root.rglob("*.parquet"))
    rows = [row for f in files for row in pq.read_table(f).to_pylist()]
    return sorted(rows, key=lambda r: (r["ts"], r["gpu_index"]))


def test_rows_carry_the_job_holding_each_gpu(monkeypatch, tmp_path, clocks):
    install_fake(monkeypatch, fleet_scenario(4), clock_us=clocks[0].us)
    stranger = unknown_uid()
    gpustat = tmp_path / "gpustat"
    gpustat.mkdir()
    (gpustat / "0").write_text(f"4242 {ME}\n")
    (gpustat / "2").write_text(f"4243  {stranger}")  # no newline, two spaces
    (gpustat / "3").write_text("4244\n")  # half-written: no uid
    (gpustat / "README").write_text("not a GPU's file")
    (gpustat / ".1.tmp").write_text(f"4245 {ME}\n")  # a prolog's temporary file
    collector = make_collector(tmp_path, clocks, gpustat)
    collector.start()
    expected = [("4242", MY_NAME), (None, None), ("4243", str(stranger)), (None, None)]
    for _ in range(3):
        assert tick(collector, clocks) == expected

    rows = written_rows(collector)
    assert len(rows) == 12
    assert [(r["alloc_job_id"], r["alloc_user"]) for r in rows] == expected * 3
    messages = log(collector)
    said = [line for line in messages.splitlines() if "gpustat" in line]
    assert len(said) == 1  # the bad file, said once in three ticks
    assert f"{gpustat / '3'} does not hold '<job id> <uid>'" in messages
    assert "README" not in messages and "Traceback" not in messages


def test_files_appearing_and_disappearing_between_ticks(monkeypatch, tmp_path, clocks):
    install_fake(monkeypatch, fleet_scenario(2), clock_us=clocks[0].us)
    gpustat = tmp_path / "gpustat"
    gpustat.mkdir()
    collector = make_collector(tmp_path, clocks, gpustat)
    collector.start()
    assert tick(collector, clocks) == [(None, None)] * 2
    (gpustat / "1").write_text(f"77 {ME}\n")  # the prolog of job 77
    assert tick(collector, clocks) == [(None, None), ("77", MY_NAME)]
    (gpustat / "1").write_text(f"78 {ME}\n")  # the next job on the same GPU
    (gpustat / "0").write_text(f"79 {ME}\n")
    assert tick(collector, clocks) == [("79", MY_NAME), ("78", MY_NAME)]
    (gpustat / "1").unlink()  # its epilog
    assert tick(collector, clocks) == [("79", MY_NAME), (None, None)]
    rows = written_rows(collector)
    assert [r["alloc_job_id"] for r in rows] == [None, None, None, "77", "79", "78", "79", None]
    assert "gpustat" not in log(collector)


def test_a_missing_directory_is_said_once_and_read_when_it_appears(monkeypatch, tmp_path, clocks):
    install_fake(monkeypatch, fleet_scenario(1), clock_us=clocks[0].us)
    gpustat = tmp_path / "gpustat"  # not created yet: no job has run since the boot
    collector = make_collector(tmp_path, clocks, gpustat)
    collector.start()
    for _ in range(3):
        assert tick(collector, clocks) == [(None, None)]
    assert log(collector).count(f"{gpustat} does not exist (yet)") == 1
    gpustat.mkdir()
    (gpustat / "0").write_text(f"5 {ME}\n")
    assert tick(collector, clocks) == [("5", MY_NAME)]
    assert log(collector).count("again") == 1
    assert len(written_rows(collector)) == 4
    assert "Traceback" not in log(collector)


def test_a_file_that_turns_bad_and_good_again(monkeypatch, tmp_path, clocks):
    install_fake(monkeypatch, fleet_scenario(1), clock_us=clocks[0].us)
    gpustat = tmp_path / "gpustat"
    gpustat.mkdir()
    collector = make_collector(tmp_path, clocks, gpustat)
    collector.start()
    (gpustat / "0").write_text("")  # empty: the prolog is writing it
    assert tick(collector, clocks) == [(None, None)]
    (gpustat / "0").write_text(f"9 {ME}\n")
    assert tick(collector, clocks) == [("9", MY_NAME)]
    (gpustat / "0").write_text("nine me\n")
    assert tick(collector, clocks) == [(None, None)]
    assert log(collector).count("gpustat file") == 1  # once per file name


def test_without_the_option_nothing_is_read_and_both_columns_are_null(
    monkeypatch, tmp_path, clocks
):
    install_fake(monkeypatch, mig_scenario(), clock_us=clocks[0].us)

    def no_gpustat(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the gpustat directory is read without --slurm-gpustat")

    monkeypatch.setattr(GpustatDir, "__init__", no_gpustat)
    collector = make_collector(tmp_path, clocks, None)
    collector.start()
    # the MIG-enabled GPU, its two MIG devices, the whole GPU
    assert tick(collector, clocks) == [(None, None)] * 4
    rows = written_rows(collector)
    assert [(r["alloc_job_id"], r["alloc_user"]) for r in rows] == [(None, None)] * 4


def mig_uuid(slot: int) -> str:
    return f"MIG-0000000{slot}-fake-4000-8000-000000000000"


def mig_scenario() -> dict[str, Any]:
    """GPU 0: MIG-enabled, three slots (slot 1 empty); GPU 1: a whole GPU."""
    scenario = fleet_scenario(2)
    scenario["gpus"][0].update(
        mig_mode=[1, 1],
        errors={"nvmlDeviceGetSamples": "NotSupported"},
        mig_devices=[
            {"uuid": mig_uuid(0), "memory": {"total": 40, "used": 10}},
            None,
            {"uuid": mig_uuid(2), "memory": {"total": 20, "used": 5}},
        ],
    )
    return scenario


def test_a_mig_gpu_gets_the_job_of_its_first_mig_device_with_a_file(monkeypatch, tmp_path, clocks):
    install_fake(monkeypatch, mig_scenario(), clock_us=clocks[0].us)
    gpustat = tmp_path / "gpustat"
    gpustat.mkdir()
    (gpustat / "1").write_text(f"30 {ME}\n")
    collector = make_collector(tmp_path, clocks, gpustat)
    collector.start()
    # Rows: the MIG-enabled GPU, its MIG devices in slot order (0, 2), the whole GPU 1.
    free = (None, None)
    assert tick(collector, clocks) == [free, free, free, ("30", MY_NAME)]

    (gpustat / mig_uuid(2)).write_text(f"31 {ME}\n")  # a job on the second MIG device
    job_31 = ("31", MY_NAME)
    assert tick(collector, clocks) == [job_31, free, job_31, ("30", MY_NAME)]
    (gpustat / mig_uuid(0)).write_text(f"32 {ME}\n")  # two jobs: the first device's wins
    job_32 = ("32", MY_NAME)
    assert tick(collector, clocks) == [job_32, job_32, job_31, ("30", MY_NAME)]
    for name in (mig_uuid(0), mig_uuid(2)):
        (gpustat / name).unlink()
    (gpustat / "0").write_text(f"33 {ME}\n")  # a prolog that writes the GPU's index
    # the GPU's row takes it; a MIG device's row only ever its own file's job
    assert tick(collector, clocks) == [("33", MY_NAME), free, free, ("30", MY_NAME)]

    rows = [r for r in written_rows(collector) if r["parent_gpu_uuid"] is None]
    assert [r["mig_enabled"] for r in rows[:2]] == [True, False]
    assert [r["alloc_job_id"] for r in rows] == [None, "30", "31", "30", "32", "30", "33", "30"]
    by_device = {
        uuid: [r["alloc_job_id"] for r in written_rows(collector) if r["gpu_uuid"] == uuid]
        for uuid in (mig_uuid(0), mig_uuid(2))
    }
    assert by_device == {
        mig_uuid(0): [None, None, "32", None],
        mig_uuid(2): [None, "31", "31", None],
    }
    assert "Traceback" not in log(collector)


def test_a_lost_gpu_keeps_the_job_that_holds_it(monkeypatch, tmp_path, clocks):
    fake = install_fake(monkeypatch, fleet_scenario(2), clock_us=clocks[0].us)
    gpustat = tmp_path / "gpustat"
    gpustat.mkdir()
    (gpustat / "1").write_text(f"40 {ME}\n")
    collector = make_collector(tmp_path, clocks, gpustat)
    collector.start()
    fake.gpus[1]["lost"] = True
    rows = collector.tick()
    assert [r.status for r in rows] == ["ok", "lost"]
    assert (rows[1].alloc_job_id, rows[1].alloc_user) == ("40", MY_NAME)


@pytest.mark.parametrize(
    ("content", "holder"),
    [
        (b"4242 0\n", Holder("4242", pwd.getpwuid(0).pw_name)),
        (b"  4242\t0  \n\n", Holder("4242", pwd.getpwuid(0).pw_name)),
        (b"4242_7 0\n", Holder("4242_7", pwd.getpwuid(0).pw_name)),
        (b"4242+1 0", Holder("4242+1", pwd.getpwuid(0).pw_name)),
        (b"", None),
        (b"\n", None),
        (b"4242", None),
        (b"4242 ", None),
        (b"job 0\n", None),
        (b"4242 root\n", None),
        (b"4242 -1\n", None),
        (b"4242 0 extra\n", None),
        (b"4242 0\n" + b" " * 300, None),
        (b"\xff\xfe 0\n", None),
        (b"4242 99999999999999999999999\n", Holder("4242", "99999999999999999999999")),
    ],
)
def test_file_contents(tmp_path, content, holder):
    (tmp_path / "0").write_bytes(content)
    said: list[tuple[str, str]] = []
    reader = GpustatDir(tmp_path, say=lambda level, message: said.append((level, message)))
    reader.refresh()
    assert reader.holder(0) == holder
    assert len(said) == (0 if holder else 1)
    assert reader.holder(1) is None


def test_unreadable_entries_and_directories(tmp_path):
    said: list[str] = []
    (tmp_path / "0").mkdir()  # a directory where a file should be: cannot be read
    (tmp_path / "1").symlink_to(tmp_path / "nowhere")  # removed between listing and read
    reader = GpustatDir(tmp_path, say=lambda level, message: said.append(message))
    for _ in range(3):
        reader.refresh()
        assert (reader.holder(0), reader.holder(1)) == (None, None)
    assert len(said) == 1 and "/0 cannot be read" in said[0]

    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    reader = GpustatDir(not_a_directory, say=lambda level, message: said.append(message))
    reader.refresh()
    reader.refresh()
    assert len(said) == 2 and "cannot be read" in said[1]


def test_the_user_name_of_a_uid_is_looked_up_once(monkeypatch, tmp_path):
    calls: list[int] = []
    real = pwd.getpwuid

    def getpwuid(uid: int) -> Any:
        calls.append(uid)
        return real(uid)

    monkeypatch.setattr("gpufleet.collectors.gpustat.pwd.getpwuid", getpwuid)
    (tmp_path / "0").write_text(f"1 {ME}\n")
    (tmp_path / "1").write_text(f"2 {ME}\n")
    reader = GpustatDir(tmp_path, say=lambda level, message: None)
    for _ in range(3):
        reader.refresh()
    assert calls == [ME]


def test_the_command_line_option(monkeypatch, tmp_path, capsys):
    install_fake(monkeypatch, fleet_scenario(2))
    gpustat = tmp_path / "gpustat"
    gpustat.mkdir()
    (gpustat / "1").write_text(f"50 {ME}\n")
    timer = threading.Timer(0.5, lambda: signal.raise_signal(signal.SIGTERM))
    timer.start()
    argv = ["--data-dir", str(tmp_path / "data"), "collect", "--interval", "0.1"]
    status = main([*argv, "--host", "node-1", "--slurm-gpustat", str(gpustat)])
    timer.join()
    assert status == 0
    [file] = (tmp_path / "data" / "raw" / "samples").rglob("*.parquet")
    rows = pq.read_table(file).to_pylist()
    assert rows and {(r["gpu_index"], r["alloc_job_id"], r["alloc_user"]) for r in rows} == {
        (0, None, None),
        (1, "50", MY_NAME),
    }
    err = capsys.readouterr().err
    assert f"Slurm jobs from {gpustat}" in err and "Traceback" not in err
