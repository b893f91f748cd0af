"""Each table of the warehouse catches up the one way `way_of` names (publish/catch_up.py),
pinned here by kind: a new raw table, mart or build-state table fails until its way is
chosen and written down below, and the comparison of the tables copied whole and the
catch-up itself read that one choice."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from gpufleet.config import Config
from gpufleet.warehouse.build.incremental.run import INCREMENTAL_MARTS
from gpufleet.warehouse.build.kept import DAY_MARTS, kept_table
from gpufleet.warehouse.build.kept import RUN_MARTS as KEPT_RUN_MARTS
from gpufleet.warehouse.publish import catch_up, write_transaction
from gpufleet.warehouse.publish.catch_up import Way, way_of
from tests.scans import ScanCounter
from tests.templates import made_once
from tests.test_data_tests import _built_full
from tests.test_warehouse import stale_slot, tables_written

pytestmark = pytest.mark.fleet

# Rows appended with a growing load_id: those of later loads are added.
APPENDED = {"main.samples_stored"}
# The marts whose replaced rows incremental builds log: those rows are replayed. Every mart
# an incremental build replaces but alloc_only_daily (small: copied whole).
REPLAYED = {f"main.{mart}" for mart in INCREMENTAL_MARTS} - {"main.alloc_only_daily"}
# The publish log itself: the later generations are added.
LOG = {"build_state.replaced"}
# The rows builds keep (closed months, expired days): changed only by a full build's publish.
KEPT = {kept_table(mart) for mart in (*DAY_MARTS, *KEPT_RUN_MARTS)}
# Small tables, compared with the published ones and given their rows where they differ.
COPIED = {
    # raw tables, references and the records of loads, notices and closed months
    "main.allocations",
    "main.closed_periods",
    "main.loaded_files",
    "main.notices_sent",
    "main.quarantined_files",
    "main.ref_hosts",
    "main.ref_hosts_dated",
    "main.ref_prices",
    "main.ref_prices_dated",
    "main.ref_users",
    "main.ref_users_dated",
    "main.slurm_jobs",
    # a mart an incremental build replaces and logs, small enough to be compared whole
    "main.alloc_only_daily",
    # the build's state
    "build_state.allocations_built",
    "build_state.build_steps",
    "build_state.builds",
    "build_state.dated_references_built",
    "build_state.full_builds",
    "build_state.generation",
    "build_state.hosts",
    "build_state.jobs",
    "build_state.lake_files",
    "build_state.marts_tested",
    "build_state.recompute_from",
    "build_state.retention",
    "build_state.series",
    "build_state.slurm_jobs_built",
    "build_state.statuses",
    "build_state.teams",
    "build_state.users",
    "build_state.watermark",
}
PINNED = APPENDED | REPLAYED | LOG | KEPT | COPIED


def _tables(warehouse: Path) -> set[str]:
    """The tables a catch-up brings up to date (catch_up._columns' schemas)."""
    with duckdb.connect(str(warehouse), read_only=True) as con:
        rows = con.execute(
            """
            select schema_name || '.' || table_name from duckdb_tables()
            where schema_name in ('main', 'build_state') and not internal
            """
        ).fetchall()
    return {str(name) for (name,) in rows}


def test_every_table_of_a_built_warehouse_has_its_way_pinned(tmp_path: Path) -> None:
    """A warehouse ingested and built in full holds every raw table, mart and build-state
    table (the kept tables appear with the first closed month or expired day)."""
    made_once("test_data_tests._built_full", _built_full, tmp_path)
    tables = _tables(Config(data_dir=tmp_path).warehouse_path) | KEPT
    assert tables - PINNED == set(), "choose how catch_up brings these up (way_of), pin it here"
    assert PINNED - tables == set(), "pinned here, in no built warehouse"


def test_each_kind_of_table_catches_up_its_way() -> None:
    ways = {name: way_of(name, rebuild=False) for name in PINNED}
    assert ways == {
        **dict.fromkeys(APPENDED, Way.APPEND),
        **dict.fromkeys(REPLAYED, Way.REPLAY),
        **dict.fromkeys(LOG, Way.ADD_GENERATIONS),
        **dict.fromkeys(KEPT, Way.LEAVE),
        **dict.fromkeys(COPIED, Way.COPY),
    }
    # before a full build, which replaces every mart, the logged marts are left as they
    # are, and the kept tables (which only such a build's publish changes) are copied
    rebuilt = {name: way_of(name, rebuild=True) for name in PINNED}
    assert rebuilt == {
        **ways,
        **dict.fromkeys(REPLAYED, Way.LEAVE),
        **dict.fromkeys(KEPT, Way.COPY),
    }
    # a table no build knows (one made by hand) is copied whole
    assert way_of("main.anything_else", rebuild=False) is Way.COPY


def test_the_replayed_marts_are_the_logged_ones_an_incremental_build_replaces() -> None:
    assert {f"main.{table}" for table in catch_up.LOGGED_TABLES} == REPLAYED
    assert "main.alloc_only_daily" in {f"main.{mart}" for mart in INCREMENTAL_MARTS}


def test_a_catch_up_compares_and_copies_the_tables_whose_way_is_copy(tmp_path: Path) -> None:
    """The tables counted for the comparison are those `way_of` copies, and a table copied
    whole that changed is written; no other way's table is compared."""
    made_once("test_data_tests._built_full", _built_full, tmp_path)
    config = Config(data_dir=tmp_path)
    with write_transaction(config):
        pass  # both slots exist now: the next write catches the other one up in place
    with write_transaction(config) as con:
        con.execute("insert into ref_users values ('bob', 'ml')")
    stale = stale_slot(config)
    tables = _tables(stale)
    with duckdb.connect(str(stale)) as con:
        counter = ScanCounter(con, tmp_path / "profile.json")
        assert catch_up.catch_up(counter, config.warehouse_path, rebuild=False)  # type: ignore[arg-type]
    counted = [
        set(re.findall(r"\(select count\(\*\) from _published\.([\w.]+)\)", statement))
        for statement in counter.statements
        if statement.startswith("select 0, (select count(*)")
    ]
    written = tables_written(counter.statements)
    assert counted == [{name for name in tables if way_of(name, rebuild=False) is Way.COPY}]
    assert "main.ref_users" in written
