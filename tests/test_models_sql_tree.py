"""The models' dependencies and relation renames, from their syntax trees (sqlglot)."""

from __future__ import annotations

import duckdb
import pytest

from gpufleet.warehouse.build import sql_tree
from gpufleet.warehouse.build.models import discover_models
from gpufleet.warehouse.build.sql_tree import macro_reads, relations_read, rename_relations

# Every model and the models it reads, by hand from sql/ (a new model, or a model reading
# another, is added here on purpose).
EXPECTED_GRAPH: dict[str, set[str]] = {
    "alloc_only_daily": {"gpu_team_daily", "stg_allocations", "stg_slurm_jobs", "stg_users"},
    "gpu_daily": {"gpu_team_daily"},
    "gpu_health_daily": {"gpu_hourly"},
    "gpu_hourly": {"samples_attributed_rows"},
    "gpus_to_drain": {"gpu_health_daily"},
    "gpu_team_daily": {"gpu_hourly", "idle_episodes", "int_gpu_prices", "int_idle_episode_days"},
    "host_daily": {"gpu_team_daily"},
    "idle_episodes": {"int_idle_episodes"},
    "int_allocation_segments": {
        "int_hosts",
        "int_jobs",
        "int_local_days",
        "int_teams",
        "int_users",
        "stg_allocations",
        "stg_users",
    },
    "int_gpu_prices": {"int_hosts", "int_series_ids", "stg_prices"},
    "int_host_teams": {"int_hosts", "int_teams", "stg_hosts"},
    "int_hosts": {"int_teams", "stg_hosts", "stg_samples"},
    "int_idle_episode_days": {"int_run_pieces"},
    "int_idle_episodes": {"int_gpu_prices", "int_idle_episode_days"},
    "int_job_teams": {"int_jobs", "int_teams", "stg_slurm_jobs"},
    "int_jobs": {"int_process_owners", "stg_allocations", "stg_slurm_jobs"},
    "int_local_days": {"int_hosts", "stg_samples"},
    "int_process_owners": {"stg_samples"},
    "int_samples_attributed": {
        "int_allocation_segments",
        "int_host_teams",
        "int_hosts",
        "int_job_teams",
        "int_series_ids",
        "int_statuses",
        "int_teams",
        "int_user_teams",
        "int_users",
        "stg_samples",
    },
    "int_samples_sequenced": {"int_local_days", "int_samples_attributed"},
    "int_series_ids": {"stg_samples"},
    "int_statuses": {"stg_samples"},
    "int_teams": {"stg_allocations", "stg_hosts", "stg_slurm_jobs", "stg_users"},
    "int_run_pieces": {"samples_attributed_rows"},
    "int_thermal_events": {"int_run_pieces"},
    "int_user_teams": {"int_hosts", "int_teams", "int_users", "stg_users"},
    "int_users": {"int_process_owners", "int_teams", "stg_allocations", "stg_users"},
    "job_efficiency": {"gpu_hourly", "idle_episodes", "run_pieces"},
    "run_pieces": {"int_run_pieces"},
    "samples_attributed": {"samples_attributed_rows"},
    "samples_attributed_rows": {"int_samples_sequenced"},
    "stg_allocations": set(),
    "stg_hosts": set(),
    "stg_prices": set(),
    "stg_samples": set(),
    "stg_slurm_jobs": set(),
    "stg_users": set(),
    "team_daily": {"alloc_only_daily", "gpu_team_daily"},
    "team_weekly": {"alloc_only_daily", "gpu_team_daily"},
    "thermal_events": {"int_thermal_events"},
}


def test_the_dependency_graph_of_every_model() -> None:
    models = discover_models()
    assert {name: set(model.depends_on) for name, model in models.items()} == EXPECTED_GRAPH


def test_a_model_reads_models_of_its_layer_or_those_before() -> None:
    models = discover_models()
    layers = ("staging", "intermediate", "marts")
    for name, model in models.items():
        for other in model.depends_on - {"samples_attributed_rows"}:  # the window, stored
            assert layers.index(models[other].layer) <= layers.index(model.layer), (name, other)


def test_an_intermediate_reading_a_mart_is_refused(tmp_path) -> None:
    for layer, name, sql in (
        ("marts", "totals", "select 1 as n"),
        ("intermediate", "int_more", "select n + 1 as n from totals"),
    ):
        (tmp_path / layer).mkdir()
        (tmp_path / layer / f"{name}.sql").write_text(sql, encoding="utf-8")
    with pytest.raises(ValueError, match=r"int_more\.sql: reads totals, a mart"):
        discover_models(tmp_path)


def test_the_relations_a_model_reads_beside_the_models() -> None:
    models = discover_models()
    assert models["stg_samples"].reads == {"samples"}
    assert models["int_teams"].reads >= {"build_state.teams", "stg_hosts"}
    assert "teams" not in models["int_teams"].reads  # its CTE, passed to stable_ids
    # what the id_names macro reads is read by the models that call it (a fanned-out
    # build gives those tables to its workers)
    names = {f"build_state.{t}" for t in ("series", "hosts", "teams", "users", "jobs")}
    assert models["int_run_pieces"].reads == {"samples_attributed_rows", *names}
    assert models["gpu_hourly"].reads == {"samples_attributed_rows", *names}


def test_a_table_macro_reads_what_its_body_reads_but_its_arguments() -> None:
    sql = """
        create or replace temp macro plain(x) as x + 1;
        create or replace temp macro named(rows) as table
            with steps as (select * from query_table(rows))
            select * from steps inner join build_state.series using (series_id);
    """
    assert macro_reads(sql) == {"named": {"build_state.series"}}
    query = "with mine as (select 1 as series_id) select * from named(mine)"
    assert relations_read(query, macros=macro_reads(sql)) == {"build_state.series"}


def test_the_macros_file_is_parsed_once_for_every_build() -> None:
    """Every build finds the models again; the macros' syntax tree (a tenth of a second for
    sqlglot) is made once per text. Each call gets a dict of its own."""
    first = discover_models()
    parsed = sql_tree._macro_reads.cache_info()
    again = discover_models()
    assert sql_tree._macro_reads.cache_info().misses == parsed.misses
    assert sql_tree._macro_reads.cache_info().hits == parsed.hits + 1
    assert again == first
    reads = macro_reads("create macro m(x) as table select * from t")
    reads.clear()
    assert macro_reads("create macro m(x) as table select * from t") == {"m": {"t"}}


# A CTE, a string literal, a column and an alias named like the relation renamed.
QUERY = """
-- run_pieces in a comment stays
with recent as (
    select 'from run_pieces' as label, run_pieces.day, run_pieces.run_pieces,
    from run_pieces
    inner join build_state.run_pieces as old on true
),

aliased as (
    select pieces.day, from run_pieces as pieces
),

shadow as (
    select * from recent
),

run_pieces as (
    select * from recent
)

select * from run_pieces
union all by name
select * from (select * from RUN_PIECES limit 0)
"""


def test_a_rename_changes_table_nodes_only() -> None:
    renamed = rename_relations(QUERY, {"run_pieces": "_inc_pieces"})
    assert renamed.count("_inc_pieces") == 2  # the CTE `run_pieces` hides it below
    # without an alias, the old name becomes one (for `run_pieces.day`)
    assert "from _inc_pieces as run_pieces\n" in renamed
    assert "select pieces.day, from _inc_pieces as pieces" in renamed
    assert "select 'from run_pieces' as label, run_pieces.day, run_pieces.run_pieces," in renamed
    assert "build_state.run_pieces as old" in renamed  # a qualified name is another relation
    assert "-- run_pieces in a comment stays" in renamed
    assert "select * from RUN_PIECES limit 0" in renamed  # the CTE (names ignore case)
    assert relations_read(QUERY) == {"run_pieces", "build_state.run_pieces"}


def test_a_renamed_query_reads_the_other_relation() -> None:
    con = duckdb.connect()
    con.execute("create table run_pieces (day int, run_pieces int)")
    con.execute("create schema build_state")
    con.execute("create table build_state.run_pieces (x int)")
    con.execute("insert into build_state.run_pieces values (1)")
    con.execute("create table _inc_pieces (day int, run_pieces int)")
    con.execute("insert into _inc_pieces values (7, 8)")
    rows = con.execute(rename_relations(QUERY, {"run_pieces": "_inc_pieces"})).fetchall()
    assert rows == [("from run_pieces", 7, 8)]
    assert con.execute(QUERY).fetchall() == []


def test_a_cte_is_no_relation_after_its_definition_only() -> None:
    sql = "with a as (select * from b), b as (select * from a) select * from b"
    assert relations_read(sql) == {"b"}  # the first CTE reads the relation b
    assert rename_relations(sql, {"b": "c"}) == (
        "with a as (select * from c as b), b as (select * from a) select * from b"
    )


def test_a_table_macro_argument_is_a_relation() -> None:
    sql = "with known as (select 1) select * from stable_ids(build_names, known)"
    assert relations_read(sql) == {"build_names"}
    assert rename_relations(sql, {"build_names": "x", "known": "y"}) == (
        "with known as (select 1) select * from stable_ids(x, known)"
    )


def test_text_before_a_name_may_be_any_unicode() -> None:
    sql = "-- 1,000 GPUs × 7 days ≥ é\nselect 'ö' as a, * from samples"
    assert rename_relations(sql, {"samples": "_chunk"}).endswith("* from _chunk as samples")


def test_a_model_that_does_not_parse_is_named(tmp_path) -> None:
    (tmp_path / "staging").mkdir()
    (tmp_path / "staging" / "stg_bad.sql").write_text("select * from (select 1", encoding="utf-8")
    with pytest.raises(ValueError, match=r"stg_bad\.sql: not a query"):
        discover_models(tmp_path)
