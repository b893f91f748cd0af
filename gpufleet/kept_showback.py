"""A closed month's showback rows as `gpufleet close` kept them (gpufleet/close.py),
which `export showback` writes again instead of computing them.

A column added to showback after the first months were closed is added to the kept table by
the next close (`ADDED_COLUMNS`), so the rows kept before it existed have it, but empty:
`x_idle_capacity_usd` (never null in a row kept since) null, `x_co2_kg` (null where no grid
intensity is known) NaN, its default. A month all of whose rows are such is written without
the column, as it was at close.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpufleet.warehouse.base.catalog import has_table

# A closed month's rows as they were at close.
CLOSED_SHOWBACK = "build_state.closed_showback"
# Columns added since the first closed months, with the type (and the value of the rows kept
# before) each gets in the kept table.
ADDED_COLUMNS = {"x_idle_capacity_usd": "double", "x_co2_kg": "double default 'NaN'"}


def closed_sites(con: duckdb.DuckDBPyConnection, month: str) -> list[str | None]:
    """The sites `month` is closed for by `gpufleet close` (None: every site)."""
    if not has_table(con, "closed_periods") or not has_table(con, CLOSED_SHOWBACK):
        return []
    rows = con.execute("select cluster from closed_periods where month = ?", [month]).fetchall()
    return [cluster for (cluster,) in rows]


def kept_rows(con: duckdb.DuckDBPyConnection, month: str) -> pl.DataFrame:
    """The month's kept rows, as stored (see `as_closed` and `as_known`)."""
    return con.sql(f"from {CLOSED_SHOWBACK} where x_month = ?", params=[month]).pl()


def _not_kept(rows: pl.DataFrame, column: str) -> pl.Series:
    """Whether each row was kept before `column` was added to showback."""
    values = rows[column]
    return values.is_nan().fill_null(False) if column == "x_co2_kg" else values.is_null()


def as_closed(kept: pl.DataFrame) -> pl.DataFrame:
    """A month closed for every site: its kept rows without the columns added after it was
    closed, `x_co2_kg` (when kept) after `x_energy_kwh`, where showback puts it."""
    gone = [
        column
        for column in ADDED_COLUMNS
        if column in kept.columns and kept.height and _not_kept(kept, column).all()
    ]
    rows = as_known(kept.drop(gone))
    if "x_co2_kg" in rows.columns and "x_energy_kwh" in rows.columns:
        order = [column for column in rows.columns if column != "x_co2_kg"]
        order.insert(order.index("x_energy_kwh") + 1, "x_co2_kg")
        rows = rows.select(order)
    return rows


def as_known(kept: pl.DataFrame) -> pl.DataFrame:
    """Kept rows beside computed ones: `x_co2_kg` null (not known) in a row kept before it."""
    if "x_co2_kg" not in kept.columns:
        return kept
    return kept.with_columns(pl.col("x_co2_kg").fill_nan(None))
