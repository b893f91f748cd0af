"""What every ingest pays however few its files: the statements it runs on the warehouse
and the connections it opens besides its write transaction's."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import duckdb
import pytest

from gpufleet.config import Config
from gpufleet.warehouse.base.catalog import has_table
from gpufleet.warehouse.base.raw_tables import ensure_raw_tables
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import write_transaction
from gpufleet.warehouse.refs import tables as ref_tables
from gpufleet.warehouse.refs.records import HostRule, References, TeamContact, UserTeam
from gpufleet.warehouse.refs.tables import ensure_contact_tables, replace_references
from tests.scans import ScanCounter
from tests.test_ingest import DAY1, sample, write_samples

REFERENCES = References(
    users=(UserTeam("alice", "ml", "alice@example.org"),),
    teams=(TeamContact("ml", "lead@example.org", ()),),
    hosts=(HostRule(1, "h*", "ml"),),
)


def _replaced(config: Config, tmp_path: Path, references: References) -> tuple[bool, list[str]]:
    """`replace_references` in a write transaction: whether a modelled row changed, and the
    statements it ran."""
    with write_transaction(config) as con:
        counter = ScanCounter(con, tmp_path / "profile.json")
        changed = replace_references(counter, references)  # type: ignore[arg-type]
        con.execute("pragma disable_profiling")
    return changed, counter.statements


def test_empty_reference_tables_are_not_compared(config: Config, tmp_path: Path) -> None:
    """Most of the ten tables are empty and stay so: one statement counts their rows and
    none of them is compared with its file's rows (each comparison was three statements)."""
    _replaced(config, tmp_path, References())  # creates the contact tables
    changed, statements = _replaced(config, tmp_path, References())
    assert not changed
    assert not [statement for statement in statements if "except all" in statement]
    # the contact tables' catalog query, build_state.allocation_files' DDL, the counts
    assert len(statements) == 3, statements


def test_only_the_tables_with_rows_are_compared(config: Config, tmp_path: Path) -> None:
    changed, statements = _replaced(config, tmp_path, REFERENCES)
    assert changed
    assert not [statement for statement in statements if "except all" in statement]
    changed, statements = _replaced(config, tmp_path, REFERENCES)
    assert not changed
    compared = {
        table
        for statement in statements
        if "except all" in statement
        for table in re.findall(r"from (\w+) where not", statement)
    }
    assert compared == {"ref_users", "ref_hosts", "ref_user_emails", "ref_teams"}
    changed, _ = _replaced(config, tmp_path, References())
    assert changed
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        left = con.execute(
            "select (from ref_users select count(*)), (from ref_hosts select count(*)),"
            " (from ref_user_emails select count(*)), (from ref_teams select count(*))"
        ).fetchone()
    assert left == (0, 0, 0, 0)


def test_documented_contact_tables_cost_one_catalog_query(tmp_path: Path) -> None:
    """ref_user_emails and ref_teams are created and documented once; afterwards only a
    comment that differs is written again (each is a write of the catalog)."""
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        ensure_contact_tables(con)
        counter = ScanCounter(con, tmp_path / "profile.json")
        ensure_contact_tables(counter)  # type: ignore[arg-type]
        assert len(counter.statements) == 1
        con.execute("comment on column ref_teams.cc is 'an older text'")
        counter = ScanCounter(con, tmp_path / "profile.json")
        ensure_contact_tables(counter)  # type: ignore[arg-type]
        assert [s.split(" is ")[0] for s in counter.statements[1:]] == [
            'comment on column ref_teams."cc"'
        ]
        (comment,) = con.execute(
            "select comment from duckdb_columns()"
            " where table_name = 'ref_teams' and column_name = 'cc'"
        ).fetchone() or (None,)
    assert comment == "Addresses copied on the team's mail (may be empty)."


def test_no_allocation_file_no_look_into_the_published_warehouse(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The published warehouse is opened before the write transaction only to learn which
    allocation and job files it has read: not when there is none to look up."""
    opened: list[str] = []
    plain = ref_tables.connect_read_only

    def counted(config: Config) -> duckdb.DuckDBPyConnection:
        opened.append("read-only")
        return plain(config)

    monkeypatch.setattr(ref_tables, "connect_read_only", counted)
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    ingest(config, today=dt.date(2026, 11, 16))
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [sample(10)])
    assert ingest(config, today=dt.date(2026, 11, 16)).files_loaded == 1
    assert opened == []
    allocations = config.allocations_dir / "slurm.csv"
    allocations.parent.mkdir(parents=True)
    allocations.write_text(
        "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
        "7,alice,,h1,0,2026-11-16T08:00:00Z,2026-11-16T10:00:00Z\n"
    )
    assert ingest(config, today=dt.date(2026, 11, 16)).allocations == 1
    assert ref_tables.published_allocation_files(config) == {
        "raw/allocations/slurm.csv": (allocations.stat().st_size, allocations.stat().st_mtime_ns)
    }
    assert opened == ["read-only", "read-only"]


def test_a_new_warehouse_gets_its_raw_tables_without_looking_each_up(tmp_path: Path) -> None:
    """Whether a table `samples` (an old release's) or notices_sent is there comes from the
    one catalog query that finds the raw tables missing, not from a query each."""
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        counter = ScanCounter(con, tmp_path / "profile.json")
        ensure_raw_tables(counter)  # type: ignore[arg-type]
        assert not [s for s in counter.statements if "information_schema" in s]
        assert has_table(con, "samples_stored") and has_table(con, "notices_sent")
        assert has_table(con, "samples", or_view=True) and not has_table(con, "samples")


def test_a_warehouse_of_the_release_before_the_lake_has_its_samples_moved(tmp_path: Path) -> None:
    """Its `samples` table (found in that catalog query) becomes samples_stored, its rows
    loaded before any publish (load 0), and `samples` the view."""
    with duckdb.connect(str(tmp_path / "w.duckdb")) as con:
        ensure_raw_tables(con)
        con.execute("drop view samples")
        con.execute("alter table samples_stored rename to samples")
        con.execute("alter table samples drop column load_id")
        con.execute(
            "insert into samples (ts, interval_s, host, gpu_index, gpu_uuid, gpu_name, status)"
            " values (timestamptz '2026-11-16 09:00:00+00', 10, 'h1', 0, 'GPU-a', 'H100', 'ok')"
        )
        ensure_raw_tables(con)
        assert not has_table(con, "samples") and has_table(con, "samples", or_view=True)
        assert con.execute("select host, load_id from samples_stored").fetchall() == [("h1", 0)]
        assert con.execute("select gpu_uuid from samples").fetchall() == [("GPU-a",)]
