"""Real processes: `gpufleet ingest` beside analysts holding read-only connections, and
writers queuing on the lock file."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from gpufleet.config import Config
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import lock_path
from tests.test_ingest import DAY1, DAY2, T0, sample, write_samples

pytestmark = pytest.mark.slow

GPUFLEET = Path(sys.executable).parent / "gpufleet"

ANALYST = textwrap.dedent(
    """
    import json, pathlib, sys, time
    import duckdb

    warehouse, stop, ready, out, mode = sys.argv[1:]
    counts, errors = [], []
    held = duckdb.connect(warehouse, read_only=True) if mode == "hold" else None
    deadline = time.monotonic() + 400
    while not pathlib.Path(stop).exists() and time.monotonic() < deadline:
        try:
            if held is not None:
                counts.append(held.execute("select count(*) from samples").fetchone()[0])
            else:
                with duckdb.connect(warehouse, read_only=True) as con:
                    counts.append(con.execute("select count(*) from samples").fetchone()[0])
        except Exception as exc:
            errors.append(repr(exc))
        pathlib.Path(ready).touch()
        time.sleep(0.02)
    pathlib.Path(out).write_text(json.dumps({"counts": counts, "errors": errors}))
    sys.exit(1 if errors else 0)
    """
)


def cli_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PREFECT_API_URL", "GPUFLEET_CONFIG", "GPUFLEET_DATA_DIR"}
    }
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    # The temporary server's default 20 s start-up limit is too short on a busy 2-core box.
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    return env


def run_cli(tmp_path: Path, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GPUFLEET), "--data-dir", str(data_dir), "ingest"],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )


def wait_for(path: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def count_samples(warehouse: Path) -> int:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        row = con.execute("select count(*) from samples").fetchone()
    assert row is not None
    return int(row[0])


def test_cli_ingest_beside_analysts_holding_read_only_connections(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(s) for s in range(0, 600, 10)])
    ingest(config)
    before = count_samples(config.warehouse_path)
    assert before == 60

    script = tmp_path / "analyst.py"
    script.write_text(ANALYST)
    stop = tmp_path / "stop"
    analysts = {}
    for mode in ("hold", "reconnect"):
        ready, out = tmp_path / f"{mode}.ready", tmp_path / f"{mode}.json"
        process = subprocess.Popen(
            [sys.executable, str(script), str(config.warehouse_path), str(stop), str(ready),
             str(out), mode]
        )  # fmt: skip
        analysts[mode] = (process, ready, out)
    try:
        for _, ready, _ in analysts.values():
            wait_for(ready)

        day2 = T0 + dt.timedelta(days=1)
        write_samples(
            config.data_dir, f"{DAY2}/b.parquet", [sample(s, day=day2) for s in range(0, 300, 10)]
        )
        (config.data_dir / DAY2 / "c.parquet").write_bytes(b"garbage")
        completed = run_cli(tmp_path, config.data_dir)
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.startswith(
            "ingest: 1 files, 30 new samples, 0 duplicates skipped, 1 quarantined"
        ), completed.stdout
        assert f"quarantined {DAY2}/c.parquet: cannot read Parquet" in completed.stderr
        time.sleep(1.0)  # let the reconnecting analyst open the new snapshot
    finally:
        stop.touch()
        for process, _, _ in analysts.values():
            process.wait(timeout=60)

    results = {mode: json.loads(out.read_text()) for mode, (_, _, out) in analysts.items()}
    for mode, (process, _, _) in analysts.items():
        assert process.returncode == 0, results[mode]["errors"]
        assert results[mode]["errors"] == []
    # The held connection reads its snapshot throughout; new connections see old, then new.
    assert set(results["hold"]["counts"]) == {before}
    reconnect = results["reconnect"]["counts"]
    assert set(reconnect) == {before, before + 30}
    assert reconnect == sorted(reconnect)
    assert count_samples(config.warehouse_path) == before + 30
    assert not [p.name for p in config.data_dir.iterdir() if p.name.endswith(".tmp")]


def test_cli_ingest_with_a_bad_reference_file_fails_in_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write_samples(data_dir, f"{DAY1}/a.parquet", [sample(0)])
    (data_dir / "ref").mkdir()
    (data_dir / "ref" / "hosts.csv").write_text("host_glob,team\ngpu-*,vision\ngpu-*\n")
    completed = run_cli(tmp_path, data_dir)
    assert completed.returncode == 1
    lines = completed.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("gpufleet: error: ")]
    assert errors == [
        f"gpufleet: error: {data_dir}/ref/hosts.csv: line 3: expected 2 fields "
        "(host_glob,team), got 1"
    ]
    assert "Traceback" not in completed.stderr
    assert not (data_dir / "warehouse.duckdb").exists()


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from gpufleet.warehouse.ingest import ingest
    from gpufleet.config import Config
    print(ingest(Config(data_dir=Path(sys.argv[1])), lock_timeout_s=120).samples_loaded)
    """
)


def test_concurrent_writers_queue_on_the_lock_and_load_each_sample_once(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    for name in ("a", "b", "c"):
        rows = [sample(s, gpu=f"GPU-{name}") for s in range(0, 100, 10)]
        write_samples(config.data_dir, f"{DAY1}/{name}.parquet", rows)
    config.data_dir.mkdir(exist_ok=True)
    repo = Path(__file__).resolve().parents[1]
    with open(lock_path(config), "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # both writers must queue behind this
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(config.data_dir)],
                cwd=repo,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        time.sleep(3.0)
        assert all(w.poll() is None for w in writers), "a writer did not wait for the lock"
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    outputs = [w.communicate(timeout=120) for w in writers]
    assert [w.returncode for w in writers] == [0, 0], outputs
    assert sorted(int(out.strip().splitlines()[-1]) for out, _ in outputs) == [0, 30]
    assert count_samples(config.warehouse_path) == 30
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        # The day is over, so the first writer also compacted its three files into one.
        assert con.execute("select count(*), sum(row_count) from loaded_files").fetchone() == (
            1,
            30,
        )


def _waits_on_the_lock(process: subprocess.Popen[str], lock: Path) -> bool:
    """Whether `process` has the writers' lock file open: it listed its files and now waits
    for the lock (`write_transaction`)."""
    try:
        links = [os.readlink(fd) for fd in Path(f"/proc/{process.pid}/fd").iterdir()]
    except OSError:  # exited, or a descriptor closed while read
        return False
    return str(lock) in links


def test_an_ingest_that_waited_for_another_lists_again_and_loads_what_is_new(
    tmp_path: Path,
) -> None:
    """Two `gpufleet ingest`s at once (#56): the one that waited finds the files it listed
    compacted by the other, lists again, loads the file that came meanwhile, says so, and
    exits 0 (not "no sample file ... (a share not mounted?)")."""
    config = Config(data_dir=tmp_path / "data")
    for name in ("a", "b", "c"):
        rows = [sample(s, gpu=f"GPU-{name}") for s in range(0, 100, 10)]
        write_samples(config.data_dir, f"{DAY1}/{name}.parquet", rows)
    lock = lock_path(config)
    with open(lock, "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # both ingests list, then queue behind it
        ingests = [
            subprocess.Popen(
                [str(GPUFLEET), "--data-dir", str(config.data_dir), "ingest"],
                env=cli_env(tmp_path),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        deadline = time.monotonic() + 300
        while not all(_waits_on_the_lock(process, lock) for process in ingests):
            assert all(process.poll() is None for process in ingests), "an ingest ended early"
            assert time.monotonic() < deadline, "the ingests never reached the lock"
            time.sleep(0.1)
        # A file neither listed: only an ingest that lists again can see it.
        late = [sample(s, gpu="GPU-d", day=T0 + dt.timedelta(days=1)) for s in range(0, 50, 10)]
        write_samples(config.data_dir, f"{DAY2}/d.parquet", late)
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    outputs = [process.communicate(timeout=400) for process in ingests]

    assert [process.returncode for process in ingests] == [0, 0], outputs
    firsts = sorted(out.splitlines()[0] for out, _ in outputs)
    assert firsts[0].startswith("ingest: 1 files, 5 new samples"), outputs
    assert firsts[1].startswith("ingest: 3 files, 30 new samples"), outputs
    waited = next(out for out, _ in outputs if out.startswith("ingest: 1 files"))
    assert "note: another ingest loaded these files meanwhile: 3 files listed" in waited
    assert all("mounted" not in out + err for out, err in outputs)
    assert count_samples(config.warehouse_path) == 35
