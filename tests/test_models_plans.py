"""The models over every sample read the samples where they use them: a CTE that a model
reads twice is declared `not materialized`, as DuckDB would otherwise hold every column of
every sample (processes included) in memory first, and spill it to disk at fleet scale
(bench/sizing.md, 2026-11-29: a quarter of a full build's CPU)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from gpufleet.warehouse.base.raw_tables import ensure_raw_tables
from gpufleet.warehouse.build.models import create_model, discover_models


def _operators(node: dict[str, Any]) -> Iterator[str]:
    yield node["name"]
    for child in node.get("children", []):
        yield from _operators(child)


@pytest.mark.parametrize("model", ["stg_samples", "int_process_owners"])
def test_a_model_over_the_samples_materializes_no_cte(model: str) -> None:
    con = duckdb.connect()
    ensure_raw_tables(con)
    models = discover_models()
    for name in ("stg_samples", model):
        create_model(con, models[name])
    row = con.execute(f"explain (format json) select * from {model}").fetchone()
    assert row is not None
    operators = [name for plan in json.loads(row[1]) for name in _operators(plan)]
    assert "CTE" not in operators
