"""An ingest on Dask workers that read an S3 `raw_location` themselves (issue #60 item 5): no
shared filesystem. A backfill uploaded to a real store (SeaweedFS, tests/s3_stack.py),
ingested with `[compute] dask = "local:2"`, gives the compacted files (byte for byte),
`loaded_files` and marts of the embedded ingest of the same objects, and no task names a
path of the pipeline host's data directory, and the pipeline host copies none of the objects
the workers read and compact (the mirror's copies watched, the store real). With the tasks
run in this process: a site's objects compacted in their `host=H@<site>` folders as
embedded, a host-day with a file that is no object (its compacted file beside a late file)
compacted on the pipeline host, an object overwritten after its copy not read by a worker,
a batch a worker refuses (a bad object) copied for the host to load and quarantine as
embedded, the other whole host-days not copied, and a load task that fails leaving those
objects, unrecorded and without a folder, to the next ingest. Without a cluster: which
objects the mirror leaves in the store (a new host-day that is over), and those of a day
retention expired recorded, not listed again."""

from __future__ import annotations

import datetime as dt
import json
import logging
import pickle
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow.parquet as pq
import pytest

from gpufleet.config import Config, load_config
from gpufleet.integrations import mirror
from gpufleet.simulate.fleet import scenario_for, simulate_window, write_reference_files
from gpufleet.storage.s3 import S3Location, s3_filesystem
from gpufleet.warehouse.build import build
from gpufleet.warehouse.build.kept import ensure_kept_tables
from gpufleet.warehouse.ingest import QuarantineWarning, ingest
from gpufleet.warehouse.ingest.fanned import LoadFanOut, LoadTask, LoadTaskResult, run_load_task
from gpufleet.warehouse.lake.compact_task import run_compact_task
from gpufleet.warehouse.lake.fanout import CompactFanOut, CompactTask, CompactTaskResult
from gpufleet.warehouse.publish import connect_read_only, write_transaction
from tests.s3_stack import BUCKET, S3Store
from tests.test_compact import loaded_files_rows
from tests.test_dask import (
    BACKFILL,
    _assert_same_lake,
    _assert_same_marts,
    _backfill_marts,
    _compacted,
    _lake,
)

pytest.importorskip("prefect_dask")
pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.fleet]

FIRST = BACKFILL.start + dt.timedelta(days=1)
NEW_DAYS = ("date=2026-10-06", "date=2026-10-07")  # the backfill's whole host-days
SITE = "site-a"
TOML = (
    'timezone = "Europe/Berlin"\n{top}\n[s3]\nendpoint_url = "{endpoint}"\n'
    '[compute]\ndask = "{dask}"\n{site}\n'
)
T = TypeVar("T")
R = TypeVar("R")


@pytest.fixture(scope="module")
def store(s3: S3Store) -> Iterator[S3Store]:
    """The session's store, its credentials in this process's environment for the module's
    tests (and so in the `local:N` workers', which inherit it)."""
    with pytest.MonkeyPatch.context() as environ:
        for name, value in s3.environ.items():
            environ.setenv(name, value)
        environ.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield s3


def _upload(store: S3Store, fleet: Path, url: str, pattern: str) -> None:
    """The files below `fleet/raw` matching `pattern`, as objects at the same paths below
    `url` (what the collectors' `--upload` and an allocation export would put there)."""
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    location = S3Location.parse(url)
    for path in sorted((fleet / "raw").glob(pattern)):
        if path.is_file():
            with fs.open_output_stream(
                location.path(path.relative_to(fleet / "raw").as_posix())
            ) as out:
                out.write(path.read_bytes())


def _configured(
    data_dir: Path, store: S3Store, url: str, dask: str, *, site: str | None = None
) -> Config:
    """`url` the top-level `raw_location`, or `site`'s own store."""
    location = f'raw_location = "{url}"'
    toml = TOML.format(
        top="" if site else location,
        endpoint=store.endpoint_url,
        dask=dask,
        site=f"[clusters.{site}]\n{location}" if site else "",
    )
    (data_dir / "gpufleet.toml").write_text(toml, encoding="utf-8")
    return load_config(data_dir=data_dir)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """test_dask.py's backfill, its collectors' and reference files: a data directory's
    `raw/` and `ref/`, uploaded to each store by the fixtures below."""
    fleet = tmp_path_factory.mktemp("dask-s3-fleet")
    scenario = scenario_for(BACKFILL)
    write_reference_files(scenario, BACKFILL, fleet)
    simulate_window(BACKFILL, data_dir=fleet, start=BACKFILL.start, end=FIRST, scenario=scenario)
    simulate_window(BACKFILL, data_dir=fleet, start=FIRST, end=BACKFILL.end, scenario=scenario)
    return fleet


@pytest.fixture(scope="module")
def before_backfill(
    fleet: Path, store: S3Store, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """The backfill in the store: the first day's objects loaded by an earlier ingest (not
    compacted: it was today then), the next two days' objects uploaded since; the data
    directory (copied by each ingest) and the store's URL."""
    return _in_the_store(fleet, store, tmp_path_factory.mktemp("dask-s3"), None)


@pytest.fixture(scope="module")
def site_backfill(
    fleet: Path, store: S3Store, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """`before_backfill` in a site's own store."""
    return _in_the_store(fleet, store, tmp_path_factory.mktemp("dask-s3-site"), SITE)


def _in_the_store(
    fleet: Path, store: S3Store, tmp_path: Path, site: str | None
) -> tuple[Path, str]:
    data_dir = tmp_path / "before"
    url = f"s3://{BUCKET}/{tmp_path.name}"
    _upload(store, fleet, url, "allocations/*")
    _upload(store, fleet, url, f"samples/date={BACKFILL.start.date()}/*/*")
    shutil.copytree(fleet / "ref", data_dir / "ref")
    ingest(_configured(data_dir, store, url, "", site=site), today=BACKFILL.start.date())
    _upload(store, fleet, url, "samples/date=*/*/*")  # the first day's again: the same bytes
    return data_dir, url


def _noting_copies(copy: Callable[..., Any], copied: list[str]) -> Callable[..., Any]:
    """The mirror's `_copy` (of one object into raw/: the mirror's, and one made for the
    pipeline host to read), noting each object it downloads by its path below raw/."""

    def noted(fs: Any, info: Any, target: Path, known: mirror.Copied | None) -> Any:
        seen = copy(fs, info, target, known)
        if seen is not None and (known is None or seen.etag != known.etag):
            copied.append(str(target).rsplit("/raw/", 1)[1])
        return seen

    return noted


def _of_new_days(copied: list[str]) -> list[str]:
    return [path for path in copied if path.split("/")[1] in NEW_DAYS]


def _recording(run: Callable[[Sequence[T]], Sequence[R]], sent: list[T]) -> Callable[..., Any]:
    def recorded(tasks: Sequence[T]) -> Sequence[R]:
        sent.extend(tasks)
        return run(tasks)

    return recorded


def _holding(receive: Callable[[R], R], held: list[bool]) -> Callable[[R], R]:
    """`receive`, noting whether each result it is given holds compacted files' bytes."""

    def noted(result: R) -> R:
        assert isinstance(result, LoadTaskResult | CompactTaskResult)
        held.append(bool(result.files))
        return receive(result)

    return noted


def test_a_backfill_read_from_the_store_on_two_local_workers_is_the_embedded_one(
    before_backfill: tuple[Path, str],
    store: S3Store,
    prefect_harness: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpufleet.flows.compact import dask_compact_fan_out, dask_load_fan_out
    from gpufleet.flows.dask_cluster import DaskCluster

    source, url = before_backfill
    found: dict[str, dict[str, Any]] = {}
    copy = mirror._copy
    for dask in ("", "local:2"):
        data_dir = tmp_path / (dask.replace(":", "-") or "embedded")
        shutil.copytree(source, data_dir)
        config = _configured(data_dir, store, url, dask)
        copied: list[str] = []
        monkeypatch.setattr(mirror, "_copy", _noting_copies(copy, copied))
        compact_tasks: list[CompactTask] = []
        load_tasks: list[LoadTask] = []
        held: list[bool] = []
        fan_outs: dict[str, Any] = {}
        cluster = DaskCluster(config)  # one for the loads and the compaction, as the flow's
        if dask:
            compacting = dask_compact_fan_out(config, cluster)
            loading = dask_load_fan_out(config, cluster)
            compacting.run = _recording(compacting.run, compact_tasks)
            loading.run = _recording(loading.run, load_tasks)
            compacting.receive = _holding(compacting.receive, held)  # type: ignore[method-assign, assignment]
            loading.receive = _holding(loading.receive, held)  # type: ignore[method-assign, assignment]
            fan_outs = {"compact_fan_out": compacting, "load_fan_out": loading}
        with cluster:
            result = ingest(config, **fan_outs)
        assert result.compaction is not None
        assert (result.compaction.partitions, result.compaction.from_load) == (6, 4)
        lake = _compacted(config)
        build(config)
        found[dask] = {
            "lake": lake,
            "loaded": loaded_files_rows(config),
            "marts": _backfill_marts(config),
            "tasks": (compact_tasks, load_tasks),
            "held": held,
            "copied": _of_new_days(copied),
        }
        assert not any(name.startswith(".") for name in _lake(config))
        # Every object is recorded: the next ingest's mirror copies none of them again.
        assert not (config.data_dir / "raw" / mirror.PENDING_NAME).exists()
        copied.clear()
        assert [r.copied for r in mirror.mirror_raw_location(config)] == [0] and not copied
    embedded, fanned = found[""], found["local:2"]
    assert len(fanned["lake"]) == 6
    _assert_same_lake(fanned["lake"], embedded["lake"], same_bytes=True)
    assert fanned["loaded"] == embedded["loaded"]
    _assert_same_marts(fanned["marts"], embedded["marts"])
    # The workers were given the objects, never a path of this host's data directory: the
    # first day's two host-days compacted from their files, the next two days' four loaded.
    compacted, loaded = fanned["tasks"]
    host_days = [day for task in compacted for day in task.host_days]
    batches = [file.path for task in loaded for batch in task.batches for file in batch]
    assert len(host_days) == 2 and all(day.objects for day in host_days)
    assert {path.split("/")[2] for path in batches} == {"date=2026-10-06", "date=2026-10-07"}
    for task in [*compacted, *loaded]:
        assert task.store is not None
        assert str(tmp_path).encode() not in pickle.dumps(task), task
    # Each task's files were written as its result came (and let go of), the result seen
    # once more, empty, when all were done.
    tasks = len(compacted) + len(loaded)
    assert sorted(fanned["held"]) == [False] * tasks + [True] * tasks
    # The host copied every object of the new days embedded, and none of them fanned out:
    # the workers read them from the store, and their compacted files replace them.
    assert sorted(embedded["copied"]) == sorted(p.removeprefix("raw/") for p in batches)
    assert fanned["copied"] == []


def _in_process(config: Config, tasks: list[Any]) -> tuple[CompactFanOut, LoadFanOut]:
    """Fan-outs whose tasks run in this process, as a worker runs them (`tasks` records
    them): the store's paths without a cluster."""

    def compact(sent: Sequence[CompactTask]) -> list[CompactTaskResult]:
        tasks.extend(sent)
        return [run_compact_task(task) for task in sent]

    def load(sent: Sequence[LoadTask]) -> list[LoadTaskResult]:
        tasks.extend(sent)
        return [run_load_task(task) for task in sent]

    return (
        CompactFanOut(config=config, run=compact, workers=lambda: 2),
        LoadFanOut(config=config, run=load, workers=lambda: 2),
    )


def test_a_host_day_with_a_file_of_no_object_is_compacted_on_the_host(
    before_backfill: tuple[Path, str], store: S3Store, tmp_path: Path
) -> None:
    """The first day compacted (on workers, from the store), then a late object of it: its
    compacted file (no object) and the late file are compacted again, on this host."""
    source, url = before_backfill
    data_dir = tmp_path / "late"
    shutil.copytree(source, data_dir)
    config = _configured(data_dir, store, url, "")
    tasks: list[Any] = []
    compacting, loading = _in_process(config, tasks)
    assert ingest(config, compact_fan_out=compacting, load_fan_out=loading).compaction
    assert tasks and all(task.store is not None for task in tasks)  # read from the store
    assert loading.last is not None
    assert all(batch for result in loading.last.results for batch in result.batches)
    day = data_dir / "raw/samples" / f"date={BACKFILL.start.date()}"
    host = sorted(day.iterdir())[0]
    (compacted,) = host.iterdir()
    key = f"samples/{day.name}/{host.name}/late.parquet"  # three samples it holds already
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    pq.write_table(
        pq.read_table(compacted).slice(0, 3), S3Location.parse(url).path(key), filesystem=fs
    )
    tasks.clear()
    result = ingest(config, compact_fan_out=compacting, load_fan_out=loading)
    assert (result.files_loaded, result.duplicates_skipped) == (1, 3)
    assert result.compaction is not None and result.compaction.partitions == 1
    assert [p.name for p in host.iterdir()] == [compacted.name]
    assert not tasks  # nothing sent: the compacted file lies on this host alone


def test_an_object_overwritten_since_its_copy_is_not_read_by_a_worker(
    before_backfill: tuple[Path, str],
    store: S3Store,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An object of a host-day to compact from its files overwritten after the ingest
    copied it: the worker reads other bytes than the host's copy and leaves the host-day
    as it is, with a warning, as a host-day whose files do not read."""
    source, url = before_backfill
    data_dir = tmp_path / "overwritten"
    shutil.copytree(source, data_dir)
    config = _configured(data_dir, store, url, "")
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    location = S3Location.parse(url)
    first = sorted((data_dir / "raw/samples" / f"date={BACKFILL.start.date()}").rglob("*.parquet"))
    overwritten = first[0].relative_to(data_dir / "raw").as_posix()

    def compact(sent: Sequence[CompactTask]) -> list[CompactTaskResult]:
        table = pq.read_table(location.path(overwritten), filesystem=fs)
        pq.write_table(table.slice(1), location.path(overwritten), filesystem=fs)
        return [run_compact_task(task) for task in sent]

    compacting = CompactFanOut(config=config, run=compact, workers=lambda: 1)
    with caplog.at_level(logging.WARNING, logger="gpufleet.compact"):
        result = ingest(config, compact_fan_out=compacting)
    assert result.compaction is not None
    directory = first[0].parent.relative_to(data_dir).as_posix()
    warned = [r.getMessage() for r in caplog.records if directory in r.getMessage()]
    assert len(warned) == 1 and "overwritten since" in warned[0], warned
    assert (data_dir / "raw" / overwritten).is_file()  # left as it is


def test_a_sites_store_is_read_on_the_workers_into_the_sites_folders(
    site_backfill: tuple[Path, str], store: S3Store, tmp_path: Path
) -> None:
    """A site's objects, read by the workers (here in this process) into `host=H@<site>`
    folders of their own, give the compacted files of the embedded ingest: the site's in
    their `cluster`, as the folder says."""
    source, url = site_backfill
    found: dict[bool, tuple[Any, ...]] = {}
    for fanned in (False, True):
        data_dir = tmp_path / ("fanned" if fanned else "embedded")
        shutil.copytree(source, data_dir)
        config = _configured(data_dir, store, url, "", site=SITE)
        tasks: list[Any] = []
        compacting, loading = _in_process(config, tasks)
        result = ingest(
            config,
            compact_fan_out=compacting if fanned else None,
            load_fan_out=loading if fanned else None,
        )
        assert result.compaction is not None
        assert (result.compaction.partitions, result.compaction.from_load) == (6, 4)
        found[fanned] = _compacted(config), loaded_files_rows(config), tasks
    (lake, loaded, tasks), embedded = found[True], found[False]
    assert len(lake) == 6 and all(f"@{SITE}/compacted-" in path for path in lake)
    _assert_same_lake(lake, embedded[0], same_bytes=True)
    assert loaded == embedded[1]
    assert len(tasks) == 4 and all(task.store is not None for task in tasks)
    sites = {site for _, rows in lake.values() for site in rows.column("cluster").to_pylist()}
    assert sites == {SITE}


def test_a_batch_a_worker_refuses_is_copied_for_the_host_alone(
    fleet: Path, store: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bad object in a whole host-day of the backfill: the worker refuses its batch, which
    the pipeline host copies from the store to load and quarantine as embedded; the other
    whole host-days are read by the workers alone, never copied. The same quarantine,
    `loaded_files` and compacted files as the embedded ingest."""
    source, url = _in_the_store(fleet, store, tmp_path, None)
    key = sorted(
        p.relative_to(fleet / "raw").as_posix()
        for p in (fleet / "raw/samples" / NEW_DAYS[0]).rglob("*.parquet")
    )[0]
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    with fs.open_output_stream(S3Location.parse(url).path(key)) as out:
        out.write(b"not parquet")  # a collector file that does not read
    copy = mirror._copy
    results: dict[bool, tuple[Any, ...]] = {}
    for fanned in (False, True):
        data_dir = tmp_path / ("fanned" if fanned else "embedded")
        shutil.copytree(source, data_dir)
        config = _configured(data_dir, store, url, "")
        copied: list[str] = []
        monkeypatch.setattr(mirror, "_copy", _noting_copies(copy, copied))
        tasks: list[Any] = []
        compacting, loading = _in_process(config, tasks)
        with pytest.warns(QuarantineWarning):
            result = ingest(
                config,
                compact_fan_out=compacting if fanned else None,
                load_fan_out=loading if fanned else None,
            )
        ((path, moved_to),) = [(item.path, item.moved_to) for item in result.quarantined]
        assert path == f"raw/{key}" and moved_to and (config.data_dir / moved_to).is_file()
        with connect_read_only(config) as con:
            quarantined = con.execute("select path, reason from quarantined_files").fetchall()
        results[fanned] = quarantined, loaded_files_rows(config), _compacted(config), copied
        assert not (config.data_dir / "raw" / mirror.PENDING_NAME).exists()
    (quarantined, loaded, lake, copied), embedded = results[True], results[False]
    assert len(quarantined) == 1 and quarantined == embedded[0]
    assert loaded == embedded[1]
    _assert_same_lake(lake, embedded[2], same_bytes=False)
    assert loading.last is not None
    sent = [batch for task in tasks if isinstance(task, LoadTask) for batch in task.batches]
    taken = [batch for result in loading.last.results for batch in result.batches]
    refused = sorted(
        f.path.removeprefix("raw/")
        for batch, took in zip(sent, taken, strict=True)
        if took is None
        for f in batch
    )
    assert key in refused
    # Copied: the refused batch's objects; of the other whole host-days, none.
    assert sorted(_of_new_days(copied)) == refused
    assert len(_of_new_days(embedded[3])) > len(refused)


def test_the_mirror_leaves_in_the_store_only_new_host_days_that_are_over(
    store: S3Store, tmp_path: Path
) -> None:
    """With `defer` (an ingest with a load fan-out), a new object of a host-day before
    today with no file here is listed as pending, not copied; one of today, or of a
    host-day with a file here already, is copied as always, and so is every object
    without `defer`. The pending list is the next mirror's to rewrite."""
    from gpufleet.integrations.pending import read_pending

    today = dt.datetime.now(dt.UTC).date()
    days = {"over": today - dt.timedelta(days=1), "today": today}
    keys = [
        f"samples/date={days['over']}/host=new/a.parquet",
        f"samples/date={days['over']}/host=new/b.parquet",
        f"samples/date={days['over']}/host=known/late.parquet",
        f"samples/date={days['today']}/host=new/a.parquet",
    ]
    url = f"s3://{BUCKET}/{tmp_path.name}"
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    for key in keys:
        with fs.open_output_stream(S3Location.parse(url).path(key)) as out:
            out.write(key.encode())
    found = {}
    for defer in (True, False):
        data_dir = tmp_path / f"defer-{defer}"
        known = data_dir / "raw" / keys[2].replace("late", "early")
        known.parent.mkdir(parents=True)
        known.write_bytes(b"loaded before")
        config = _configured(data_dir, store, url, "")
        record = data_dir / "raw" / mirror.RECORD_NAME
        gone = [f"samples/gone/{i}.parquet" for i in range(1100)]  # deleted from the store
        line = {"location": url, "size_bytes": 1, "mtime_ns": 1, "etag": "x"}
        record.write_text("".join(json.dumps({**line, "key": key}) + "\n" for key in gone))
        (result,) = mirror.mirror_raw_location(config, defer=defer)
        # The record, mostly lines of objects gone, is rewritten: the pending ones not in it.
        written = [json.loads(text)["key"] for text in record.read_text().splitlines()]
        assert sorted(written) == sorted(set(keys) - {keys[0], keys[1]} if defer else keys)
        pending = read_pending(config)
        here = sorted(
            p.relative_to(data_dir / "raw").as_posix() for p in data_dir.rglob("raw/**/*.parquet")
        )
        found[defer] = (result.copied, result.pending), [p.path for p in pending], here
        assert all(p.size_bytes == len(p.key) for p in pending)  # the store's sizes
        if defer:  # the next mirror without `defer` copies what is still pending
            (again,) = mirror.mirror_raw_location(config)
            assert (again.copied, again.pending) == (2, 0) and not read_pending(config)
            assert (data_dir / "raw" / keys[0]).is_file()
    early = keys[2].replace("late", "early")
    assert found[True] == (
        (2, 2),
        [f"raw/{key}" for key in keys[:2]],
        sorted([early, *keys[2:]]),
    )
    assert found[False] == ((4, 0), [], sorted([early, *keys]))


def test_objects_of_an_expired_day_are_neither_copied_nor_listed_again(
    before_backfill: tuple[Path, str], store: S3Store, tmp_path: Path
) -> None:
    """The objects of a day retention expired, left in the store by a Dask ingest, are not
    loaded (as their copies would not be) and are recorded: no later ingest lists them as
    pending again, nor copies them."""
    source, url = before_backfill
    data_dir = tmp_path / "expired"
    shutil.copytree(source, data_dir)
    config = _configured(data_dir, store, url, "")
    with write_transaction(config) as con:
        ensure_kept_tables(con)
        con.execute("insert into build_state.retention values ('2026-10-07', '2026-10-07')")
    compacting, loading = _in_process(config, [])
    result = ingest(config, compact_fan_out=compacting, load_fan_out=loading)
    assert result.expired_files > 0 and result.compaction is not None
    assert not any(NEW_DAYS[0] in path for path, *_ in loaded_files_rows(config))
    assert not (config.samples_dir / NEW_DAYS[0]).exists()  # never copied
    assert not (config.data_dir / "raw" / mirror.PENDING_NAME).exists()
    (again,) = mirror.mirror_raw_location(config, defer=True)
    assert (again.copied, again.pending) == (0, 0)


def test_a_failed_load_task_leaves_the_objects_to_the_next_ingest(
    fleet: Path, store: S3Store, tmp_path: Path
) -> None:
    """A load task that fails fails the ingest before anything is published: the lake is
    as it was (no folder made for the objects left in the store), nothing of theirs is
    recorded, and the next ingest lists them again and loads them, still without a copy."""
    source, url = _in_the_store(fleet, store, tmp_path, None)  # (a prefix of its own)
    data_dir = tmp_path / "failed"
    shutil.copytree(source, data_dir)
    config = _configured(data_dir, store, url, "")
    lake, loaded = _lake(config), loaded_files_rows(config)
    compacting, loading = _in_process(config, [])

    def dies(sent: Sequence[LoadTask]) -> list[LoadTaskResult]:
        raise RuntimeError("the worker died")

    working, loading.run = loading.run, dies
    with pytest.raises(RuntimeError, match="the worker died"):
        ingest(config, compact_fan_out=compacting, load_fan_out=loading)
    pending = data_dir / "raw" / mirror.PENDING_NAME
    record = (data_dir / "raw" / mirror.RECORD_NAME).read_text(encoding="utf-8")
    assert not any(day in record for day in NEW_DAYS)  # (the first day's copies recorded again)
    kept = {"raw/" + pending.name, "raw/" + mirror.RECORD_NAME}
    after = _lake(config)
    assert {path: after[path] for path in after.keys() - kept} == {
        path: lake[path] for path in lake.keys() - kept
    }
    assert loaded_files_rows(config) == loaded
    loading.run = working
    copy = mirror._copy
    copied: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mirror, "_copy", _noting_copies(copy, copied))
        result = ingest(config, compact_fan_out=compacting, load_fan_out=loading)
    assert result.compaction is not None
    assert (result.compaction.partitions, result.compaction.from_load) == (6, 4)
    assert _of_new_days(copied) == [] and not pending.exists()
