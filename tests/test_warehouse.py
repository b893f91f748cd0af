"""write_transaction: copy, work, atomic publish; failures and other writers leave it alone."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import duckdb
import pytest

from flows.warehouse import connect_read_only, lock_path, write_transaction
from gpufleet.config import Config
from gpufleet.errors import GpufleetError


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(data_dir=tmp_path / "data")


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
    assert {"samples", "loaded_files", "quarantined_files", "ref_users", "marker"} <= tables
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
