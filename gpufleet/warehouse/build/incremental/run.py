"""The incremental build: recompute only the hours and days that new samples touch.

Runs the models written for the whole warehouse on a slice of it (`render` with a remap):
the slice is chosen in `window.py`, the marts' rows replaced in `marts.py` and
`pieces.py`. `docs/warehouse.md` explains the steps
and why they give what a full build gives (`tests/test_incremental.py` proves it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.build.ids import record_new_ids
from gpufleet.warehouse.build.incremental.marts import (
    ALLOC_ONLY_MART,
    GPU_DAY_MART,
    GPU_HOUR_MART,
    PER_DAY_MARTS,
    PER_SAMPLE_MART,
    PER_WEEK_MARTS,
    PIECES_MART,
    PIECES_MODEL,
    RUN_MARTS,
    replace_alloc_only_days,
    replace_gpu_days,
    replace_gpu_hours,
    replace_period_rows,
    replace_sample_rows,
)
from gpufleet.warehouse.build.incremental.pieces import replace_pieces, replace_runs
from gpufleet.warehouse.build.incremental.window import (
    create_window,
    keep_series_names,
    names_would_change,
    select_new_samples,
    window_is_a_suffix,
)
from gpufleet.warehouse.build.memory import fit_memory_limit
from gpufleet.warehouse.build.models import (
    TABLES,
    Model,
    build_order,
    create_model,
    drop_model,
)
from gpufleet.warehouse.build.state import record_incremental_build
from gpufleet.warehouse.build.steps import Running, StepClock

# Every mart an incremental build knows how to replace; any other means a full build.
INCREMENTAL_MARTS = frozenset(
    {PER_SAMPLE_MART, PIECES_MART, *RUN_MARTS, GPU_DAY_MART, GPU_HOUR_MART, ALLOC_ONLY_MART}
    | set(PER_DAY_MARTS)
    | set(PER_WEEK_MARTS)
)
# int_thermal_events reads the touched thermal runs' pieces, the rest the idle runs'.
REMAP_OVERRIDES = {"int_thermal_events": {PIECES_MODEL: "_inc_thermal_pieces"}}


@dataclass(frozen=True, kw_only=True)
class IncrementalOutcome:
    """What an incremental build recomputed (series, their new samples, local days)."""

    series: int
    new_samples: int
    days: int
    refs_since: dt.date | None = None  # dated reference rows changed from this day on


def build_incrementally(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    models: Mapping[str, Model],
    order: list[str],
    *,
    after: int,
    top: int,
    refs_since: dt.date | None = None,
    clock: StepClock | None = None,
) -> IncrementalOutcome | str:
    """Bring the marts up to load `top` of samples_stored, and every GPU up to date from the
    local day `refs_since` on (dated reference rows changed); or why only a full build
    can. `clock` times each model and the selection of the slice (`build/steps.py`)."""
    clock = clock or StepClock.start()
    order = incremental_order(models, order)
    marts = {
        name
        for name in order
        if models[name].layer == "marts" and models[name].materialized != "view"
    }
    if marts != INCREMENTAL_MARTS:
        return "a mart has no incremental plan"
    with clock.step("select_new_samples"):
        select_new_samples(con, config, after=after, top=top, refs_since=refs_since)
        if names_would_change(con):
            return "a GPU's name changed"
    con.execute("create or replace temp table _inc_days (day date)")
    created: list[Model] = []
    try:
        why_not = _run_models(con, models, order, created, clock)
        if why_not is not None:
            return why_not
        totals = con.execute(
            """
            select
                (select count(*) from _inc_series),
                (select coalesce(sum(new_samples), 0) from _inc_series),
                (select count(distinct day) from _inc_days)
            """
        ).fetchone()
        record_incremental_build(con, top=top)
    finally:
        _drop_temps(con, created)
    assert totals is not None
    return IncrementalOutcome(
        series=totals[0], new_samples=int(totals[1]), days=totals[2], refs_since=refs_since
    )


def incremental_order(models: Mapping[str, Model], order: list[str]) -> list[str]:
    """`order` with the models that read the pieces (int_run_pieces), but run_pieces, after
    run_pieces: here they read the touched runs' pieces of every day from run_pieces once it
    is replaced, where the pieces' model holds the window's only."""
    readers = {
        name: {PIECES_MART}
        for name, model in models.items()
        if PIECES_MODEL in model.depends_on and name != PIECES_MART
    }
    return build_order(models, after=readers) if readers else order


def _run_models(
    con: duckdb.DuckDBPyConnection,
    models: Mapping[str, Model],
    order: list[str],
    created: list[Model],
    clock: StepClock,
) -> str | None:
    """Each model in order on the slice: the temp ones created (and added to `created`), the
    marts' rows replaced; None, or why only a full build can. Each timed on `clock`."""
    remap: dict[str, str] = {"samples": "_inc_samples"}
    for name in order:
        model = models[name]
        if model.materialized == "view":
            continue  # a view of other marts: nothing to recompute
        with clock.model(con, name, is_table=model.materialized in TABLES) as built:
            remap, why_not = _run_model(con, models, name, remap, created, built)
        if why_not is not None:
            return why_not
    return None


def _run_model(
    con: duckdb.DuckDBPyConnection,
    models: Mapping[str, Model],
    name: str,
    remap: dict[str, str],
    created: list[Model],
    built: Running,
) -> tuple[dict[str, str], str | None]:
    """One model of `_run_models`: the remap the models after it read with, and None or
    why only a full build can. A temp table's rows are told to its step (`built`)."""
    model = models[name]
    fit_memory_limit(con)
    if model.layer != "marts":
        built.rows = create_model(con, model, {**remap, **REMAP_OVERRIDES.get(name, {})})
        created.append(model)
        if name == "int_series_ids":
            keep_series_names(con)
        record_new_ids(con, name)
    elif name == PER_SAMPLE_MART:
        replace_sample_rows(con, model, remap)
        create_window(con, PER_SAMPLE_MART)
        if not window_is_a_suffix(con, PER_SAMPLE_MART):
            return remap, "local hours go back where the new samples begin (a clock change)"
        return {**remap, PER_SAMPLE_MART: "_inc_window"}, None
    elif name == PIECES_MART:
        if not replace_pieces(con, model, remap):
            return remap, "the start of a run open before the new samples is unknown"
        # The runs' models read the pieces of the touched runs only.
        return {**remap, PIECES_MODEL: "_inc_idle_pieces"}, None
    elif name in RUN_MARTS:
        replace_runs(con, model, remap)
    elif name == GPU_DAY_MART:
        replace_gpu_days(con, model, models, remap)
    elif name == GPU_HOUR_MART:
        replace_gpu_hours(con, model, remap)
    elif name == ALLOC_ONLY_MART:
        replace_alloc_only_days(con, model, remap)
    else:
        replace_period_rows(con, model, remap, per_week=name in PER_WEEK_MARTS)
    return remap, None


def _drop_temps(con: duckdb.DuckDBPyConnection, created: list[Model]) -> None:
    """Drop what the build made for itself: the models' temp objects, then the slice's."""
    for model in reversed(created):
        drop_model(con, model)
    for view in _TEMP_VIEWS:
        con.execute(f"drop view if exists temp.{view}")
    for table in _TEMP_TABLES:
        con.execute(f"drop table if exists temp.{table}")


_TEMP_VIEWS = (
    "_inc_allocation_samples",
    "_inc_source",
    "_inc_window",
    "_inc_idle_pieces",
    "_inc_thermal_pieces",
    "_inc_gpu_day_hours",
    "_inc_gpu_day_pieces",
    "_inc_gpu_team_daily",
)
_TEMP_TABLES = (
    "_inc_allocation_changes",
    "_inc_series",
    "_inc_series_ids",
    "_inc_samples",
    "_inc_attributed",
    "_inc_cut",
    "_inc_carry",
    "_inc_pieces",
    "_inc_touched_idle",
    "_inc_touched_thermal",
    "_inc_old_waste",
    "_inc_extra_days",
    "_inc_gpu_day_episode_days",
    "_inc_days",
    "_inc_weeks",
)
