"""The objects a Dask ingest leaves in the store (`gpufleet/integrations/pending.py`,
docs/dask.md "What the pipeline host does not copy"), the store real (SeaweedFS): a crash
between steps loses no sample and loads none twice, and the pending list is read safely."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import GpufleetError
from gpufleet.integrations import mirror
from gpufleet.integrations.pending import Pending, fetch_pending, read_pending, write_pending
from gpufleet.storage.s3 import S3Location, s3_filesystem
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.lake import compact
from gpufleet.warehouse.publish import connect_read_only
from tests.s3_stack import BUCKET, S3Store
from tests.test_compact import loaded_files_rows
from tests.test_dask import _compacted
from tests.test_dask_s3 import (
    NEW_DAYS,
    _configured,
    _in_process,
    _in_the_store,
    _noting_copies,
    _of_new_days,
    fleet,
    store,
)

pytest.importorskip("prefect_dask")
pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.fleet]

__all__ = ["fleet", "store"]  # the fixtures, shared with test_dask_s3.py


def _new(path: str) -> bool:
    return path.split("/")[2] in NEW_DAYS


def _listed_pending(config: Any) -> list[Any]:
    mirror.mirror_raw_location(config, defer=True)
    return read_pending(config)


def _quarantined(config: Any) -> list[tuple[str, str]]:
    with connect_read_only(config) as con:
        return con.execute("select path, reason from quarantined_files").fetchall()


def test_a_crash_after_the_swap_neither_copies_back_nor_quarantines(
    fleet: Path, store: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ingest that dies after the compacted files of the objects left in the store are
    swapped in, before they are recorded as copied: the next ingest, on Dask or embedded
    (`[compute] dask` switched off since), does not copy them back beside the compacted
    file (to quarantine as changed), and loads the compacted files as a clean ingest does."""
    source, url = _in_the_store(fleet, store, tmp_path, None)  # (a prefix of its own)
    results = {}
    for then in ("clean", "dask", "embedded"):
        data_dir = tmp_path / then
        shutil.copytree(source, data_dir)
        config = _configured(data_dir, store, url, "")
        compacting, loading = _in_process(config, [])
        if then != "clean":
            settle = compact.settle_pending

            def dies(*args: Any) -> None:
                raise RuntimeError("the pipeline host died")

            monkeypatch.setattr(compact, "settle_pending", dies)
            with pytest.raises(RuntimeError, match="died"):
                ingest(config, compact_fan_out=compacting, load_fan_out=loading)
            monkeypatch.setattr(compact, "settle_pending", settle)
        if then == "embedded":
            result = ingest(config)
        else:
            result = ingest(config, compact_fan_out=compacting, load_fan_out=loading)
        assert result.compaction is not None
        results[then] = _quarantined(config), loaded_files_rows(config), _compacted(config)
        assert not (data_dir / "raw" / mirror.PENDING_NAME).exists()
    clean = results["clean"]
    for then in ("dask", "embedded"):
        crashed = results[then]
        assert crashed[0] == clean[0] == [], then
        # The new days' files and rows as a clean ingest's (the first day's copies are no
        # objects left in the store).
        assert [row for row in crashed[1] if _new(row[0])] == [
            row for row in clean[1] if _new(row[0])
        ], then
        assert {p: rows for p, (_, rows) in crashed[2].items() if _new(p)} == {
            p: rows for p, (_, rows) in clean[2].items() if _new(p)
        }, then


def test_another_ingests_failed_mirror_leaves_this_ingests_pending_list(
    fleet: Path, store: S3Store, tmp_path: Path
) -> None:
    """Two ingests at once: while one loads the objects it left in the store, another's
    mirror fails (its store unreachable). The first still finds its pending list (to
    compact and record them), and ends as an ingest alone does."""
    source, url = _in_the_store(fleet, store, tmp_path, None)  # (a prefix of its own)
    results = {}
    for meanwhile in (False, True):
        data_dir = tmp_path / ("meanwhile" if meanwhile else "alone")
        shutil.copytree(source, data_dir)
        config = _configured(data_dir, store, url, "")
        compacting, loading = _in_process(config, [])
        working = loading.run

        def other_ingest(sent: Any, working: Any = working, config: Any = config) -> Any:
            unreachable = s3_filesystem(endpoint_url="http://127.0.0.1:9", max_attempts=1)
            with pytest.raises(GpufleetError, match="cannot read the raw files"):
                mirror.mirror_raw_location(config, filesystem=unreachable, defer=True)
            return working(sent)

        if meanwhile:
            loading.run = other_ingest
        result = ingest(config, compact_fan_out=compacting, load_fan_out=loading)
        assert result.compaction is not None
        results[meanwhile] = (
            result.compaction.partitions,
            _quarantined(config),
            [row[:-1] for row in loaded_files_rows(config)],
            {p: rows for p, (_, rows) in _compacted(config).items()},
        )
        assert not (data_dir / "raw" / mirror.PENDING_NAME).exists()
    assert results[True] == results[False]


HOSTILE_KEYS = (
    "samples/date=2026-10-06/host=gpu-a/../../../../../escaped.parquet",
    "samples/date=2026-10-06/host=../escaped.parquet",
    "samples/date=2026-10-06/host=gpu-a/..%2F..%2Fescaped.parquet",
    "samples/date=2026-10-06//host=gpu-a/escaped.parquet",
    "samples/date=2026-10-06/host=gpu-a/x/../../../escaped.parquet",
)


def _outside(tmp_path: Path, data_dir: Path) -> list[str]:
    """The files below `tmp_path` outside `data_dir/raw` (its configuration aside)."""
    return sorted(
        p.relative_to(tmp_path).as_posix()
        for p in tmp_path.rglob("*")
        if p.is_file() and not p.is_relative_to(data_dir / "raw") and p.name != "gpufleet.toml"
    )


def test_hostile_keys_never_leave_raw(store: S3Store, tmp_path: Path) -> None:
    """Objects whose keys hold `..`, `//` or an escaped slash (those the client or the
    store accepts): listed as pending or copied, neither the pending list nor a copy made
    for the pipeline host names a path outside `<data_dir>/raw/`."""
    url = f"s3://{BUCKET}/{tmp_path.name}"
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    location = S3Location.parse(url)
    for key in HOSTILE_KEYS:
        try:
            with fs.open_output_stream(location.path(key)) as out:
                out.write(b"not parquet")
        except (OSError, ValueError):  # (pyarrow's ArrowInvalid: a `..` or empty part)
            continue  # refused by the client or the store: nothing to list
    data_dir = tmp_path / "data" / "deep" / "dir"
    data_dir.mkdir(parents=True)
    config = _configured(data_dir, store, url, "")
    mirror.mirror_raw_location(config, defer=True)
    entries = read_pending(config)
    assert entries  # (`host=..` is a folder's name like any other)
    fetch_pending(config, [entry.path for entry in entries])
    assert _outside(tmp_path, data_dir) == []


def test_a_damaged_pending_list_is_read_safely(store: S3Store, tmp_path: Path) -> None:
    """A pending list with a torn line, bytes that are no UTF-8, and a line whose path
    leads out of raw/ (the file edited or damaged): the good line is read, the others are
    left out (their objects listed again by the next mirror), and nothing is copied
    outside `<data_dir>/raw/`."""
    url = f"s3://{BUCKET}/{tmp_path.name}"
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    location = S3Location.parse(url)
    key = "samples/date=2026-10-06/host=gpu-a/a.parquet"
    with fs.open_output_stream(location.path(key)) as out:
        out.write(b"not parquet")
    data_dir = tmp_path / "data" / "deep" / "dir"
    data_dir.mkdir(parents=True)
    config = _configured(data_dir, store, url, "")
    mirror.mirror_raw_location(config, defer=True)
    pending = data_dir / "raw" / mirror.PENDING_NAME
    (good,) = pending.read_text(encoding="utf-8").splitlines()
    line = json.loads(good)
    escaping = [
        {**line, "path": "raw/samples/date=2026-10-06/host=gpu-a/../../../../../../b.parquet"},
        {**line, "path": str(tmp_path / "absolute.parquet")},
        {**line, "path": "raw/../c.parquet"},
    ]
    pending.write_bytes(
        b"\n".join(
            [
                good.encode(),
                good.encode()[:40],  # torn
                b"\xff\xfe" + good.encode(),  # no UTF-8
                *(json.dumps(item).encode() for item in escaping),
            ]
        )
        + b"\n"
    )
    entries = read_pending(config)
    assert [entry.path for entry in entries] == [line["path"]]
    fetch_pending(config, [item["path"] for item in [line, *escaping]])
    assert _outside(tmp_path, data_dir) == []
    assert (data_dir / line["path"]).read_bytes() == b"not parquet"


def test_an_object_deleted_after_the_listing_fails_the_ingest_in_one_line(
    fleet: Path, store: S3Store, tmp_path: Path
) -> None:
    """An object left in the store deleted between the mirror's listing and the workers'
    read: the ingest fails in one line naming it, before anything is published, and the
    next ingest loads the others, still without copying them."""
    source, url = _in_the_store(fleet, store, tmp_path, None)  # (a prefix of its own)
    data_dir = tmp_path / "deleted"
    shutil.copytree(source, data_dir)
    config = _configured(data_dir, store, url, "")
    loaded = loaded_files_rows(config)
    compacting, loading = _in_process(config, [])
    working = loading.run
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    key = min(
        entry.key for entry in _listed_pending(config) if entry.key.split("/")[1] == NEW_DAYS[0]
    )

    def deleting(sent: Any) -> Any:
        fs.delete_file(S3Location.parse(url).path(key))
        return working(sent)

    loading.run = deleting
    with pytest.raises(GpufleetError) as failed:
        ingest(config, compact_fan_out=compacting, load_fan_out=loading)
    assert key in str(failed.value) and "\n" not in str(failed.value)
    assert loaded_files_rows(config) == loaded
    loading.run = working
    result = ingest(config, compact_fan_out=compacting, load_fan_out=loading)
    assert result.compaction is not None and _quarantined(config) == []
    assert not any(key.rsplit("/", 1)[1] in row[0] for row in loaded_files_rows(config))


def test_another_ingests_mirror_meanwhile_keeps_the_listed_times(
    fleet: Path, store: S3Store, tmp_path: Path
) -> None:
    """Two ingests at once: while one loads the objects it left in the store, another's
    mirror lists them again. Each keeps the time it was first listed (as a copy keeps its
    copy's time), so the first ingest still compacts them from the workers' files, copies
    none of them, and ends as an ingest alone does."""
    source, url = _in_the_store(fleet, store, tmp_path, None)  # (a prefix of its own)
    results = {}
    copy = mirror._copy
    for meanwhile in (False, True):
        data_dir = tmp_path / ("meanwhile" if meanwhile else "alone")
        shutil.copytree(source, data_dir)
        config = _configured(data_dir, store, url, "")
        compacting, loading = _in_process(config, [])
        working = loading.run

        def other_ingest(sent: Any, working: Any = working, config: Any = config) -> Any:
            (other,) = mirror.mirror_raw_location(config, defer=True)
            assert other.pending > 0
            return working(sent)

        if meanwhile:
            loading.run = other_ingest
        copied: list[str] = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(mirror, "_copy", _noting_copies(copy, copied))
            result = ingest(config, compact_fan_out=compacting, load_fan_out=loading)
        assert result.compaction is not None
        results[meanwhile] = (
            result.compaction.partitions,
            result.compaction.from_load,
            _of_new_days(copied),
            _quarantined(config),
            [row[:-1] for row in loaded_files_rows(config)],
            {p: rows for p, (_, rows) in _compacted(config).items()},
        )
        assert not (data_dir / "raw" / mirror.PENDING_NAME).exists()
    assert results[True] == results[False]
    assert results[True][2] == []


def test_two_writers_of_the_pending_list_at_once(tmp_path: Path) -> None:
    """Two ingests write the pending list at once (one's mirror, the other's record of the
    objects it compacted or copied): neither fails, and the list is always one of theirs,
    whole. Each had its temporary file of one name: one renamed the other's, half
    written, and the other's rename then failed (FileNotFoundError)."""
    raw_dir = tmp_path / "raw"
    raw_dir.mkdir()

    def entries(count: int) -> list[Pending]:
        return [
            Pending(
                location=f"s3://{BUCKET}/fleet",
                key=f"samples/date=2026-10-06/host=gpu-a/{n}.parquet",
                path=f"raw/samples/date=2026-10-06/host=gpu-a/{n}.parquet",
                size_bytes=n,
                mtime_ns=n,
                listed_ns=n,
            )
            for n in range(count)
        ]

    def write(count: int) -> int:
        write_pending(raw_dir, entries(count))
        return len((raw_dir / mirror.PENDING_NAME).read_text().splitlines())

    assert _two_at_once(write) <= {50, 400}
    assert not [p.name for p in raw_dir.iterdir() if p.name != mirror.PENDING_NAME]


def test_two_mirrors_rewriting_the_copy_record_at_once(tmp_path: Path) -> None:
    """Two ingests' mirrors rewrite the record of copied objects at once (the mirror runs
    before the writer's lock): neither fails and the record is always one of theirs, whole.
    The record's new file had one temporary name: one mirror renamed the other's, half
    written, and the other's rename failed with a traceback (FileNotFoundError)."""
    raw_dir = tmp_path / "raw"
    raw_dir.mkdir()
    location = f"s3://{BUCKET}/fleet"

    def rewrite(count: int) -> int:
        records = {
            location: {
                f"samples/date=2026-10-06/host=gpu-a/{n}.parquet": mirror.Copied(n, n, f"e{n}")
                for n in range(count)
            }
        }
        mirror._rewrite_record(raw_dir / mirror.RECORD_NAME, records)
        return len(mirror._read_record(raw_dir / mirror.RECORD_NAME)[0][location])

    assert _two_at_once(rewrite) <= {50, 400}
    assert [p.name for p in raw_dir.iterdir()] == [mirror.RECORD_NAME]


def _two_at_once(write: Callable[[int], int]) -> set[int]:
    """`write(50)` and `write(400)` each 200 times, in two threads at once; what they read
    back (each call returns the number of entries it then read). Fails if a call raised."""
    failures: list[BaseException] = []
    read: set[int] = set()

    def repeat(count: int) -> None:
        try:
            for _ in range(200):
                read.add(write(count))
        except BaseException as exc:
            failures.append(exc)

    writers = [threading.Thread(target=repeat, args=(count,)) for count in (50, 400)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert failures == []
    return read
