"""An ingest killed right after a compaction swap, before `loaded_files` records it
(`gpufleet/warehouse/lake/interrupted.py`): the next ingest records the compacted file in
place of the collector files it replaced, and ends where an uninterrupted ingest does."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from gpufleet.config import Config
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.lake import compact
from gpufleet.warehouse.publish import connect_read_only
from tests.test_compact import DAY, loaded_files_rows, midnight, sample_rows, write_and_record
from tests.test_incremental import assert_same_rows, mart_table

pytestmark = pytest.mark.fleet

NEXT = DAY + dt.timedelta(days=1)


def _write(config: Config, name: str, minutes: int, uuids: tuple[str, ...]) -> None:
    table = sample_rows(midnight(DAY) + dt.timedelta(minutes=minutes), 30, uuids)
    write_and_record(config, duckdb.connect(), DAY, name, table, record=False)


def _lake(config: Config) -> dict[str, bytes]:
    """Every file under raw/samples, by path, with its bytes."""
    return {
        path.relative_to(config.data_dir).as_posix(): path.read_bytes()
        for path in sorted(config.samples_dir.rglob("*"))
        if path.is_file()
    }


def _marts(config: Config) -> dict[str, pa.Table]:
    with connect_read_only(config) as con:
        names = [
            name
            for (name,) in con.execute(
                "select table_name from duckdb_tables() where schema_name = 'main'"
                " and table_name not in ('loaded_files')"
                " union all select view_name from duckdb_views()"
                " where schema_name = 'main' and not internal"
            ).fetchall()
        ]
        return {name: mart_table(con, name) for name in sorted(names)}


def _dies(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("killed after the swap")


@pytest.mark.parametrize(
    "before",
    [
        "collector files",
        "compacted and a late file",
        "a late file new to it",
        "compacted, and a late file new to it",
    ],
)
def test_a_swap_its_ingest_did_not_live_to_record_is_recorded_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: str
) -> None:
    """A host-day loaded by an earlier ingest (its collector files; or its compacted file
    and a late file; or its collector files, or its compacted file, and a late file the
    killed ingest loads) is compacted by an ingest killed right after the swap, before
    `loaded_files` records it.
    The next ingest loads nothing again (but the late file's samples, lost with the killed
    ingest's transaction, from the compacted file), and leaves loaded_files, the lake's
    files and the marts as an uninterrupted ingest does; the host-day, compacted, is never
    compacted again."""
    source = Config(data_dir=tmp_path / "source")
    _write(source, "a.parquet", 0, ("GPU-a", "GPU-b"))
    _write(source, "b.parquet", 10, ("GPU-a", "GPU-b"))
    ingest(source, today=DAY)  # loaded, not compacted: its day is today
    if before == "compacted and a late file":
        ingest(source, today=NEXT)  # compacted from its files (not from the load: no lake)
        _write(source, "late.parquet", 0, ("GPU-c",))
        ingest(source, today=NEXT, compact=False)
    if before == "compacted, and a late file new to it":
        ingest(source, today=NEXT)
    if before.endswith("a late file new to it"):  # loaded by the killed ingest, then lost
        _write(source, "late.parquet", 0, ("GPU-c",))
    folder = source.samples_dir / f"date={DAY}" / "host=node-1"
    recorded = [row[0].rsplit("/", 1)[-1] for row in loaded_files_rows(source)]
    new = {"late.parquet"} if before.endswith("a late file new to it") else set()
    assert recorded == sorted(p.name for p in folder.iterdir() if p.name not in new)

    ended = {}
    for then in ("uninterrupted", "killed"):
        config = Config(data_dir=tmp_path / then)
        shutil.copytree(source.data_dir, config.data_dir)
        if then == "killed":
            with monkeypatch.context() as patched:
                patched.setattr(compact, "_record", _dies)
                with pytest.raises(RuntimeError, match="killed"):
                    ingest(config, today=NEXT)
            compacted = config.samples_dir / f"date={DAY}" / "host=node-1"
            assert [p.name for p in compacted.iterdir()] == [f"compacted-{DAY}.parquet"]
        else:
            ingest(config, today=NEXT)
        after = ingest(config, today=NEXT)
        if new and then == "killed":  # its samples, lost with the killed ingest's rollback
            assert (after.files_loaded, after.samples_loaded) == (1, 30)
        else:
            assert after.files_loaded == 0 and after.samples_loaded == 0, then
        assert after.compaction is not None and after.compaction.partitions == 0, then
        build(config)
        ended[then] = loaded_files_rows(config), _lake(config), _marts(config)
    (files, lake, marts), (expected_files, expected_lake, expected_marts) = (
        ended["killed"],
        ended["uninterrupted"],
    )
    assert files == expected_files
    assert len(files) == 1 and files[0][0].endswith(f"compacted-{DAY}.parquet")
    assert lake.keys() == expected_lake.keys()
    assert lake == expected_lake
    assert marts.keys() == expected_marts.keys()
    for name, table in marts.items():
        assert_same_rows(table, expected_marts[name], name)
