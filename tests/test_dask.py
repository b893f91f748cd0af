"""A full build fanned out over Dask (`[compute] dask`, issue 43): the same marts as the
embedded build, ids included; a worker killed once is retried with the same rows; a worker
killed on every try fails the build in one line and leaves the published warehouse as it
was; a bad setting is refused in one line. A backfill's compaction from files on Dask: the
same lake and marts as embedded, retried with the same bytes, and a worker killed on every
try fails the ingest in one line, the lake and the warehouse as they were."""

from __future__ import annotations

import datetime as dt
import re
import resource
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from gpufleet.cli import main
from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.flows.local_cluster import forked_workers, local_cluster_kwargs
from gpufleet.simulate.fleet import (
    SimulationSpec,
    scenario_for,
    simulate_window,
    write_reference_files,
)
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.build import build
from gpufleet.warehouse.build.fanout import SCRATCH_DIR_NAME, partition_bounds
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.lake.fanout import HostDay, task_runs
from gpufleet.warehouse.publish import connect_read_only
from tests.dask_kill import KillAtStart
from tests.prefect_runs import own_completed_task_runs
from tests.test_compact import loaded_files_rows
from tests.test_incremental import assert_same_rows, mart_table

pytest.importorskip("prefect_dask")
pytestmark = [pytest.mark.slow, pytest.mark.stack]

DAY1 = dt.datetime(2026, 11, 16, tzinfo=dt.UTC)
# Samples every 30 s in files of 30 minutes (the collectors' defaults are 10 s and 10
# minutes): a third of the rows and a third of the files, the same GPUs, hosts and days.
SPEC = SimulationSpec(
    gpus=12,
    start=DAY1,
    end=DAY1 + dt.timedelta(days=3),
    interval_s=30.0,
    flush_s=1800.0,
    seed=43,
)
TOML = 'timezone = "Europe/Berlin"\n[compute]\ndask = "{dask}"\n'


def _marts(config: Config) -> dict[str, pa.Table]:
    """Every mart's rows, sorted, and the id tables, as Arrow tables (a tenth of the time of
    a Python tuple a row): compared by `_assert_same_marts`."""
    with connect_read_only(config) as con:
        names = [
            name
            for (name,) in con.execute(
                "select table_name from duckdb_tables() where schema_name = 'main'"
                " and table_name not in ('samples_stored')"
                " union all select view_name from duckdb_views()"
                " where schema_name = 'main' and not internal and view_name != 'samples'"
            ).fetchall()
        ]
        names += ["build_state.series", "build_state.hosts", "build_state.teams"]
        return {name: mart_table(con, name) for name in sorted(names)}


def _assert_same_marts(got: dict[str, pa.Table], expected: dict[str, pa.Table]) -> None:
    """The same tables with the same rows, doubles to 6 places (DuckDB's parallel sums differ
    in the last bits from one build to the next, embedded or not)."""
    assert got.keys() == expected.keys()
    for name, table in got.items():
        assert_same_rows(table, expected[name], name)


def _generation(config: Config) -> Any:
    with connect_read_only(config) as con:
        return con.execute("select max(generation) from build_state.generation").fetchall()


def _dask(config: Config, dask: str) -> Config:
    (config.data_dir / "gpufleet.toml").write_text(TOML.format(dask=dask), encoding="utf-8")
    return load_config(data_dir=config.data_dir)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Config, dict[str, pa.Table]]:
    """12 GPUs over two days and a quarter, built in cycles (the first day's samples moved
    to the lake's compacted files), then fully, embedded: the reference marts."""
    data_dir = tmp_path_factory.mktemp("dask")
    config = _dask(Config(data_dir=data_dir), "")
    scenario = scenario_for(SPEC)
    write_reference_files(scenario, SPEC, data_dir)
    for start, end, today in (
        (DAY1, DAY1 + dt.timedelta(days=2), DAY1 + dt.timedelta(days=1)),
        (
            DAY1 + dt.timedelta(days=2),
            DAY1 + dt.timedelta(days=2, hours=6),
            DAY1 + dt.timedelta(days=2),
        ),
    ):
        simulate_window(SPEC, data_dir=data_dir, start=start, end=end, scenario=scenario)
        ingest(config, today=today.date())
        build(config)
    result = build(config, full=True)
    assert result.mode == "full" and result.evicted == 0
    with connect_read_only(config) as con:
        lake = con.execute("select count(*) from build_state.lake_files").fetchall()
    assert lake[0][0] > 0  # some samples are read from the lake's files
    return config, _marts(config)


@pytest.fixture(scope="module")
def cluster(
    prefect_harness: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """One LocalCluster of 2 worker processes for the module's tests that name its
    scheduler (tcp://), forked as `local:N`'s are (a killed one too): its workers report to
    the session's Prefect server and die as the files in the folder returned say
    (tests/dask_kill.py); a task may die once, not twice.
    A killed worker's nanny starts a new one, which may take the loaded test machine more
    than the 15 s after which the cluster would otherwise close that nanny for good (and
    a task waiting for a worker would wait forever)."""
    import dask
    from distributed import Client, LocalCluster
    from prefect.settings import get_current_settings

    kill_dir = tmp_path_factory.mktemp("kill")
    env = {"PREFECT_API_URL": str(get_current_settings().api.url)}
    with (
        dask.config.set(
            {
                "distributed.scheduler.allowed-failures": 1,
                "distributed.deploy.lost-worker-timeout": "1 hour",
            }
        ),
        forked_workers(),
        LocalCluster(**local_cluster_kwargs(2, env)) as running,
    ):
        with Client(running.scheduler_address) as client:
            client.register_plugin(KillAtStart(kill_dir))
        yield running.scheduler_address, kill_dir


@pytest.fixture
def scheduler(cluster: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The module cluster's address; this process reports to the same Prefect server (a
    tcp:// cluster needs PREFECT_API_URL); no kill file is left behind."""
    from prefect.settings import get_current_settings

    monkeypatch.setenv("PREFECT_API_URL", str(get_current_settings().api.url))
    address, kill_dir = cluster
    yield address
    for path in kill_dir.iterdir():
        path.unlink()


def test_the_same_full_build_on_two_local_workers_gives_the_same_marts(
    fleet: tuple[Config, dict[str, pa.Table]], prefect_harness: None
) -> None:

    from gpufleet.flows.build import build_flow

    config, embedded = fleet
    dead = config.data_dir / SCRATCH_DIR_NAME / "build-0123456789ab" / "partials"
    dead.mkdir(parents=True)  # what a build whose host died left
    result = build_flow(data_dir=str(_dask(config, "local:2").data_dir), full=True)
    assert result.mode == "full"
    _assert_same_marts(_marts(config), embedded)
    assert not any((config.data_dir / SCRATCH_DIR_NAME).iterdir())  # the inputs are gone
    assert len(own_completed_task_runs(config.data_dir, "build-partition")) >= 2


def test_local_workers_start_without_importing_their_modules_again(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`local:N`'s worker processes are forked from one that imported distributed, Prefect,
    DuckDB and gpufleet once: each spends before its first task's body less than half the
    CPU those imports cost a new interpreter (a spawned one spent more), reports to this
    session's Prefect server and has this process's environment as it is now."""
    from prefect.settings import get_current_settings

    from gpufleet.flows.fanout import run_on_dask
    from tests.dask_probe import Probe, worker_start_task

    modules = "distributed, prefect.task_engine, prefect_dask, gpufleet.flows.fanout"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", f"import {modules}"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    imports_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    config = _dask(Config(data_dir=tmp_path), "local:2")
    url = str(get_current_settings().api.url)
    for value in ("first", "set since"):  # the forkserver started with the first
        monkeypatch.setenv("GPUFLEET_TEST_PROBE", value)
        probes = [Probe(f"probe {n}", "GPUFLEET_TEST_PROBE") for n in (1, 2)]
        starts = run_on_dask(config, worker_start_task, probes, "probe failed", "")
        assert [(start.api_url, start.value) for start in starts] == [(url, value)] * 2
        assert all(start.cpu_s < imports_s / 2 for start in starts), (starts, imports_s)


def test_a_worker_killed_once_is_retried_with_the_same_rows(
    fleet: tuple[Config, dict[str, pa.Table]], cluster: tuple[str, Path], scheduler: str
) -> None:
    from gpufleet.flows.build import build_flow

    config, embedded = fleet
    once = cluster[1] / "partition-0.once"
    once.touch()
    result = build_flow(data_dir=str(_dask(config, scheduler).data_dir), full=True)
    assert not once.exists() and result.mode == "full"  # partition 1 died, then ran again
    _assert_same_marts(_marts(config), embedded)


def test_a_worker_killed_on_every_try_fails_the_build_and_changes_nothing(
    fleet: tuple[Config, dict[str, pa.Table]],
    cluster: tuple[str, Path],
    scheduler: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, embedded = fleet
    before = _generation(config)
    (cluster[1] / "partition-1").touch()
    _dask(config, scheduler)
    assert main(["--data-dir", str(config.data_dir), "build", "--full"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "gpufleet: error" in line]
    assert len(errors) == 1 and "partition 2 of 2" in errors[0] and "died" in errors[0], errors
    assert errors[0].endswith("the published warehouse is unchanged")
    assert _generation(config) == before
    _assert_same_marts(_marts(config), embedded)
    assert not any((config.data_dir / SCRATCH_DIR_NAME).iterdir())


def test_a_bad_dask_setting_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gpufleet.toml").write_text('[compute]\ndask = "bogus"\n', encoding="utf-8")
    assert main(["--data-dir", str(tmp_path), "build"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "'compute.dask' must be empty, local:N" in error
    with pytest.raises(GpufleetError, match=r"line 2: 'compute\.dask'"):
        load_config(data_dir=tmp_path)
    for good in ("", "local:1", "tcp://scheduler.example:8786"):
        (tmp_path / "gpufleet.toml").write_text(f'[compute]\ndask = "{good}"\n', encoding="utf-8")
        assert load_config(data_dir=tmp_path).compute.dask == good


def test_partitions_split_the_gpus_evenly_and_each_once() -> None:
    uuids = [f"GPU-{n:02d}" for n in range(10)]
    assert partition_bounds(uuids, 3) == [
        ("GPU-00", "GPU-02"),
        ("GPU-03", "GPU-05"),
        ("GPU-06", "GPU-09"),
    ]
    assert partition_bounds(uuids[:2], 4) == [("GPU-00", "GPU-00"), ("GPU-01", "GPU-01")]


# A backfill: 8 GPUs on two hosts, the first day loaded by an earlier ingest (its host-days
# compacted from their files, on Dask), the next two loaded now (compacted from the load).
BACKFILL = SimulationSpec(
    gpus=8,
    gpus_per_host=4,
    start=dt.datetime(2026, 10, 5, tzinfo=dt.UTC),
    seed=44,
    end=dt.datetime(2026, 10, 8, tzinfo=dt.UTC),
    interval_s=30.0,
    flush_s=1800.0,
)


def _lake(config: Config) -> dict[str, tuple[int, int]]:
    """Every file and folder under raw/, hidden ones too: (size, mtime) by relative path."""
    return {
        path.relative_to(config.data_dir).as_posix(): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted((config.data_dir / "raw").rglob("*"))
        if path.is_file() or not any(path.iterdir())
    }


def _compacted(config: Config) -> dict[str, tuple[bytes, pa.Table]]:
    """Each compacted file's bytes and rows (sorted, as an Arrow table), by relative path."""
    import duckdb

    found = {}
    with duckdb.connect() as con:  # one for all the files: a connection costs about 20 ms
        for path in sorted((config.data_dir / "raw").glob("samples/date=*/host=*/compacted-*")):
            rows = con.sql(
                "select * from read_parquet(?) order by gpu_uuid, ts", params=[str(path)]
            ).to_arrow_table()
            found[path.relative_to(config.data_dir).as_posix()] = (path.read_bytes(), rows)
    return found


def _assert_same_lake(
    got: dict[str, tuple[bytes, pa.Table]],
    expected: dict[str, tuple[bytes, pa.Table]],
    *,
    same_bytes: bool,
) -> None:
    """The same compacted files with exactly the same rows, and with `same_bytes`, the same
    bytes too."""
    assert got.keys() == expected.keys()
    for path, (data, rows) in got.items():
        if not rows.equals(expected[path][1]):  # as Python values, for pytest to show them
            assert rows.to_pylist() == expected[path][1].to_pylist(), path
        assert not same_bytes or data == expected[path][0], path


def _backfill_marts(config: Config) -> dict[str, pa.Table]:
    """`_marts` but loaded_files (its mtimes and times are the copy's): `loaded_files_rows`."""
    marts = _marts(config)
    del marts["loaded_files"]
    return marts


@pytest.fixture(scope="module")
def before_backfill(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory whose first day is loaded (not compacted: it was today then) and
    whose next two days' files wait for the backfill; copied by each test that ingests."""
    assert dt.datetime.now(dt.UTC) > BACKFILL.end  # every day of it is over, today
    data_dir = tmp_path_factory.mktemp("backfill")
    config = _dask(Config(data_dir=data_dir), "")
    scenario = scenario_for(BACKFILL)
    write_reference_files(scenario, BACKFILL, data_dir)
    first = BACKFILL.start + dt.timedelta(days=1)
    simulate_window(BACKFILL, data_dir=data_dir, start=BACKFILL.start, end=first, scenario=scenario)
    ingest(config, today=BACKFILL.start.date())
    simulate_window(BACKFILL, data_dir=data_dir, start=first, end=BACKFILL.end, scenario=scenario)
    return data_dir


def _copy(source: Path, tmp_path: Path, dask: str) -> Config:
    shutil.copytree(source, tmp_path / "data")
    return _dask(Config(data_dir=tmp_path / "data"), dask)


@pytest.fixture(scope="module")
def embedded_backfill(
    before_backfill: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Config, dict[str, Any]]:
    """The backfill embedded: its compacted files, and its marts after a build."""
    config = _copy(before_backfill, tmp_path_factory.mktemp("embedded"), "")
    result = ingest(config)
    assert result.compaction is not None
    reread = result.compaction.partitions - result.compaction.from_load
    assert reread == 2 and result.compaction.from_load == 4  # both paths are taken
    lake = _compacted(config)
    build(config)
    return config, {
        "lake": lake,
        "loaded": loaded_files_rows(config),
        "marts": _backfill_marts(config),
    }


def test_a_backfill_compacted_on_two_local_workers_gives_the_same_lake_and_marts(
    before_backfill: Path,
    embedded_backfill: tuple[Config, dict[str, Any]],
    prefect_harness: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ingest flow's loads and compaction on one `LocalCluster`, started once."""
    import distributed

    started: list[str] = []

    class Noted(distributed.LocalCluster):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self.scheduler_address)

    monkeypatch.setattr(distributed, "LocalCluster", Noted)  # what `local:N` starts
    config = _copy(before_backfill, tmp_path, "local:2")
    dead = config.data_dir / "raw/samples/date=2026-10-05/.host=gpu-r01n01.compacting-0123abcd"
    dead.mkdir()  # what an ingest that died left: a late task's file too
    (dead / "compacted-2026-10-05.parquet").write_bytes(b"a dead run's")
    (config.data_dir / SCRATCH_DIR_NAME / "compact-0123abcd" / "spill").mkdir(parents=True)
    assert main(["--data-dir", str(config.data_dir), "ingest"]) == 0  # the ingest flow
    _, embedded = embedded_backfill
    lake = _compacted(config)
    assert len(lake) == 6
    _assert_same_lake(lake, embedded["lake"], same_bytes=True)
    assert not any(name.startswith(".") for name in _lake(config))
    assert not any((config.data_dir / SCRATCH_DIR_NAME).iterdir())
    assert loaded_files_rows(config) == embedded["loaded"]
    build(config)
    _assert_same_marts(_backfill_marts(config), embedded["marts"])
    assert len(own_completed_task_runs(config.data_dir, "compact-host-days")) >= 2
    # the two new days' batches were read and compacted on the workers, not on this host
    assert len(own_completed_task_runs(config.data_dir, "load-host-days")) >= 2
    assert len(started) == 1, started  # the loads and the compaction on one cluster


@pytest.fixture(scope="module")
def killed_once(
    before_backfill: Path, cluster: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Config, set[str]]:
    """The backfill ingested on the module's cluster, the worker of its first load task
    and that of its first compaction task each killed once: the kill files left after."""
    from prefect.settings import get_current_settings

    address, kill_dir = cluster
    with pytest.MonkeyPatch.context() as environ:  # as `scheduler` sets it, for the module
        environ.setenv("PREFECT_API_URL", str(get_current_settings().api.url))
        config = _copy(before_backfill, tmp_path_factory.mktemp("killed-once"), address)
        for task in ("compact", "load"):
            (kill_dir / f"{task}-0.once").touch()
        assert main(["--data-dir", str(config.data_dir), "ingest"]) == 0
    left = {path.name for path in kill_dir.iterdir()}
    for path in kill_dir.iterdir():
        path.unlink()
    return config, left


@pytest.mark.parametrize("task", ["compact", "load"])
def test_a_compaction_or_load_worker_killed_once_is_retried_with_the_same_bytes(
    task: str,
    embedded_backfill: tuple[Config, dict[str, Any]],
    killed_once: tuple[Config, set[str]],
) -> None:
    config, left = killed_once
    assert f"{task}-0.once" not in left  # the first task died, then ran again
    _assert_same_lake(_compacted(config), embedded_backfill[1]["lake"], same_bytes=True)
    assert not any(name.startswith(".") for name in _lake(config))


@pytest.mark.parametrize(
    ("task", "named"),
    [
        # the first task dies on every try; a task Dask had queued on the same worker may
        # use up its tries first, and the error names that one
        ("compact", r"compaction task \d+ of \d+ \(host-days date=2026-10-0\d/host="),
        ("load", r"load task \d+ of \d+ \(host-days date=2026-10-0\d/host="),
    ],
)
def test_a_compaction_or_load_worker_killed_on_every_try_fails_the_ingest_and_changes_nothing(
    task: str,
    named: str,
    before_backfill: Path,
    cluster: tuple[str, Path],
    scheduler: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _copy(before_backfill, tmp_path, scheduler)
    lake, loaded, generation = _lake(config), loaded_files_rows(config), _generation(config)
    (cluster[1] / f"{task}-0").touch()  # the first task (of one per live worker) dies
    assert main(["--data-dir", str(config.data_dir), "ingest"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if "gpufleet: error" in line]
    assert len(errors) == 1 and re.search(named, errors[0]), errors
    assert "died" in errors[0], errors
    assert errors[0].endswith("the warehouse and the lake are unchanged")
    assert _lake(config) == lake  # the collector files, and no staging folder left
    assert loaded_files_rows(config) == loaded and _generation(config) == generation
    scratch = config.data_dir / SCRATCH_DIR_NAME  # made by a compaction's fan-out only
    assert not scratch.exists() or not any(scratch.iterdir())


def test_a_backfill_with_a_bad_file_on_the_workers_quarantines_it_as_embedded(
    before_backfill: Path, scheduler: str, tmp_path: Path
) -> None:
    results = {}
    for dask in ("", scheduler):
        config = _copy(before_backfill, tmp_path / ((dask and "dask") or "embedded"), dask)
        bad = sorted((config.data_dir / "raw" / "samples" / "date=2026-10-06").rglob("*.parquet"))
        bad[0].write_bytes(b"not parquet")  # its batch is refused and loaded on this host
        assert main(["--data-dir", str(config.data_dir), "ingest"]) == 0
        with connect_read_only(config) as con:
            quarantined = con.execute("select path, reason from quarantined_files").fetchall()
        results[dask] = quarantined, loaded_files_rows(config), _compacted(config)
    (quarantined, loaded, lake), embedded = results[scheduler], results[""]
    assert len(quarantined) == 1 and quarantined == embedded[0]
    assert loaded == embedded[1]
    _assert_same_lake(lake, embedded[2], same_bytes=False)


def test_batches_are_sent_in_runs_each_once_in_order() -> None:
    batches = [
        [
            SampleFile(path=f"raw/samples/date=D/host=h{i}/{j}.parquet", size_bytes=s, mtime_ns=0)
            for j in range(2)
        ]
        for i, s in enumerate([10, 10, 10, 70, 5, 5])
    ]
    for workers in (1, 2, 3, 6, 9):
        runs = task_runs(batches, workers, lambda batch: sum(f.size_bytes for f in batch))
        assert [batch for run in runs for batch in run] == batches
        assert len(runs) == min(len(batches), workers) and all(runs)


def test_host_days_are_split_in_runs_of_about_equal_bytes() -> None:
    def days(*sizes: int) -> list[HostDay]:
        return [
            HostDay(directory=str(n), sources=(), target="", size_bytes=s)
            for n, s in enumerate(sizes)
        ]

    def runs(sizes: tuple[int, ...], workers: int) -> list[list[int]]:
        return [
            [day.size_bytes for day in run]
            for run in task_runs(days(*sizes), workers, lambda day: day.size_bytes)
        ]

    assert runs((1,) * 10, 3) == [[1, 1, 1, 1], [1, 1, 1], [1, 1, 1]]
    assert runs((100, 1, 1, 1), 2) == [[100], [1, 1, 1]]
    assert runs((1, 1, 100), 2) == [[1, 1], [100]]
    assert runs((5,), 4) == [[5]]  # no more runs than host-days
    assert runs((0, 0, 0), 2) == [[0], [0, 0]]
