"""How an incremental build replaces the runs: `run_pieces`, then the runs they touch.

Pieces are replaced from each series' cut, a run open there keeping its earlier start;
`idle_episodes` and `thermal_events` are added up again from all the touched runs' pieces.
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from gpufleet.warehouse.build.incremental.marts import log_replaced, replace_from_cut
from gpufleet.warehouse.build.incremental.window import from_cut
from gpufleet.warehouse.build.models import Model, render


def replace_pieces(con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]) -> bool:
    """run_pieces from each series' cut on; False if an open run's start is unknown.

    A run open where the window begins gets the start of the series' last run of that kind
    before the cut (the run of the sample just before the window). The runs touched are
    those of the pieces replaced and of the new ones.
    """
    con.execute(f"create or replace temp table _inc_pieces as\n{render(model, remap)}")
    # A run still open at the cut has a piece that day or the day before unless the series
    # has no samples in them (a gap only a very long interval keeps contiguous): those days
    # are read first, the whole history only if they leave a run's start unknown.
    for recent_only in (True, False):
        _carry_run_starts(con, model.name, recent_only=recent_only)
        unknown = con.execute(
            """
            select count(*) from _inc_pieces
            where idle_run_start_ts = '-infinity'::timestamptz
                or thermal_run_start_ts = '-infinity'::timestamptz
            """
        ).fetchone()
        if not (unknown and unknown[0]):
            break
    else:
        return False
    for kind in ("idle", "thermal"):
        con.execute(
            f"""
            create or replace temp table _inc_touched_{kind} as
            select distinct
                gpu_uuid,
                run_start_ts,
                (hash(gpu_uuid, run_start_ts) >> 1)::bigint as run_id,
            from (
                select pieces.gpu_uuid, pieces.{kind}_run_start_ts as run_start_ts,
                from {model.name} as pieces
                inner join _inc_cut
                    on _inc_cut.gpu_uuid = pieces.gpu_uuid and {from_cut("pieces")}
                where pieces.day >= (select min(from_day) from _inc_cut)
                union all
                select gpu_uuid, {kind}_run_start_ts, from _inc_pieces
            )
            where run_start_ts is not null
            """
        )
    replace_from_cut(con, model.name, "select * from _inc_pieces")
    for kind in ("idle", "thermal"):
        con.execute(
            f"""
            create or replace temp view _inc_{kind}_pieces as
            select pieces.*,
            from {model.name} as pieces
            semi join _inc_touched_{kind}
                on _inc_touched_{kind}.gpu_uuid = pieces.gpu_uuid
                and _inc_touched_{kind}.run_start_ts = pieces.{kind}_run_start_ts
            """
        )
    return True


def _carry_run_starts(con: duckdb.DuckDBPyConnection, table: str, *, recent_only: bool) -> None:
    """Give the new pieces of a run open at the cut ('-infinity') the start of the series'
    latest run of that kind before the cut, from the pieces of the cut's day and the day
    before only (`recent_only`) or of all days. The second bound on the day is the first's
    lowest value as a constant, which lets the zone maps skip older row groups."""
    days = (
        """
                and pieces.day >= _inc_cut.from_day - 1
            where pieces.day >= (select min(from_day) from _inc_cut) - 1"""
        if recent_only
        else ""
    )
    con.execute(
        f"""
        create or replace temp table _inc_carry as
        select
            pieces.gpu_uuid,
            arg_max(pieces.idle_run_start_ts, pieces.last_ts)
                filter (where pieces.idle_run_start_ts is not null) as idle_run_start_ts,
            arg_max(pieces.thermal_run_start_ts, pieces.last_ts)
                filter (where pieces.thermal_run_start_ts is not null) as thermal_run_start_ts,
        from {table} as pieces
        inner join _inc_cut
            on _inc_cut.gpu_uuid = pieces.gpu_uuid
            and not {from_cut("pieces")}{days}
        group by pieces.gpu_uuid
        """
    )
    for kind in ("idle", "thermal"):
        con.execute(
            f"""
            update _inc_pieces
            set {kind}_run_start_ts = _inc_carry.{kind}_run_start_ts
            from _inc_carry
            where _inc_carry.gpu_uuid = _inc_pieces.gpu_uuid
                and _inc_pieces.{kind}_run_start_ts = '-infinity'::timestamptz
                -- a pass sets only the starts it found (the next pass looks further back)
                and _inc_carry.{kind}_run_start_ts is not null
            """
        )


def replace_runs(con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]) -> None:
    """idle_episodes or thermal_events: the touched runs, added up from all their pieces."""
    kind, id_column = (
        ("idle", "episode_id") if model.name == "idle_episodes" else ("thermal", "event_id")
    )
    if kind == "idle":
        con.execute(
            f"""
            create or replace temp table _inc_old_waste as
            select runs.gpu_uuid, runs.{id_column} as run_id, runs.is_waste,
            from {model.name} as runs
            semi join _inc_touched_idle
                on _inc_touched_idle.gpu_uuid = runs.gpu_uuid
                and _inc_touched_idle.run_id = runs.{id_column}
            """
        )
    con.execute(
        f"""
        delete from {model.name} using _inc_touched_{kind}
        where {model.name}.gpu_uuid = _inc_touched_{kind}.gpu_uuid
            and {model.name}.{id_column} = _inc_touched_{kind}.run_id
        """
    )
    con.execute(f"insert into {model.name} by name\n{render(model, remap)}")
    log_replaced(
        con,
        model.name,
        "gpu_episode" if kind == "idle" else "gpu_event",
        f"select gpu_uuid, run_id from _inc_touched_{kind}",
    )
