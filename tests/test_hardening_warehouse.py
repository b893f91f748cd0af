"""What an adversarial run and a careless operator found in the warehouse, each reproduced:
a touched lake file, two ingests at once, a full disk, a linked host folder, hostile names.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet import cli
from gpufleet.cli import main
from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.notices.idle import DRY_RUN, NoticeRun
from gpufleet.notices.plan import USER, Notice, NoticePlan
from gpufleet.simulate.fleet import (
    SimulationSpec,
    scenario_for,
    simulate_window,
    write_reference_files,
)
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import IngestResult, ingest
from gpufleet.warehouse.publish import (
    connect_read_only,
    lock_path,
    slot_files,
    write_transaction,
    writer_lock,
)
from tests.templates import made_once
from tests.test_ingest import DAY1 as INGEST_DAY
from tests.test_ingest import sample, write_samples

pytestmark = pytest.mark.fleet

DAY1 = dt.datetime(2026, 11, 16, tzinfo=dt.UTC)
DAY2 = DAY1 + dt.timedelta(days=1)
# samples every 30 s, not 10: a third of the rows to load and build
SPEC = SimulationSpec(gpus=8, start=DAY1, end=DAY2 + dt.timedelta(days=1), interval_s=30.0, seed=5)
_SCENARIO = scenario_for(SPEC)


def _rows(config: Config, sql: str) -> list[tuple[Any, ...]]:
    with connect_read_only(config) as con:
        return con.execute(sql).fetchall()


def _arrive(config: Config, start: dt.datetime, end: dt.datetime, today: dt.datetime) -> None:
    simulate_window(SPEC, data_dir=config.data_dir, start=start, end=end, scenario=_SCENARIO)
    ingest(config, today=today.date())


def _compacted(config: Config, day: dt.datetime) -> Path:
    (path,) = config.samples_dir.glob(f"date={day.date()}/host=*/compacted-*.parquet")
    return path


def _touch(path: Path) -> None:
    """What a backup tool, `rsync -t` or a restore does: another mtime, the same bytes."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 3_600 * 10**9))


def _quiet_ingest(config: Config, today: dt.datetime) -> IngestResult:
    result = ingest(config, today=today.date())
    assert result.quarantined == ()
    assert not config.quarantine_dir.exists()
    return result


def _edit_power(path: Path) -> None:
    """Change one sample's power, as an edit by hand would."""
    table = pq.read_table(path)
    index = table.schema.get_field_index("power_w")
    power = table.column(index).to_pylist()
    power[3] = (power[3] or 0.0) + 1.0
    field = table.schema.field(index)
    pq.write_table(table.set_column(index, field, pa.array(power, field.type)), path)


def _simulated(data_dir: Path) -> Path:
    """`data_dir` with the reference files and the sample files of day 1 and the first hour
    of day 2, nothing ingested: simulated once per test process and copied."""

    def fill(folder: Path) -> None:
        write_reference_files(_SCENARIO, SPEC, folder)
        end = DAY2 + dt.timedelta(hours=1)
        simulate_window(SPEC, data_dir=folder, start=DAY1, end=end, scenario=_SCENARIO)

    return made_once("test_hardening_warehouse.simulated", fill, data_dir)


def _first_hour(data_dir: Path) -> Config:
    """`data_dir` with the reference files and day 1's first hour ingested on day 1 (not
    compacted): made once per test process and copied."""

    def fill(folder: Path) -> None:
        write_reference_files(_SCENARIO, SPEC, folder)
        _arrive(Config(data_dir=folder), DAY1, DAY1 + dt.timedelta(hours=1), today=DAY1)

    return Config(data_dir=made_once("test_hardening_warehouse.first_hour", fill, data_dir))


@pytest.fixture
def lake(tmp_path: Path) -> Config:
    """Day 1 backfilled (its compacted file written straight into the lake), the start of
    day 2 loaded and built: made once per test process and copied (tests/templates.py)."""

    def fill(data_dir: Path) -> None:
        config = Config(data_dir=_simulated(data_dir))
        ingest(config, today=DAY2.date())
        build(config)

    return Config(data_dir=made_once("test_hardening_warehouse.lake", fill, tmp_path / "data"))


# --- 1. a lake file is judged by its content, never quarantined --------------------------


def test_a_touched_lake_file_stays_in_the_lake_and_samples_still_read(lake: Config) -> None:
    lake_file = _compacted(lake, DAY1)
    relative = lake_file.relative_to(lake.data_dir).as_posix()
    assert _rows(lake, f"select count(*) from build_state.lake_files where path = '{relative}'")
    samples = _rows(lake, "select count(*), sum(energy_mj) from samples")
    _touch(lake_file)

    result = _quiet_ingest(lake, today=DAY2)

    assert result.warnings == () and lake_file.is_file()
    assert _rows(lake, "select count(*), sum(energy_mj) from samples") == samples
    recorded = _rows(lake, f"select mtime_ns from loaded_files where path = '{relative}'")
    assert recorded == [(lake_file.stat().st_mtime_ns,)]
    assert build(lake, full=True).mode == "full"
    _quiet_ingest(lake, today=DAY2)  # and the next ingest has nothing to say either
    assert _rows(lake, "select count(*) from quarantined_files") == [(0,)]


def test_a_lake_file_put_back_from_a_copy_is_taken_back(lake: Config, tmp_path: Path) -> None:
    lake_file = _compacted(lake, DAY1)
    backup = tmp_path / "backup.parquet"
    shutil.copy(lake_file, backup)
    lake_file.unlink()
    shutil.copy(backup, lake_file)  # a new mtime

    _quiet_ingest(lake, today=DAY2)

    assert build(lake, full=True).mode == "full"
    day1 = _rows(lake, f"select count(*) from samples where ts < '{DAY2.isoformat()}'")
    assert day1 == [(pq.read_metadata(backup).num_rows,)]


def test_an_edited_lake_file_is_named_on_every_ingest_and_never_moved(
    lake: Config, tmp_path: Path
) -> None:
    lake_file = _compacted(lake, DAY1)
    relative = lake_file.relative_to(lake.data_dir).as_posix()
    original = tmp_path / "original.parquet"
    shutil.copy(lake_file, original)
    _edit_power(lake_file)

    for _ in range(2):
        result = _quiet_ingest(lake, today=DAY2)
        (warning,) = result.warnings
        assert warning.startswith(f"{relative}: this compacted file changed after it was loaded")
        assert "Put it back from a backup" in warning and f"warning: {warning}" in str(result)
        assert lake_file.is_file()

    shutil.copy(original, lake_file)  # put back: the same bytes, a new mtime
    assert _quiet_ingest(lake, today=DAY2).warnings == ()
    assert build(lake, full=True).mode == "full"


def test_an_edited_compacted_file_not_in_the_lake_yet_is_written_again(tmp_path: Path) -> None:
    """Day 1 arrives in two ingests, so it is compacted from its files and its samples stay
    in the warehouse until a build: an edit of its file is undone from them."""
    config = _first_hour(tmp_path / "data")
    _arrive(config, DAY1 + dt.timedelta(hours=1), DAY1 + dt.timedelta(hours=2), today=DAY2)
    compacted = _compacted(config, DAY1)
    relative = compacted.relative_to(config.data_dir).as_posix()
    assert _rows(config, "select count(*) from build_state.lake_files") == [(0,)]
    expected = pq.read_table(compacted)
    _edit_power(compacted)

    result = _quiet_ingest(config, today=DAY2)

    (warning,) = result.warnings
    assert warning.startswith(f"{relative}: this compacted file changed after it was loaded")
    assert f"written again from the warehouse's {expected.num_rows:,} samples" in warning
    assert pq.read_table(compacted).equals(expected.cast(pq.read_schema(compacted)))
    assert build(config).evicted == expected.num_rows  # the file holds the warehouse's rows
    _touch(compacted)
    assert _quiet_ingest(config, today=DAY2).warnings == ()


def test_a_touched_collector_file_is_not_changed(tmp_path: Path) -> None:
    config = _first_hour(tmp_path / "data")
    files = sorted(config.samples_dir.glob("date=*/host=*/*.parquet"))
    _touch(files[0])
    relative = files[0].relative_to(config.data_dir).as_posix()

    _quiet_ingest(config, today=DAY1)

    recorded = _rows(config, f"select mtime_ns from loaded_files where path = '{relative}'")
    assert recorded == [(files[0].stat().st_mtime_ns,)]
    # the same size but other bytes is a change: quarantined, as before
    files[1].write_bytes(b"x" * files[1].stat().st_size)
    with pytest.warns(UserWarning, match="changed after load"):
        changed = ingest(config, today=DAY1.date())
    assert [item.path for item in changed.quarantined] == [
        files[1].relative_to(config.data_dir).as_posix()
    ]


# --- 3. two ingests at once ------------------------------------------------------------

_INGEST = (
    "import datetime as dt, sys\n"
    "from pathlib import Path\n"
    "from gpufleet.config import Config\n"
    "from gpufleet.warehouse.ingest import ingest\n"
    "today = dt.date.fromisoformat(sys.argv[2])\n"
    "result = ingest(Config(data_dir=Path(sys.argv[1])), today=today)\n"
    "print(result.files_loaded, len(result.quarantined))\n"
)


def _holds_open(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open (it is then waiting for, or holds, the lock)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


@pytest.mark.slow  # starts processes
def test_two_ingests_at_once_quarantine_nothing(config: Config) -> None:
    """Both list the files, then wait for the writer lock: the second to get it finds the
    day compacted by the first, and loads nothing twice and quarantines nothing."""
    _simulated(config.data_dir)
    files = sorted(config.samples_dir.glob("date=*/host=*/*.parquet"))
    samples = sum(pq.read_metadata(path).num_rows for path in files)
    lock = lock_path(config).absolute()
    with writer_lock(lock, 10):
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", _INGEST, str(config.data_dir), str(DAY2.date())],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        deadline = time.monotonic() + 120
        while not all(_holds_open(run.pid, lock) for run in runs):
            assert time.monotonic() < deadline and all(run.poll() is None for run in runs)
            time.sleep(0.05)
    outputs = [run.communicate(timeout=300) for run in runs]

    assert [run.returncode for run in runs] == [0, 0], outputs
    loaded = sorted(tuple(map(int, out.split())) for out, _ in outputs)
    assert loaded == [(0, 0), (len(files), 0)], outputs
    assert not any("quarantine" in err for _, err in outputs), outputs
    assert not config.quarantine_dir.exists()
    assert _rows(config, "select count(*) from quarantined_files") == [(0,)]
    assert _rows(config, "select count(*) from samples") == [(samples,)]


# --- 8. a full disk is one line, and changes nothing -----------------------------------


def _no_space(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _published(config: Config) -> tuple[int, bytes]:
    return config.warehouse_path.stat().st_ino, config.warehouse_path.read_bytes()


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert "Traceback" not in captured.out + captured.err
    return line


@pytest.mark.parametrize("command", ["ingest", "build"])
def test_a_full_disk_at_the_slot_copy_is_one_line_and_changes_nothing(
    config: Config,
    command: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_samples(config.data_dir, f"{INGEST_DAY}/a.parquet", [sample(0)])
    ingest(config, compact=False)  # the first write creates the warehouse: the next copies it
    write_samples(config.data_dir, f"{INGEST_DAY}/b.parquet", [sample(10)])
    before = _published(config)
    monkeypatch.setattr(slot_files.fcntl, "ioctl", _no_space)  # no clone: a copy, written
    monkeypatch.setattr(slot_files.shutil, "copyfileobj", _no_space)
    # the engine, as for a user without a Prefect server: a session whose earlier tests
    # started Prefect's test server would run the command as a flow, which logs to stderr
    monkeypatch.setattr("gpufleet.flows.server.prefect_server_configured", lambda: False)
    capsys.readouterr()

    assert main(["--data-dir", str(config.data_dir), command]) == 1

    line = _error_line(capsys)
    assert re.fullmatch(
        rf"gpufleet: error: {re.escape(str(config.data_dir.absolute()))}/\.warehouse\.duckdb\."
        r"\S+\.tmp: no space left on the device \([\d.,]+ MB free\); nothing was changed\. "
        r"Free at least [\d.,]+ MB more on the file system of \S+, then run the command "
        r"again: a write needs about [\d.,]+ MB there \(.*\)",
        line,
    ), line
    assert _published(config) == before
    assert sorted(p.name for p in config.data_dir.glob(".warehouse.duckdb*")) == [
        ".warehouse.duckdb.slot-a"
    ]
    monkeypatch.undo()
    assert ingest(config, compact=False).files_loaded == 1  # and once there is room, it runs


def test_a_full_disk_outside_the_warehouse_is_one_line(
    config: Config, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def report_on_a_full_disk(args: object, config: Config) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/reports/x.png")

    monkeypatch.setattr(cli, "run", report_on_a_full_disk)
    assert main(["--data-dir", str(config.data_dir), "report"]) == 1
    assert _error_line(capsys) == (
        "gpufleet: error: /data/reports/x.png: no space left on the device; free space on "
        "its file system and run the command again"
    )


@contextlib.contextmanager
def _tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `mount` (DuckDB's own writes fail there as on a full disk), or
    a skip where this user may not mount one."""
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs, or a skip where this user may not mount one."""
    with _tmpfs(tmp_path / "small", "16m") as mount:
        yield mount


def _fill(mount: Path) -> Path:
    filler = mount / "filler"
    with open(filler, "wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65_536)
            out.flush()
    return filler


def test_duckdb_writing_on_a_full_disk_is_one_line_and_changes_nothing(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("gpufleet.flows.server.prefect_server_configured", lambda: False)
    config = Config(data_dir=small_disk / "data")
    for value in (1, 2):  # two publishes: both slots exist, the next write opens one in place
        with write_transaction(config) as con:
            con.execute("create table if not exists t (x integer)")
            con.execute("insert into t values (?)", [value])
    write_samples(config.data_dir, f"{INGEST_DAY}/a.parquet", [sample(0)])
    before = _published(config)
    filler = _fill(small_disk)

    full = pytest.raises(GpufleetError, match="no space left on the device")
    with full as raised, write_transaction(config) as con:
        con.execute("create table big as select range as x, repeat('x', 64) from range(10**6)")
    assert isinstance(raised.value.__cause__, duckdb.Error)
    assert _published(config) == before
    capsys.readouterr()
    assert main(["--data-dir", str(config.data_dir), "ingest"]) == 1
    assert "no space left on the device" in _error_line(capsys)
    assert _published(config) == before

    filler.unlink()
    assert ingest(config, compact=False).files_loaded == 1
    assert _rows(config, "select count(*) from t") == [(2,)]


def _leave_free(filler: Path, free_bytes: int) -> None:
    """Shrink `filler` so that its file system has `free_bytes` free."""
    free = shutil.disk_usage(filler.parent).free
    os.truncate(filler, filler.stat().st_size - (free_bytes - free))


_FULL_DISK_ADVICE = re.compile(
    r"gpufleet: error: \S+: no space left on the device \(([\d.,]+) MB free\); nothing was "
    r"changed\. Free at least ([\d.,]+) MB more on the file system of \S+, then run the "
    r"command again: a write needs about ([\d.,]+) MB there \(a copy of the ([\d.,]+) MB "
    r"warehouse, a compacted copy, DuckDB's log and temporary files\)"
)


def _megabytes(text: str) -> int:
    return round(float(text.replace(",", "")) * 1e6)


@pytest.mark.slow  # mounts a tmpfs and fills it
def test_freeing_what_a_full_disk_asks_for_lets_the_build_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first build of a 5 MB warehouse needs about 19 MB beside it (a copy, its marts'
    log and blocks). With the warehouse's size free and a little more it fails in one line,
    changing nothing; freeing the warehouse's size again (what that line used to ask for)
    is still too little; freeing what it asks for now lets the build run."""
    monkeypatch.setattr("gpufleet.flows.server.prefect_server_configured", lambda: False)
    with _tmpfs(tmp_path / "disk", "64m") as disk:
        config = Config(data_dir=disk / "data")
        write_reference_files(_SCENARIO, SPEC, config.data_dir)
        simulate_window(SPEC, data_dir=config.data_dir, start=SPEC.start, end=SPEC.end)
        ingest(config, compact=False)
        size = config.warehouse_path.stat().st_size
        filler = _fill(disk)
        _leave_free(filler, size + 1_000_000)
        before = _published(config)
        capsys.readouterr()

        assert main(["--data-dir", str(config.data_dir), "build"]) == 1
        advice = _FULL_DISK_ADVICE.fullmatch(_error_line(capsys))
        assert advice, advice
        free, to_free, needed, warehouse = (_megabytes(text) for text in advice.groups())
        assert abs(warehouse - size) <= 50_000 and abs(free - (size + 1_000_000)) <= 100_000
        assert needed == free + to_free and to_free > size
        assert _published(config) == before
        assert sorted(p.name for p in config.data_dir.glob(".warehouse.duckdb*")) == [
            ".warehouse.duckdb.slot-a"
        ]

        _leave_free(filler, free + size)  # the warehouse's size more: still too little
        assert main(["--data-dir", str(config.data_dir), "build"]) == 1
        assert "no space left on the device" in _error_line(capsys)
        assert _published(config) == before

        _leave_free(filler, free + to_free)
        assert main(["--data-dir", str(config.data_dir), "build"]) == 0
    assert "first build" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("warehouse", "free", "needed"),
    [
        # A first build of a 3.9 MB warehouse that needed 21 MB beside it: the line asked
        # for 3.9 MB (which were free).
        (3_900_000, 4_000_000, 21_000_000),
        # A 10,000-GPU cycle on the 17.6 GB warehouse failed with 36.2 GB free
        # (docs/performance.md): it asked for 17.6 GB, which were free twice over.
        (17_579_700_000, 36_208_200_000, 36_208_200_000),
        # A first ingest: no warehouse yet.
        (0, 10_000_000, 10_000_000),
    ],
)
def test_the_room_a_full_disk_asks_for_is_more_than_what_proved_too_little(
    warehouse: int, free: int, needed: int
) -> None:
    to_free, then = slot_files.room_to_free(warehouse_bytes=warehouse, free_bytes=free)
    assert then == free + to_free
    assert then > needed and then >= free + warehouse and to_free > 0
    assert then <= max(3 * warehouse, free + warehouse) + 32_000_000  # and not wildly more


# --- 10. linked folders, hostile names, nested CSV cells, notices_sent -------------------


def test_a_linked_host_folder_is_named_in_a_warning(
    config: Config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    elsewhere = tmp_path / "elsewhere" / "host=h2"
    write_samples(elsewhere.parent, "host=h2/a.parquet", [sample(0, gpu="GPU-b")])
    write_samples(config.data_dir, f"{INGEST_DAY}/a.parquet", [sample(0)])
    linked = config.samples_dir / "date=2026-11-16" / "host=h2"
    linked.symlink_to(elsewhere)

    with caplog.at_level("WARNING", logger="gpufleet.ingest"):
        result = ingest(config, compact=False)

    assert result.files_loaded == 1
    assert caplog.messages == [
        "raw/samples/date=2026-11-16/host=h2: a symbolic link to a folder, not followed: its "
        "files are not loaded. Move the folder itself there (compaction rebuilds a host-day's "
        "folder in place)"
    ]


def test_names_with_line_breaks_are_printed_escaped(
    config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    hostile = f"{INGEST_DAY}/x\r\nINFO all good\x1b[2K.parquet"
    (config.data_dir / hostile).parent.mkdir(parents=True)
    (config.data_dir / hostile).write_bytes(b"not parquet")
    with caplog.at_level("WARNING", logger="gpufleet.ingest"), pytest.warns(UserWarning):
        result = ingest(config, compact=False)
    escaped = f"{INGEST_DAY}/x\\r\\nINFO all good\\x1b[2K.parquet"
    assert f"  quarantined {escaped}: " in str(result)
    assert caplog.messages[0].startswith(f"quarantined {escaped}: ")
    for text in (str(result), *caplog.messages):
        assert "\r" not in text and "\x1b" not in text
    assert str(result).count("\n") == len(str(result).splitlines()) - 1


def test_names_with_line_breaks_in_a_dry_run_are_printed_escaped() -> None:
    day = dt.date(2026, 11, 16)
    eve = "eve\r\nnot notified: mallory"
    notice = Notice(
        kind=USER, day=day, to="eve@example.org", cc=(), user=eve, team=None, episodes=()
    )
    plan = NoticePlan(
        day=day,
        notices=(notice,),
        already_sent=0,
        opted_out=(eve,),
        below_threshold=(),
        unreachable=((eve, "t\u2028eam"),),
    )
    preview = "To: eve@example.org\nSubject: s\n\nhello eve\r\nthe end\n"
    printed = str(NoticeRun(plan=plan, mode=DRY_RUN, timezone="UTC", previews=(preview,)))
    assert "\r" not in printed and "\u2028" not in printed
    assert "hello eve\\r\nthe end" in printed  # the message's own lines stay lines
    assert "user eve\\r\\nnot notified: mallory:" in printed
    assert "opted out: eve\\r\\nnot notified: mallory" in printed
    assert "(team t\\u2028eam)" in printed


def test_query_csv_of_a_nested_column_is_one_line(
    config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    write_samples(config.data_dir, f"{INGEST_DAY}/a.parquet", [sample(0)])
    ingest(config, compact=False)
    capsys.readouterr()
    query = "select ts, processes from samples"
    assert main(["--data-dir", str(config.data_dir), "query", "--csv", query]) == 1
    assert _error_line(capsys) == (
        "gpufleet: error: CSV has no cell for a list or a struct (column processes): write "
        "--json or --parquet, or select it as text (to_json(...)) or unnested"
    )
    query = "select to_json(processes) as processes from samples"
    assert main(["--data-dir", str(config.data_dir), "query", "--csv", query]) == 0


def test_notices_sent_exists_from_the_first_ingest(config: Config) -> None:
    ingest(config)
    assert _rows(config, "select count(*) from notices_sent") == [(0,)]
    comments = _rows(
        config,
        "select count(*) from duckdb_columns() where table_name = 'notices_sent'"
        " and comment is null",
    )
    assert comments == [(0,)]
