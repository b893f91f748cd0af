"""The marts' data tests (sql/marts/_docs.toml `data_tests`): every build runs them before
it publishes, and a failing one names the table, the test and a row, publishing nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.build.data_tests import parse_data_tests, run_data_tests
from gpufleet.warehouse.build.models import SQL_DIR
from gpufleet.warehouse.build.run import build, build_models
from gpufleet.warehouse.publish import write_transaction
from tests.templates import made_once

pytestmark = pytest.mark.fleet


def _add_idle_samples(config: Config, gpu_uuid: str, load_id: int) -> None:
    """Six idle 10 s samples of alice's process on `gpu_uuid`: one idle episode."""
    with write_transaction(config) as con:
        if load_id == 1:
            con.execute("insert into ref_users values ('alice', 'ml')")
        con.execute(
            """
            insert into samples_stored (ts, interval_s, host, gpu_index, gpu_uuid, gpu_name,
                                        status, gpu_util_pct, processes, load_id)
            select timestamptz '2026-11-16 10:00:00+00' + to_seconds(10 * k), 10, 'node1', $index,
                   $uuid, 'NVIDIA H100 80GB HBM3', 'ok', 0,
                   [{'pid': 1, 'user': 'alice', 'used_mem_bytes': 1, 'job_id': 'j1'}], $load
            from range(6) as r(k)
            """,
            {"uuid": gpu_uuid, "index": load_id - 1, "load": load_id},
        )


def _published(config: Config) -> tuple[object, ...]:
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        return (
            con.execute("select count(*) from samples_attributed_rows").fetchall(),
            con.execute("select * from idle_episodes order by all").fetchall(),
            con.execute("select * from team_daily order by all").fetchall(),
            con.execute("select * from build_state.watermark").fetchall(),
        )


def _built_full(data_dir: Path) -> None:
    """GPU-A's idle samples in a new warehouse (Europe/Berlin), built in full: the data
    tests pass on it."""
    (data_dir / "gpufleet.toml").write_text('timezone = "Europe/Berlin"\n', encoding="utf-8")
    config = Config(data_dir=data_dir)
    _add_idle_samples(config, "GPU-A", 1)
    assert build(config).mode == "full"


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """GPU-A's samples built in full: a copy of the data directory made once per test
    process (tests/templates.py)."""
    made_once("test_data_tests._built_full", _built_full, tmp_path)
    return Config(data_dir=tmp_path)


def test_a_broken_row_stops_the_build_and_publishes_nothing(config: Config) -> None:
    with write_transaction(config) as con:  # a row broken by hand, as a bug might
        con.execute("update idle_episodes set waste_usd = -1")
    _add_idle_samples(config, "GPU-B", 2)
    before = _published(config)

    with pytest.raises(GpufleetError) as failed:
        build(config)  # incremental: GPU-A's episode is not recomputed

    message = str(failed.value)
    assert "\n" not in message
    assert "data test failed" in message
    assert "idle_episodes: waste_usd >= 0: 1 rows, e.g. waste_usd=-1.0, episode_id=" in message
    assert "gpu_uuid='GPU-A'" in message
    assert _published(config) == before  # GPU-B's samples are not in the published marts


def test_a_full_build_runs_the_data_tests_before_it_publishes(
    config: Config, tmp_path: Path
) -> None:
    before = _published(config)
    sql_dir = tmp_path / "sql"
    shutil.copytree(SQL_DIR, sql_dir)
    docs = sql_dir / "marts" / "_docs.toml"
    text = docs.read_text(encoding="utf-8")
    # a test the rows fail: a minute of samples is no GPU-hour
    failing = '{ expression = "gpu_hours >= 1" }, { unique = ["day", "cluster", "team"] }'
    text = text.replace('{ unique = ["day", "cluster", "team"] }', failing, 1)
    docs.write_text(text, encoding="utf-8")

    with (
        pytest.raises(GpufleetError, match=r"team_daily: gpu_hours >= 1: 1 rows, e\.g\. gpu_h"),
        write_transaction(config, rebuild=True) as con,
    ):
        build_models(con, config, full=True, sql_dir=sql_dir)

    assert _published(config) == before


def test_each_kind_of_test_names_its_failing_row() -> None:
    con = duckdb.connect()
    con.execute(
        "create table t as select * from (values (1, 'a', 'process'), (1, null, 'oops')) "
        "as v(k, name, attributed_by)"
    )
    source = Path("_docs.toml")
    for entry, expected in (
        ({"unique": ["k"]}, r"t: unique\(k\): 1 keys repeated, e\.g\. k=1, repeats=2"),
        ({"not_null": "name"}, r"t: not_null\(name\): 1 rows, e\.g\. name=None, k=1"),
        (
            {"accepted_values": {"column": "attributed_by", "values": ["process", "none"]}},
            r"t: accepted_values\(attributed_by\): 1 rows, e\.g\. attributed_by='oops', k=1",
        ),
        ({"expression": "k > 1"}, r"t: k > 1: 2 rows, e\.g\. k=1"),
    ):
        with pytest.raises(GpufleetError, match=expected):
            run_data_tests(con, parse_data_tests("t", [entry], source))
    run_data_tests(con, parse_data_tests("t", [{"expression": "k = 1"}], source))  # passes


def test_a_test_the_docs_file_cannot_hold_is_named() -> None:
    with pytest.raises(ValueError, match=r"_docs\.toml: \[t\] data_tests: each test is one of"):
        parse_data_tests("t", [{"unique_together": ["k"]}], Path("_docs.toml"))
    with pytest.raises(ValueError, match=r"accepted_values = "):
        parse_data_tests("t", [{"accepted_values": ["a"]}], Path("_docs.toml"))
