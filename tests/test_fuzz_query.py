"""Fuzzing `gpufleet query` and the analyst API's `.sql()` with SQL text: each statement
returns a result, or is one `gpufleet: error:` line (GpufleetError from the API); none
writes a file, inside the data directory or out of it (the read-only sandbox)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.analyst import ReadOnlyWarehouse
from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.ingest import ingest
from tests.fuzzing import assert_kept, examples, run_cli, tree, written_outside
from tests.test_ingest import DAY1, sample, write_samples


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a data directory with a warehouse of three samples (`data`), and
    a file outside it that no query may read or change."""
    root = tmp_path_factory.mktemp("query")
    config = Config(data_dir=root / "data")
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10), sample(20)])
    ingest(config, compact=False)
    (root / "outside.csv").write_text("secret\n42\n")
    return root


TABLES = ("samples", "quarantined_files", "build_state.loaded_files", "nowhere", "main.samples")
EXPRESSIONS = (
    "1",
    "'text'",
    "null",
    "interval 3 day",
    "'294247-01-10'::date",
    "'infinity'::timestamp",
    "union_value(k := 1)",
    "1::uhugeint",
    "'101'::bit",
    "map {1: 2}",
    "[1, 2]::int[2]",
    "{'a': 1}",
    "1e308 * 10",
    "1 / 0",
    "'x'::int",
    "ts",
    "gpu_util_pct",
    "processes",
    "$1",
    "?",
    "current_setting('enable_external_access')",
    "read_text('../outside.csv')",
    "getenv('HOME')",
    "'\\x00'",
    "chr(0)",
    "repeat('x', 100000)",
)
STATEMENTS = (
    "select {e} as c",
    "select {e} as c from {t}",
    "select count(*), {e} from {t} group by all",
    "from {t} where {e} limit 3",
    "describe {t}",
    "summarize {t}",
    "explain select {e}",
    "show tables",
    "pragma {e}",
    "copy (select {e}) to '../outside.csv'",
    "attach '../outside.csv' as x",
    "set enable_external_access = true",
    "install httpfs",
    "create table x as select {e}",
    "select {e}; select 1",
    "call {e}",
    "",
)
statements = st.builds(
    lambda form, e, t, tail: form.format(e=e, t=t) + tail,
    st.sampled_from(STATEMENTS),
    st.sampled_from(EXPRESSIONS),
    st.sampled_from(TABLES),
    st.sampled_from(("", ";", " -- c", "/*", "'", ")", "\n", "\x00")),
)
# "-" reads the statement from stdin; "--" keeps one starting with "-" an argument.
queries = st.one_of(statements, st.text(max_size=80)).filter(lambda q: q.strip() != "-")


@given(query=queries)
@examples(60)
def test_query_command_answers_or_refuses_in_one_line(root: Path, query: str) -> None:
    before = tree(root)
    outcome = run_cli(["--data-dir", str(root / "data"), "query", "--", query])
    assert_kept(outcome, names=("query",))
    assert tree(root) == before, written_outside(root, root / "data", before)


@given(query=queries)
@examples(25)
def test_analyst_sql_returns_a_frame_or_raises_the_projects_error(root: Path, query: str) -> None:
    before = tree(root)
    warehouse = ReadOnlyWarehouse(Config(data_dir=root / "data"))
    try:
        warehouse.sql(query)
    except GpufleetError as exc:
        assert "\n" not in str(exc)
    assert tree(root) == before


@pytest.mark.parametrize(
    ("query", "fmt"),
    [
        ("select 'infinity'::timestamp as t", []),
        ("select '294247-01-10'::date as d", ["--csv"]),
        ("select 1 as n, '-infinity'::timestamptz as t", ["--json"]),
    ],
)
def test_a_time_polars_cannot_write_as_text_is_one_line(
    root: Path, query: str, fmt: list[str]
) -> None:
    """Found by the fuzz test above: polars aborted the process (a Rust panic) printing a
    date beyond its calendar, DuckDB's 'infinity' included."""
    outcome = run_cli(["--data-dir", str(root / "data"), "query", query, *fmt])
    assert outcome.status == 1
    assert "too far from today to write as text" in outcome.stderr
    assert "::varchar" in outcome.stderr


def test_a_time_polars_cannot_write_as_text_still_goes_to_parquet(root: Path) -> None:
    out = root / "out" / "t.parquet"
    out.parent.mkdir(exist_ok=True)
    query = "select 'infinity'::timestamp as t"
    outcome = run_cli(["--data-dir", str(root / "data"), "query", query, "-o", str(out)])
    assert outcome.status == 0 and out.is_file()


@pytest.mark.parametrize(
    "expression",
    ["interval 3 day", "union_value(k := 1)", "[interval 1 day]", "{'a': interval 1 day}"],
)
@pytest.mark.parametrize("where", ["", " where false"])
def test_a_type_polars_has_none_of_is_the_projects_error(
    root: Path, expression: str, where: str
) -> None:
    """Found by the fuzz test above: polars' ComputeError escaped `.sql()` as a traceback,
    and with no row, or nested in a list or a struct, polars aborted the process."""
    warehouse = ReadOnlyWarehouse(Config(data_dir=root / "data"))
    with pytest.raises(GpufleetError, match=r"polars cannot hold .*::varchar"):
        warehouse.sql(f"select {expression} as c from quarantined_files{where}")
    assert warehouse.sql(f"select ({expression})::varchar as c").height == 1
    run = ["--data-dir", str(root / "data"), "query", f"select {expression} as c{where}"]
    assert run_cli(run).status == 1
