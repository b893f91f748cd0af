"""The collector's loop on the fake NVML: lost GPUs, driver reloads, start-up failures, timing."""

from __future__ import annotations

import io
import math
import os
import signal
import subprocess
import sys
import threading

import pytest

from gpufleet.cli import main
from gpufleet.collectors.collect import Collector
from gpufleet.collectors.service import run_collector
from gpufleet.collectors.spool import read_segment
from gpufleet.collectors.stopflag import StopFlag
from tests.fake_nvml import ManualClock, fleet_scenario, install_fake

WALL_START = 1_795_000_000.0  # 2026-11-18T11:06:40Z


def make_collector(tmp_path, mono, wall, **kwargs):
    kwargs.setdefault("interval_s", 10.0)
    kwargs.setdefault("flush_s", 600.0)
    return Collector(
        data_dir=tmp_path,
        host="node-1",
        wall_clock=wall,
        monotonic=mono,
        stderr=io.StringIO(),
        fsync=False,
        **kwargs,
    )


def tick(collector, mono, wall, seconds=10.0):
    mono.advance(seconds)
    wall.advance(seconds)
    return collector.tick()


@pytest.fixture
def clocks():
    return ManualClock(1000.0), ManualClock(WALL_START)


def test_one_lost_gpu_gives_lost_rows_while_the_others_go_on(monkeypatch, tmp_path, clocks):
    mono, wall = clocks
    fake = install_fake(monkeypatch, fleet_scenario(3), clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    assert [r.status for r in tick(collector, mono, wall)] == ["ok"] * 3

    fake.gpus[1]["lost"] = True
    for _ in range(3):
        rows = tick(collector, mono, wall)
        assert [r.status for r in rows] == ["ok", "lost", "ok"]
        lost = rows[1]
        assert lost.gpu_uuid == fake.gpus[1]["uuid"] and lost.gpu_index == 1
        assert lost.gpu_name == "NVIDIA H100 80GB HBM3"
        assert (lost.gpu_util_pct, lost.power_w, lost.processes) == (None, None, None)
        assert rows[0].power_w == 350.0 and rows[2].power_w == 350.0

    fake.gpus[1]["lost"] = False  # e.g. after a GPU reset
    for _ in range(10):
        rows = tick(collector, mono, wall)
        if rows[1].status == "ok":
            break
    assert [r.status for r in rows] == ["ok"] * 3
    messages = collector._stderr.getvalue()
    assert "GPU 1 (GPU-00000001" in messages and "is lost" in messages
    assert "Traceback" not in messages


def test_a_gpu_that_stays_lost_is_retried_with_backoff(monkeypatch, tmp_path, clocks):
    mono, wall = clocks
    scenario = fleet_scenario(2)
    scenario["gpus"][0]["errors"] = {"nvmlDeviceGetPowerUsage": "ResetRequired"}
    fake = install_fake(monkeypatch, scenario, clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    statuses = [[r.status for r in tick(collector, mono, wall)] for _ in range(60)]
    assert statuses == [["lost", "ok"]] * 60
    # 10 minutes: re-initialised after 10, 20, 40, 80, 160, 300 s... not on every tick.
    assert 3 <= fake.count("nvmlInit") - 1 <= 7
    assert collector._stderr.getvalue().count("is lost") == 1


def test_driver_reload_reinitialises_nvml_and_carries_on(monkeypatch, tmp_path, clocks):
    mono, wall = clocks
    fake = install_fake(monkeypatch, fleet_scenario(2), clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    before = tick(collector, mono, wall)
    assert all(r.energy_mj is not None and r.energy_mj >= 1_000_000 for r in before)

    fake.reload_driver()  # every call now answers Uninitialized; the energy counter restarts
    after = tick(collector, mono, wall)
    assert [r.status for r in after] == ["ok", "ok"]
    assert all(r.energy_mj is not None and r.energy_mj < 1_000_000 for r in after)
    assert fake.count("nvmlInit") == 2
    later = tick(collector, mono, wall)
    assert [r.status for r in later] == ["ok", "ok"]
    assert all(b.energy_mj > a.energy_mj for a, b in zip(after, later, strict=True))
    # Every tick reached the spool, reload or not.
    [segment] = collector.spool.directory.glob("*.jsonl")
    assert len(read_segment(segment)) == 6


def test_gpus_are_keyed_by_uuid_when_the_index_order_changes(monkeypatch, tmp_path, clocks):
    mono, wall = clocks
    fake = install_fake(monkeypatch, fleet_scenario(2), clock_us=mono.us)
    fake.gpus[1]["power_mw"] = 100_000
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    first = {r.gpu_uuid: (r.gpu_index, r.power_w) for r in tick(collector, mono, wall)}
    fake.gpus.reverse()  # a reload enumerates them the other way round
    fake.reload_driver()
    second = {r.gpu_uuid: (r.gpu_index, r.power_w) for r in tick(collector, mono, wall)}
    assert {u: p for u, (_, p) in first.items()} == {u: p for u, (_, p) in second.items()}
    assert {u: i for u, (i, _) in second.items()} == {u: 1 - i for u, (i, _) in first.items()}


def test_nvml_missing_at_start_is_one_line_and_a_non_zero_exit(monkeypatch, tmp_path, capsys):
    install_fake(monkeypatch, fleet_scenario(1, library_missing=True))
    status = run_collector(data_dir=tmp_path, interval_s=1.0, flush_s=10.0, host="node-1")
    err = capsys.readouterr().err
    assert status == 1
    assert err.count("\n") == 1
    assert err.startswith("gpufleet: error: cannot use NVML (NVML Shared Library Not Found)")
    assert "Traceback" not in err


def test_nvml_missing_through_the_command_line(monkeypatch, tmp_path, capsys):
    install_fake(monkeypatch, fleet_scenario(1, library_missing=True))
    assert main(["--data-dir", str(tmp_path), "collect", "--interval", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpufleet: error: ") and err.count("\n") == 1


# `gpufleet collect` with its collector replaced by a report of Arrow's memory pool (the
# stand-in module keeps pyarrow unimported until the command runs, as it is for users).
_POOL_PROBE = """
import sys
import types

from gpufleet.cli import main

def report_pool(**kwargs):
    import pyarrow
    print(pyarrow.default_memory_pool().backend_name)
    return 0

service = types.ModuleType("gpufleet.collectors.service")
service.run_collector = report_pool
sys.modules[service.__name__] = service
assert "pyarrow" not in sys.modules
sys.exit(main(["--data-dir", sys.argv[1], "collect"]))
"""


@pytest.mark.parametrize(("preset", "expected"), [(None, "system"), ("jemalloc", "jemalloc")])
def test_gpufleet_collect_allocates_arrow_buffers_with_malloc(tmp_path, preset, expected):
    # In a fresh process: the pool is chosen when pyarrow is first imported.
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if preset is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = preset
    done = subprocess.run(
        [sys.executable, "-c", _POOL_PROBE, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == [expected]


@pytest.mark.parametrize(
    ("interval_s", "flush_s"), [(0.0, 10.0), (-1.0, 10.0), (math.nan, 10.0), (1.0, 0.0)]
)
def test_constructor_rejects_bad_periods(tmp_path, interval_s, flush_s):
    with pytest.raises(ValueError, match="must be a positive number"):
        Collector(data_dir=tmp_path, interval_s=interval_s, flush_s=flush_s, host="h")


class RecordingCollector(Collector):
    """Ticks only record the clock and take `work_s` of (fake) time."""

    def __init__(self, *, clock, work_s, stop_after, stop, **kwargs):
        super().__init__(monotonic=clock, **kwargs)
        self.clock, self.work_s, self.stop_after, self.stop = clock, work_s, stop_after, stop
        self.ticks: list[float] = []

    def tick(self):
        self.ticks.append(self.clock())
        self.clock.advance(self.work_s.pop(0) if self.work_s else 0.5)
        if len(self.ticks) == self.stop_after:
            self.stop.set()
        return []


class FakeTimeStop(StopFlag):
    def __init__(self, clock):
        super().__init__()
        self.clock = clock

    def wait(self, timeout_s):
        if timeout_s > 0:
            self.clock.advance(timeout_s)


def test_loop_is_drift_free_and_skips_missed_deadlines(tmp_path):
    clock = ManualClock(0.0)
    stop = FakeTimeStop(clock)
    collector = RecordingCollector(
        clock=clock,
        work_s=[3.0, 3.0, 25.0, 1.0],  # the third tick stalls for 2.5 intervals
        stop_after=6,
        stop=stop,
        data_dir=tmp_path,
        interval_s=10.0,
        flush_s=600.0,
        host="h",
    )
    collector.run(stop)
    stop.close()
    # Deadlines stay on the 10 s grid despite the work; after the stall, no burst of ticks.
    assert collector.ticks == [10.0, 20.0, 30.0, 60.0, 70.0, 80.0]


def test_stop_flag_is_set_by_sigterm_and_wakes_the_wait():
    stop = StopFlag()
    with stop.on_signals(signal.SIGTERM):
        timer = threading.Timer(0.1, lambda: signal.raise_signal(signal.SIGTERM))
        timer.start()
        stop.wait(5.0)  # a signal is handled in the main thread, during the wait
        timer.join()
        assert stop.is_set()
    stop.close()


def test_sigterm_during_run_collector_flushes_and_exits_zero(monkeypatch, tmp_path, capsys):
    install_fake(monkeypatch, fleet_scenario(2))
    timer = threading.Timer(0.5, lambda: signal.raise_signal(signal.SIGTERM))
    timer.start()
    status = run_collector(data_dir=tmp_path, interval_s=0.1, flush_s=600.0, host="node-1")
    timer.join()
    assert status == 0
    files = list((tmp_path / "raw" / "samples").rglob("*.parquet"))
    assert len(files) == 1
    assert not list((tmp_path / "raw" / ".spool").rglob("*.jsonl"))
    assert "Traceback" not in capsys.readouterr().err
