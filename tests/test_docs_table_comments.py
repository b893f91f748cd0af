"""The docs tell users where the tables' `COMMENT ON` texts are: the queries they show return
every column's comment on a built warehouse, and no page says that DESCRIBE shows them
(DuckDB's DESCRIBE lists names and types only)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_models_fixtures import Fleet

DOCS = Path(__file__).resolve().parents[1] / "docs"
SQL_BLOCK = re.compile(r"```sql\n(.*?)\n```", re.S)
QUERY_LINE = re.compile(r'^gpufleet query "(.*duckdb_columns\(\).*)"\s*(#.*)?$', re.M)


def _models_section() -> str:
    text = (DOCS / "models.md").read_text(encoding="utf-8")
    return text.split("## The SQL files", 1)[1].split("\n## ", 1)[0]


def test_the_shown_queries_return_each_columns_comment() -> None:
    queries = SQL_BLOCK.findall(_models_section())
    queries += QUERY_LINE.findall((DOCS / "analysts.md").read_text(encoding="utf-8"))
    columns_query, tables_query, *from_analysts = [
        query if isinstance(query, str) else query[0] for query in queries
    ]
    assert from_analysts, "docs/analysts.md shows no duckdb_columns() query"
    fleet = Fleet()
    fleet.build()
    described = {row["column_name"] for row in fleet.rows("describe team_daily")}
    for query in (columns_query, *from_analysts):
        rows = fleet.rows(query)
        assert {row["column_name"] for row in rows} == described, query
        assert all(row["comment"] for row in rows), query
    tables = {row["table_name"]: row["comment"] for row in fleet.rows(tables_query)}
    assert tables["team_daily"] and tables["idle_episodes"]


def test_describe_shows_no_comments_and_no_page_says_it_does() -> None:
    fleet = Fleet()
    fleet.build()
    assert "comment" not in {
        column.lower() for column in fleet.rows("describe team_daily")[0]
    }  # if DuckDB adds them one day, the docs can say so again
    for page in DOCS.glob("*.md"):
        text = " ".join(page.read_text(encoding="utf-8").split())
        claims = re.findall(r"DESCRIBE[^.;:]*\b(explains?|shows? (?:the|their) comments)", text)
        assert not claims, f"{page.name} says DESCRIBE shows the comments"
