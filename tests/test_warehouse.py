"""write_transaction: copy, work, atomic publish; failures and other writers leave it alone."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.publish import (
    catch_up,
    connect_read_only,
    current_generation,
    lock_path,
    slots,
    write_transaction,
)
from gpufleet.warehouse.publish.log import LOG_KEPT
from gpufleet.warehouse.publish.slot_files import same_file, slot_paths
from tests.scans import ScanCounter

pytestmark = pytest.mark.fleet


def _leftovers(config: Config) -> list[str]:
    return sorted(p.name for p in config.data_dir.iterdir() if p.name.endswith((".tmp", ".wal")))


def test_creates_the_warehouse_with_the_raw_tables(config: Config) -> None:
    with write_transaction(config) as con:
        con.execute("create table marker as select 1 as x")
    assert config.warehouse_path.is_file()
    with connect_read_only(config) as con:
        tables = {
            row[0] for row in con.execute("select table_name from duckdb_tables()").fetchall()
        }
        views = {
            row[0]
            for row in con.execute(
                "select view_name from duckdb_views() where not internal"
            ).fetchall()
        }
    assert {"samples_stored", "loaded_files", "quarantined_files", "ref_users", "marker"} <= tables
    assert "samples" in views  # samples_stored and the lake (gpufleet/warehouse/lake/samples.py)
    assert _leftovers(config) == []


def test_changes_are_published_and_accumulate(config: Config) -> None:
    with write_transaction(config) as con:
        con.execute("create table t (x integer)")
        con.execute("insert into t values (1)")
    with write_transaction(config) as con:
        con.execute("insert into t values (2)")
    with connect_read_only(config) as con:
        assert con.execute("select list(x order by x) from t").fetchone() == ([1, 2],)


def test_a_failure_leaves_the_warehouse_byte_for_byte_unchanged(config: Config) -> None:
    with write_transaction(config) as con:
        con.execute("create table t as select range as x from range(1000)")
    before = config.warehouse_path.read_bytes()
    inode = config.warehouse_path.stat().st_ino

    with pytest.raises(RuntimeError, match="boom"), write_transaction(config) as con:
        con.execute("delete from t")
        con.execute("create table other (y integer)")
        raise RuntimeError("boom")

    assert config.warehouse_path.read_bytes() == before
    assert config.warehouse_path.stat().st_ino == inode
    assert _leftovers(config) == []
    with connect_read_only(config) as con:
        assert con.execute("select count(*) from t").fetchone() == (1000,)


def test_a_failure_creating_a_new_warehouse_leaves_none(config: Config) -> None:
    with pytest.raises(duckdb.Error), write_transaction(config) as con:
        con.execute("select * from no_such_table")
    assert not config.warehouse_path.exists()
    assert _leftovers(config) == []


def test_an_open_reader_keeps_its_snapshot_and_a_new_reader_sees_the_publish(
    config: Config, tmp_path: Path
) -> None:
    with write_transaction(config) as con:
        con.execute("create table t as select 1 as x")
    # A second path to the same file, so DuckDB's per-process instance cache does not
    # hand the new reader the old reader's database.
    alias = tmp_path / "alias.duckdb"
    reader = connect_read_only(config)
    try:
        with write_transaction(config) as con:
            con.execute("insert into t values (2)")
        assert reader.execute("select count(*) from t").fetchone() == (1,)
        os.link(config.warehouse_path, alias)
        with duckdb.connect(str(alias), read_only=True) as fresh:
            assert fresh.execute("select count(*) from t").fetchone() == (2,)
    finally:
        reader.close()


def test_nested_transactions_publish_once_at_the_outer_exit(config: Config) -> None:
    with write_transaction(config) as outer:
        outer.execute("create table t (x integer)")
        with write_transaction(config) as inner:
            assert inner is outer
            inner.execute("insert into t values (1)")
        assert not config.warehouse_path.exists()  # nothing published yet
    with connect_read_only(config) as con:
        assert con.execute("select count(*) from t").fetchone() == (1,)


def test_a_second_writer_waits_for_the_lock_and_then_gives_up(config: Config) -> None:
    config.data_dir.mkdir(parents=True)
    with open(lock_path(config), "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        expected = r"\.warehouse\.lock: another gpufleet"
        with (
            pytest.raises(GpufleetError, match=expected),
            write_transaction(config, lock_timeout_s=0.5) as con,
        ):
            con.execute("create table never (x integer)")
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    assert not config.warehouse_path.exists()


def test_stale_copies_of_a_killed_writer_are_removed(config: Config) -> None:
    config.data_dir.mkdir(parents=True)
    stale = config.data_dir / ".warehouse.duckdb.123.abcd.tmp"
    stale.write_bytes(b"half a database")
    spill = config.data_dir / ".warehouse.duckdb.123.abcd.tmp.tmp"  # DuckDB's spill directory
    spill.mkdir()
    (spill / "duckdb_temp_storage-0.tmp").write_bytes(b"spilled")
    with write_transaction(config):
        pass
    assert not stale.exists()
    assert not spill.exists()


def test_the_published_file_keeps_the_warehouse_permissions(config: Config) -> None:
    with write_transaction(config):
        pass
    config.warehouse_path.chmod(0o640)
    with write_transaction(config) as con:
        con.execute("create table t (x integer)")
    assert config.warehouse_path.stat().st_mode & 0o777 == 0o640


def test_connect_read_only_without_a_warehouse_says_what_to_do(config: Config) -> None:
    with pytest.raises(GpufleetError, match="run 'gpufleet ingest' first"):
        connect_read_only(config)


def test_read_only_connection_cannot_write(config: Config) -> None:
    with write_transaction(config):
        pass
    with connect_read_only(config) as con, pytest.raises(duckdb.Error):
        con.execute("create table t (x integer)")


def _values(config: Config) -> list[int]:
    with connect_read_only(config) as con:
        return [row[0] for row in con.execute("select x from t order by x").fetchall()]


def _write_twice(config: Config) -> None:
    """Table t with 1, then 2: two publishes, so both slot files exist."""
    for x in (1, 2):
        with write_transaction(config) as con:
            con.execute("create table if not exists t (x integer)")
            con.execute("insert into t values (?)", [x])


def test_writes_alternate_between_two_files_each_caught_up_in_place(config: Config) -> None:
    """No copy per write: the file the last-but-one publish wrote is brought up to date."""
    inodes = []
    for x in range(1, 6):
        with write_transaction(config) as con:
            if x == 1:
                con.execute("create table t (x integer)")
            con.execute("insert into t values (?)", [x])
            con.execute(
                "insert into samples_stored (ts, interval_s, host, gpu_index, gpu_uuid, status, "
                "load_id) values (to_timestamp(?), 10, 'h', 0, 'GPU-1', 'ok', ?)",
                [x, current_generation(con)],
            )
        inodes.append(config.warehouse_path.stat().st_ino)
        assert _values(config) == list(range(1, x + 1))
    assert inodes[2:] == inodes[:-2] and inodes[0] != inodes[1]
    with connect_read_only(config) as con:
        assert con.execute("select count(*) from samples").fetchone() == (5,)
        assert con.execute("select value from build_state.generation").fetchone() == (5,)
    assert _leftovers(config) == []
    assert not list(config.data_dir.glob("*.dirty"))


def test_a_slot_caught_up_in_place_has_the_published_rows_copies_nulls_and_lists_included(
    config: Config,
) -> None:
    """The catch-up writes only the rows that differ: a row repeated, a NULL (equal to no
    NULL in SQL) and a list must still come out exactly as published."""
    writes = [
        "create table u (a integer, b varchar, c varchar[]);"
        "insert into u values (1, 'x', ['p']), (1, 'x', ['p']), (2, null, null)",
        "delete from u where a = 2; insert into u values (3, null, []), (4, 'z', null)",
        "delete from u where rowid = (select min(rowid) from u where a = 1);"
        "insert into u values (3, null, [])",
        "update u set b = 'y' where a = 3 and rowid = (select min(rowid) from u where a = 3)",
        "insert into u select * from u",
        "delete from u where a = 3",
    ]
    expected = duckdb.connect()
    inodes = set()
    for statements in writes:
        expected.execute(statements)
        with write_transaction(config) as con:
            con.execute(statements)
        inodes.add(config.warehouse_path.stat().st_ino)
        with connect_read_only(config) as con:
            published = con.execute("select * from u order by all").fetchall()
        assert published == expected.execute("select * from u order by all").fetchall()
    assert len(inodes) == 2  # every write after the second caught a slot up in place


def stale_slot(config: Config) -> Path:
    """The slot the last write did not publish: the one the next write catches up."""
    first, second = slot_paths(config.warehouse_path)
    return second if same_file(config.warehouse_path, first) else first


def tables_written(statements: list[str]) -> set[str]:
    """The tables a catch-up's statements delete rows from or insert rows into."""
    return {
        statement.split()[2]
        for statement in statements
        if statement.startswith(("delete from ", "insert into "))
    }


def test_a_catch_up_rewrites_only_the_tables_that_differ(config: Config, tmp_path: Path) -> None:
    """A table copied whole that holds the published rows already (most tables, most
    publishes: the references, the allocations, loaded_files) is compared, not rewritten,
    and a mart the publish log names no rows of is not replayed: each is statements that
    every write of a cycle would pay."""
    with write_transaction(config) as con:
        con.execute("create table u (a integer); create table v (a integer)")
        con.execute("insert into u values (1); insert into v values (1)")
        con.execute("create table team_daily as select date '2026-11-16' as day")
    with write_transaction(config):
        pass  # both slots exist now: the next write catches the other one up in place
    with write_transaction(config) as con:
        con.execute("insert into v values (2)")
    stale = stale_slot(config)
    with duckdb.connect(str(stale)) as con:
        counter = ScanCounter(con, tmp_path / "profile.json")
        assert catch_up.catch_up(counter, config.warehouse_path, rebuild=False)  # type: ignore[arg-type]
        written = tables_written(counter.statements)
        assert con.execute("select * from v order by all").fetchall() == [(1,), (2,)]
    assert "main.v" in written
    assert "main.u" not in written
    assert not [statement for statement in counter.statements if "_sync_keys" in statement]
    assert not written & {"main.ref_users", "main.allocations", "main.loaded_files"}


def test_a_catch_up_compares_the_tables_copied_whole_in_two_statements(
    config: Config, tmp_path: Path
) -> None:
    """Their rows counted in one statement, those with as many rows as the published ones
    compared in one more, not a statement per table: every write of a cycle pays them."""
    with write_transaction(config) as con:
        for n in range(6):
            con.execute(f"create table t{n} as select {n} as a")
    with write_transaction(config):
        pass  # both slots exist now: the next write catches the other one up in place
    with write_transaction(config) as con:
        con.execute("insert into t1 values (7)")  # more rows
        con.execute("update t2 set a = 8")  # as many, not the same
    stale = stale_slot(config)
    with duckdb.connect(str(stale)) as con:
        counter = ScanCounter(con, tmp_path / "profile.json")
        assert catch_up.catch_up(counter, config.warehouse_path, rebuild=False)  # type: ignore[arg-type]
        compared = [
            statement
            for statement in counter.statements
            if statement.startswith("select") and "_published.main.t0" in statement
        ]
        written = tables_written(counter.statements)
        rows = [con.execute(f"select * from t{n} order by all").fetchall() for n in range(6)]
    assert len(compared) == 2
    assert all("_published.main.t5" in statement for statement in compared)
    # the two databases' tables and columns listed in one query too
    assert sum("from duckdb_columns()" in statement for statement in counter.statements) == 1
    assert {"main.t1", "main.t2"} <= written
    assert not written & {f"main.t{n}" for n in (0, 3, 4, 5)}
    assert rows == [[(0,)], [(1,), (7,)], [(8,)], [(3,)], [(4,)], [(5,)]]


def test_a_slot_whose_tables_differ_from_the_published_ones_is_not_caught_up(
    config: Config,
) -> None:
    """A column or table more in the published warehouse: the file is copied instead."""
    with write_transaction(config) as con:
        con.execute("create table u (a integer)")
    with write_transaction(config):
        pass  # both slots exist now
    for change in ("alter table u add column b integer", "create table w (a integer)"):
        with write_transaction(config) as con:
            con.execute(change)
        stale = stale_slot(config)
        with duckdb.connect(str(stale)) as con:
            assert not catch_up.catch_up(con, config.warehouse_path, rebuild=False)


def test_the_publish_log_in_a_slot_caught_up_in_place_is_the_published_one(
    config: Config,
) -> None:
    """Each publish logs its rows under its generation and the log forgets the oldest
    (LOG_KEPT); a slot caught up in place gains the later ones and forgets the same."""
    inodes = set()
    for _ in range(LOG_KEPT + 6):
        with write_transaction(config) as con:
            generation = current_generation(con)
            con.execute(
                "insert into build_state.replaced (generation, table_name, key, day) "
                "select ?, 'gpu_daily', 'day', date '2026-11-16' + k::integer from range(?) r(k)",
                [generation, generation % 3],  # some publishes replace nothing
            )
        inodes.add(config.warehouse_path.stat().st_ino)
        kept = range(max(1, generation - LOG_KEPT), generation + 1)
        with connect_read_only(config) as con:
            logged = con.execute(
                "select generation, count(*) from build_state.replaced group by 1 order by 1"
            ).fetchall()
        assert logged == [(g, g % 3) for g in kept if g % 3]
    assert len(inodes) == 2


def test_a_reader_in_this_process_on_the_older_file_makes_the_writer_copy(
    config: Config,
) -> None:
    _write_twice(config)
    reader = connect_read_only(config)  # the file of write 2
    held = config.warehouse_path.stat().st_ino
    try:
        with write_transaction(config) as con:
            con.execute("insert into t values (3)")  # in place, into write 1's file
        with write_transaction(config) as con:
            con.execute("insert into t values (4)")  # write 2's file is held: a copy
        assert config.warehouse_path.stat().st_ino != held
        assert reader.execute("select count(*) from t").fetchone() == (2,)
    finally:
        reader.close()
    assert _values(config) == [1, 2, 3, 4]


def test_a_reader_in_another_process_on_the_older_file_makes_the_writer_copy(
    config: Config,
) -> None:
    _write_twice(config)
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time\n"
            "con = duckdb.connect(sys.argv[1], read_only=True)\n"
            "print(con.execute('select count(*) from t').fetchone()[0], flush=True)\n"
            "sys.stdin.readline()\n"
            "print(con.execute('select count(*) from t').fetchone()[0], flush=True)\n",
            str(config.warehouse_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdin is not None
        assert reader.stdout.readline().strip() == "2"
        held = config.warehouse_path.stat().st_ino
        with write_transaction(config) as con:
            con.execute("insert into t values (3)")
        with write_transaction(config) as con:
            con.execute("insert into t values (4)")  # the reader's file is locked: a copy
        assert config.warehouse_path.stat().st_ino != held
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "2"
    finally:
        reader.stdin.close() if reader.stdin else None
        reader.wait(timeout=30)
    assert _values(config) == [1, 2, 3, 4]


def test_a_failed_in_place_write_leaves_the_published_warehouse_alone(config: Config) -> None:
    _write_twice(config)
    with pytest.raises(RuntimeError), write_transaction(config) as con:
        con.execute("insert into t values (99)")
        raise RuntimeError("boom")
    assert _values(config) == [1, 2]
    with write_transaction(config) as con:  # the half-written file is not trusted again
        con.execute("insert into t values (3)")
    assert _values(config) == [1, 2, 3]


def test_a_backfill_since_the_other_file_is_copied_not_replayed(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catch_up, "_WHOLE_TABLE_LIMIT", 3)
    _write_twice(config)
    before = config.warehouse_path.stat().st_ino
    tried: list[str] = []
    catch_up_table = catch_up._catch_up_table

    def recorded(con: duckdb.DuckDBPyConnection, name: str, *args: Any, **kwargs: Any) -> bool:
        tried.append(name)
        return catch_up_table(con, name, *args, **kwargs)

    monkeypatch.setattr(catch_up, "_catch_up_table", recorded)
    with write_transaction(config) as con:  # in place (nothing gained since)
        con.execute(
            "insert into samples_stored (ts, interval_s, host, gpu_index, gpu_uuid, status, "
            "load_id) select to_timestamp(k), 10, 'h', 0, 'GPU-1', 'ok', ? from range(10) as r(k)",
            [current_generation(con)],
        )
    after_backfill = config.warehouse_path.stat().st_ino
    assert after_backfill != before
    tried.clear()
    with write_transaction(config) as con:  # 10 samples behind: a copy, not in place
        con.execute("insert into t values (3)")
    assert tried == ["main.samples_stored"]  # given up before copying or replaying any table
    assert config.warehouse_path.stat().st_ino not in (before, after_backfill)
    assert _values(config) == [1, 2, 3]
    with connect_read_only(config) as con:
        assert con.execute("select count(*) from samples").fetchone() == (10,)


def test_a_writers_connection_is_memory_capped_before_the_catch_up(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB's default is 80 % of the machine; a writer is capped from its first statement,
    the catch-up included, whether it copies the file or works in a slot in place."""
    capped = duckdb.connect()
    capped.execute("set memory_limit = ?", [slots.WRITER_MEMORY_LIMIT])
    cap = capped.execute("select current_setting('memory_limit')").fetchone()
    default = duckdb.connect().execute("select current_setting('memory_limit')").fetchone()
    assert cap != default
    seen: list[object] = []
    real_catch_up = slots.catch_up

    def recorded(con: duckdb.DuckDBPyConnection, *args: Any, **kwargs: Any) -> bool:
        seen.append(con.execute("select current_setting('memory_limit')").fetchone())
        return real_catch_up(con, *args, **kwargs)

    monkeypatch.setattr(slots, "catch_up", recorded)
    for x in (1, 2, 3):  # a new file, a copy, then a slot caught up in place
        with write_transaction(config) as con:
            seen.append(con.execute("select current_setting('memory_limit')").fetchone())
            con.execute("create table if not exists t (x integer)")
            con.execute("insert into t values (?)", [x])
    assert len(seen) == 4 and set(seen) == {cap}
    assert _values(config) == [1, 2, 3]


def test_without_hard_links_every_write_copies_and_publishes(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some file systems (FAT, some FUSE mounts) have no hard links: no slots, a copy each."""

    def no_links(source: object, target: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    for x in (1, 2, 3):
        with write_transaction(config) as con:
            con.execute("create table if not exists t (x integer)")
            con.execute("insert into t values (?)", [x])
    assert _values(config) == [1, 2, 3]
    assert not list(config.data_dir.glob(".warehouse.duckdb.slot-*"))
    assert _leftovers(config) == []
