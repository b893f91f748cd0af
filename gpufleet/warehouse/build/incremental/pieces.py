"""How an incremental build replaces the runs: `run_pieces`, then the runs they touch.

Pieces are replaced from each series' cut, a run open there keeping its earlier start;
`idle_episodes` and `thermal_events` are added up again from all the touched runs' pieces.
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from gpufleet.warehouse.base.catalog import has_table
from gpufleet.warehouse.build.incremental.marts import log_replaced, replace_from_cut
from gpufleet.warehouse.build.incremental.window import from_cut
from gpufleet.warehouse.build.kept import RUN_MARTS as KEPT_RUN_MARTS
from gpufleet.warehouse.build.kept import kept_table
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
        # ends_from_ts: a time the run's end_ts is at or after, in its row before this build
        # and after it (publish/log.py REPLAY_BOUNDS). A run with a sample before the cut and
        # one from it on holds every sample between: the series' last one before the cut
        # too, which ends its last piece of that kind before the cut (_inc_carry's). Any
        # other starts from the cut on, after every such piece. (A kept run: _kept_ends.)
        con.execute(
            f"""
            create or replace temp table _inc_touched_{kind} as
            select distinct
                runs.gpu_uuid,
                runs.run_start_ts,
                (hash(runs.gpu_uuid, runs.run_start_ts) >> 1)::bigint as run_id,
                greatest(
                    runs.run_start_ts, coalesce(_inc_carry.{kind}_last_ts, runs.run_start_ts)
                ) as ends_from_ts,
            from (
                select pieces.gpu_uuid, pieces.{kind}_run_start_ts as run_start_ts,
                from {model.name} as pieces
                inner join _inc_cut
                    on _inc_cut.gpu_uuid = pieces.gpu_uuid and {from_cut("pieces")}
                where pieces.day >= (select min(from_day) from _inc_cut)
                union all
                select gpu_uuid, {kind}_run_start_ts, from _inc_pieces
            ) as runs
            left join _inc_carry on _inc_carry.gpu_uuid = runs.gpu_uuid
            where runs.run_start_ts is not null
            """
        )
    _kept_ends(con)
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


def _kept_ends(con: duckdb.DuckDBPyConnection) -> None:
    """A touched run whose start is on a kept day (build/kept.py) has its kept row in the
    mart, as it was when it was kept, whatever the builds since computed: its end is the
    kept row's, which ends_from_ts must not pass. (Any row of a run ends at or after its
    start: the same first sample, the same id; the kept tables' row groups of runs that
    ended before the touched runs' earliest start are skipped.)"""
    for mart, (id_column, _) in KEPT_RUN_MARTS.items():
        if not has_table(con, kept_table(mart)):
            continue
        kind = "idle" if mart == "idle_episodes" else "thermal"
        con.execute(
            f"""
            update _inc_touched_{kind} as touched
            set ends_from_ts = least(touched.ends_from_ts, kept.end_ts)
            from (
                select gpu_uuid, {id_column} as run_id, min(end_ts) as end_ts,
                from {kept_table(mart)}
                where {id_column} in (select run_id from _inc_touched_{kind})
                    and end_ts >= (select min(run_start_ts) from _inc_touched_{kind})
                group by all
            ) as kept
            where kept.gpu_uuid = touched.gpu_uuid and kept.run_id = touched.run_id
            """
        )


def _carry_run_starts(con: duckdb.DuckDBPyConnection, table: str, *, recent_only: bool) -> None:
    """Give the new pieces of a run open at the cut ('-infinity') the start of the series'
    latest run of that kind before the cut, from the pieces of the cut's day and the day
    before only (`recent_only`) or of all days. The second bound on the day is the first's
    lowest value as a constant, which lets the zone maps skip older row groups. _inc_carry
    keeps the latest end of those pieces of each kind too (`{kind}_last_ts`)."""
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
            max(pieces.last_ts) filter (where pieces.idle_run_start_ts is not null)
                as idle_last_ts,
            max(pieces.last_ts) filter (where pieces.thermal_run_start_ts is not null)
                as thermal_last_ts,
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
    kind = "idle" if model.name == "idle_episodes" else "thermal"
    id_column = KEPT_RUN_MARTS[model.name][0]
    if kind == "idle":
        con.execute(
            f"""
            create or replace temp table _inc_old_waste as
            select runs.gpu_uuid, runs.{id_column} as run_id, runs.is_waste,
            from {model.name} as runs
            semi join _inc_touched_idle on {touched_run("runs", kind, id_column)}
            where runs.end_ts >= (select min(ends_from_ts) from _inc_touched_idle)
            """
        )
    con.execute(
        f"""
        delete from {model.name} using _inc_touched_{kind}
        where {touched_run(model.name, kind, id_column)}
            and {model.name}.end_ts >= (select min(ends_from_ts) from _inc_touched_{kind})
        """
    )
    con.execute(f"insert into {model.name} by name\n{render(model, remap)}")
    log_replaced(
        con,
        model.name,
        "gpu_episode" if kind == "idle" else "gpu_event",
        f"select gpu_uuid, run_id, ends_from_ts as since_ts from _inc_touched_{kind}",
    )


def touched_run(runs: str, kind: str, id_column: str) -> str:
    """SQL: the row `runs` of idle_episodes ("idle") or thermal_events ("thermal"), whose id
    is `id_column`, is of a run this build touched (_inc_touched_{kind}): its id, and its
    end at or after the touched run's ends_from_ts, which lets the zone maps skip the row
    groups of runs that ended before (the ids are hashes: they skip nothing)."""
    touched = f"_inc_touched_{kind}"
    return (
        f"{runs}.gpu_uuid = {touched}.gpu_uuid and {runs}.{id_column} = {touched}.run_id"
        f" and {runs}.end_ts >= {touched}.ends_from_ts"
    )
