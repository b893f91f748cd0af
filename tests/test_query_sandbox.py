"""The analyst's connection reads the warehouse and its lake and no other file, whatever the
statement: `gpufleet.sandbox.connect_sandboxed`, tried here past the statement filter, then
`gpufleet query` and `gpufleet.open(...).sql()` on top of it."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import gpufleet
from gpufleet.cli import main
from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.sandbox import connect_sandboxed
from gpufleet.warehouse.base.raw_tables import (
    QUOTED_SAMPLE_COLUMNS,
    SAMPLE_COLUMNS,
    ensure_raw_tables,
)
from gpufleet.warehouse.lake.samples import refresh_samples_view
from gpufleet.warehouse.publish import connect_read_only
from tests import report_fixtures as fx
from tests.templates import made_once

pytestmark = pytest.mark.fleet

SECRET = "hunter2-do-not-print"
LAKE_DAY = dt.date(2026, 11, 9)
# A glob character in the host: the lake's file is read as the file it is, not a pattern.
LAKE_FILE = f"raw/samples/date={LAKE_DAY}/host=node-[1]/compacted-0.parquet"
STORED_ROWS = 6  # 2 GPUs x 3 samples of Nov 10, kept in the warehouse file
LAKE_ROWS = 4  # 2 GPUs x 2 samples of Nov 9, evicted to the lake


def _add_samples(con: duckdb.DuckDBPyConnection, day: dt.date, per_gpu: int) -> None:
    con.execute(
        """
        insert into samples_stored by name
        select
            $day::timestamptz + to_minutes(minute) as ts,
            60.0 as interval_s,
            'node-[1]' as host,
            gpu::usmallint as gpu_index,
            'GPU-' || gpu as gpu_uuid,
            'ok' as status,
            0 as load_id,
        from range($per_gpu) as m(minute), range(2) as g(gpu)
        """,
        {"day": day, "per_gpu": per_gpu},
    )


def _data_dir(data_dir: Path) -> None:
    """The hand-made marts, plus samples: Nov 10's in the warehouse file, Nov 9's evicted
    to one lake file (as a build evicts them)."""
    fx.make_warehouse(data_dir)
    fx.write_config(data_dir)
    config = load_config(data_dir=data_dir)
    lake_file = data_dir / LAKE_FILE
    lake_file.parent.mkdir(parents=True)
    with duckdb.connect(str(config.warehouse_path)) as con:
        ensure_raw_tables(con)
        _add_samples(con, LAKE_DAY, LAKE_ROWS // 2)
        con.execute(
            f"copy (select {QUOTED_SAMPLE_COLUMNS} from samples_stored) to $path (format parquet)",
            {"path": str(lake_file)},
        )
        con.execute("delete from samples_stored")
        con.execute(
            "insert into build_state.lake_files (path, day, row_count, evicted_at, sample_columns)"
            " values ($path, $day, $rows, now(), $held)",
            {"path": LAKE_FILE, "day": LAKE_DAY, "rows": LAKE_ROWS, "held": len(SAMPLE_COLUMNS)},
        )
        _add_samples(con, LAKE_DAY + dt.timedelta(days=1), STORED_ROWS // 2)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    """The hand-made marts, plus samples: Nov 10's in the warehouse file, Nov 9's evicted
    to one lake file (as a build evicts them), a copy of the data directory made once per
    test process (tests/templates.py); the working directory outside the data dir, and a
    secret in the environment."""
    data_dir = made_once("test_query_sandbox._data_dir", _data_dir, tmp_path / "data")
    fx.write_config(data_dir)  # it names the data directory
    config = load_config(data_dir=data_dir)
    with duckdb.connect(str(config.warehouse_path)) as con:
        refresh_samples_view(con, config)  # the view names the lake file by its path
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.csv").write_text(f"password\n{SECRET}\n")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("GPUFLEET_SMTP_PASSWORD", SECRET)
    return config


def _snapshot(root: Path) -> dict[str, str]:
    """Every file and folder under `root`, a file with a hash of its bytes."""
    return {
        str(path.relative_to(root)): (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "folder"
        )
        for path in sorted(root.rglob("*"))
    }


@pytest.fixture
def unchanged(config: Config, tmp_path: Path) -> Iterator[None]:
    """The test leaves every file under tmp_path (data dir, cwd, outside) as it was:
    none written, none changed, the warehouse and the lake file included."""
    before = _snapshot(tmp_path)
    yield
    assert _snapshot(tmp_path) == before


def _outside(tmp_path: Path, name: str) -> str:
    return str(tmp_path / "outside" / name)


# Each past the statement filter (or not a single statement it would see): the sandbox
# alone must refuse it or make it harmless.
def _bypasses(tmp_path: Path) -> list[str]:
    data = tmp_path / "data"
    lake = data / LAKE_FILE
    return [
        "explain analyze copy (select 'echo pwned') to 'out.sh' (header false, quote '')",
        f"explain analyze copy (select 1 as a) to '{_outside(tmp_path, 'x.csv')}'",
        f"copy (select 1 as a) to '{_outside(tmp_path, 'x.csv')}'",
        f"copy (select 1 as a) to '{lake}' (format parquet, use_tmp_file false)",
        f"copy (select 1 as a) to '{lake.parent / 'extra.parquet'}' (format parquet)",
        f"copy (select 1 as a) to '{data / 'raw'}' (format parquet, partition_by (a))",
        f"export database '{_outside(tmp_path, 'export')}'",
        f"attach '{_outside(tmp_path, 'other.duckdb')}' as other",
        f"attach '{data / 'other.duckdb'}' as other",
        "install httpfs",
        "load httpfs",
        f"load '{_outside(tmp_path, 'evil.duckdb_extension')}'",
        "set enable_external_access = true",
        "reset enable_external_access",
        "set lock_configuration = false",
        "set allowed_directories = ['/']",
        f"set temp_directory = '{_outside(tmp_path, 'spill')}'",
        f"set log_query_path = '{_outside(tmp_path, 'queries.log')}'",
        "pragma enable_profiling = 'json'",
        f"pragma profiling_output = '{_outside(tmp_path, 'profile.json')}'",
        f"set profiling_output = '{_outside(tmp_path, 'profile.json')}'",
        "checkpoint",
        "call checkpoint()",
        "force checkpoint",
        f"select * from read_csv('{_outside(tmp_path, 'secret.csv')}')",
        f"select * from read_parquet('{_outside(tmp_path, '*.parquet')}')",
        f"select * from read_blob('{lake}')",
        "select * from read_text('/proc/self/environ')",
        "select * from glob('/etc/*')",
        f"select * from glob('{data}/**')",
    ]


# What reads a file outside the warehouse or changes a setting: refused outright.
_REFUSED = ("read_", "glob(", "copy", "export", "attach", "install", "load", "set ", "reset")


def test_each_bypass_is_refused_or_harmless(
    config: Config, tmp_path: Path, unchanged: None
) -> None:
    for statement in _bypasses(tmp_path):
        with connect_sandboxed(config) as con:
            try:
                relation = con.sql(statement)
                rows = [] if relation is None else relation.fetchall()
            except duckdb.Error as exc:
                message = str(exc)
                assert "disabled" in message or "locked" in message, (statement, message)
                continue
            assert not statement.lower().startswith(_REFUSED), (statement, rows)
            assert SECRET not in repr(rows), statement
            # the same connection still reads only what it read before
            assert con.execute("select count(*) from samples").fetchone() == (
                STORED_ROWS + LAKE_ROWS,
            )


def test_profiling_cannot_be_turned_on_nor_sent_to_a_file(
    config: Config, tmp_path: Path, unchanged: None
) -> None:
    with connect_sandboxed(config) as con:
        for statement in (
            f"pragma profiling_output = '{_outside(tmp_path, 'profile.json')}'",
            "pragma enable_profiling = 'json'",
            "pragma enable_profiling",
        ):
            with pytest.raises(duckdb.Error, match="locked"):
                con.execute(statement)
        assert con.execute("select count(*) > 0 from team_daily").fetchone() == (True,)
        setting = con.execute("select current_setting('enable_external_access')").fetchone()
        assert setting == (False,)


def test_a_sandbox_leaves_other_connections_of_the_process_alone(config: Config) -> None:
    """A file opened twice in one process shares one DuckDB and its settings: the sandbox
    opens none of them, so a reader opened before it, or after, keeps its file access."""
    lake = config.data_dir / LAKE_FILE
    with connect_read_only(config) as reader, connect_sandboxed(config) as con:
        assert con.execute("select count(*) from samples").fetchone() == (STORED_ROWS + LAKE_ROWS,)
        reader.execute("set memory_limit = '1GB'")
        count = reader.execute("select count(*) from read_parquet($p)", {"p": str(lake)})
        assert count.fetchone() == (LAKE_ROWS,)
    with connect_read_only(config) as reader:
        assert reader.execute("select count(*) from samples").fetchone() == (
            STORED_ROWS + LAKE_ROWS,
        )


def test_the_sandbox_spills_to_a_directory_of_its_own(config: Config, tmp_path: Path) -> None:
    """DuckDB may spill a large sort, only to a temporary directory of the connection's own
    (outside the data directory and the working directory), gone once it closes."""
    with connect_sandboxed(config) as con:
        row = con.execute("select current_setting('temp_directory')").fetchone()
        assert row is not None
        spill = Path(row[0])
        assert spill.name.startswith("gpufleet-query-") and spill.is_dir()
        assert not spill.is_relative_to(tmp_path)
    assert not spill.exists()


def test_samples_from_the_warehouse_and_the_lake_as_a_direct_reader_sees_them(
    config: Config, unchanged: None
) -> None:
    sql = f"select {QUOTED_SAMPLE_COLUMNS} from samples order by ts, gpu_uuid"
    with connect_read_only(config) as reader:
        expected = reader.execute(sql).fetchall()
        columns = reader.execute("describe samples").fetchall()
    assert len(expected) == STORED_ROWS + LAKE_ROWS
    with connect_sandboxed(config) as con:
        assert con.sql(sql).fetchall() == expected
        assert con.sql("describe samples").fetchall() == columns
        days = con.sql(
            "select distinct ts::date from samples where ts < $d order by 1",
            params={"d": dt.datetime(2026, 11, 10, tzinfo=dt.UTC)},
        ).fetchall()
        assert days == [(LAKE_DAY,)]


def test_every_table_reads_from_the_api_and_the_cli(
    config: Config, capsys: pytest.CaptureFixture[str], unchanged: None
) -> None:
    warehouse = gpufleet.open(config.data_dir)
    names = warehouse.tables()["name"].to_list()
    assert {"samples", "team_daily", "team_weekly", "idle_episodes"} <= set(names)
    with connect_read_only(config) as reader:
        expected = {
            name: reader.execute(f'select count(*) from "{name}"').fetchone()[0]  # type: ignore[index]
            for name in names
        }
    assert expected["samples"] == STORED_ROWS + LAKE_ROWS
    for name, count in expected.items():
        assert warehouse.sql(f'select count(*) as n from "{name}"')["n"].to_list() == [count]
        capsys.readouterr()
        argv = ["--data-dir", str(config.data_dir), "query", f'select count(*) as n from "{name}"']
        assert main([*argv, "--csv"]) == 0
        assert capsys.readouterr().out == f"n\n{count}\n", name


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        (
            "explain analyze copy (select 'echo pwned') to 'out.sh' (header false, quote '')",
            "Permission Error",
        ),
        ("select * from read_text('/proc/self/environ')", "Permission Error"),
        ("select * from glob('/etc/*')", "Permission Error"),
        ("pragma enable_profiling", "locked"),
        ("call enable_logging()", "locked"),
    ],
)
def test_the_cli_and_the_api_refuse_in_one_line(
    config: Config,
    statement: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
    unchanged: None,
) -> None:
    assert main(["--data-dir", str(config.data_dir), "query", statement]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and SECRET not in captured.err
    assert captured.err.startswith("gpufleet: error: query: ") and captured.err.count("\n") == 1
    assert message in captured.err
    with pytest.raises(GpufleetError, match=message) as raised:
        gpufleet.open(config.data_dir).sql(statement)
    assert "\n" not in str(raised.value) and SECRET not in str(raised.value)
    assert not Path("out.sh").exists()


def test_a_missing_lake_file_fails_samples_alone(config: Config) -> None:
    (config.data_dir / LAKE_FILE).unlink()
    warehouse = gpufleet.open(config.data_dir)
    assert warehouse.team_weekly().height > 0
    with pytest.raises(
        GpufleetError, match=r"compacted-0\.parquet: this compacted file .* is missing"
    ):
        warehouse.sql("select count(*) from samples")


def test_checkpoints_leave_the_warehouse_as_it_was(config: Config, unchanged: None) -> None:
    warehouse = gpufleet.open(config.data_dir)
    for statement in ("checkpoint", "call checkpoint()", "force checkpoint"):
        warehouse.sql(statement)  # harmless: the warehouse is attached read-only
