"""The publish log in `build_state`: what the other slot replays to catch up.

Each publish counts itself in `build_state.generation`; incremental builds log the mart rows
they replaced in `build_state.replaced` (by a key of REPLAY_KEYS), full builds their
generation in `build_state.full_builds`. `catch_up.py` reads the log.
"""

from __future__ import annotations

import duckdb

GENERATION_DDL = """
create schema if not exists build_state;
create table if not exists build_state.generation (value bigint not null);
insert into build_state.generation select 0 where not exists (from build_state.generation);
-- The rows of a table that a publish replaced, by key (see REPLAY_KEYS); one key per row.
create table if not exists build_state.replaced (
    generation bigint not null,
    table_name varchar not null,
    key varchar not null,          -- a name in REPLAY_KEYS
    gpu_uuid varchar,
    since_ts timestamptz,          -- from when (series_since_ts); a run ended at or after it
    day date,
    run_id bigint,                 -- an episode or event id; a series id for series_since_ts
    iso_week varchar,
    hour bigint
);
-- a warehouse made before the log had hours (gpu_from_hour)
alter table build_state.replaced add column if not exists hour bigint;
create table if not exists build_state.full_builds (generation bigint not null);
"""
# How a logged key selects a table's rows ({t}: the table, {k}: the log row). A plain
# comparison of a day or time (`{t}.day >= {k}.day`) lets DuckDB skip the row groups of older
# days by the join keys' least value (its join filter pushdown): a catch-up then reads the
# days the publishes replaced, not the retained history. Without `{t}.day >= {k}.day`,
# gpu_from_hour's `or` would read the whole table.
REPLAY_KEYS = {
    "series_since_ts": "{t}.series_id = {k}.run_id and {t}.ts >= {k}.since_ts",
    "gpu_from_day": "{t}.gpu_uuid = {k}.gpu_uuid and {t}.day >= {k}.day",
    "gpu_from_hour": (
        "{t}.gpu_uuid = {k}.gpu_uuid and {t}.day >= {k}.day"
        " and ({t}.day > {k}.day or ({t}.day = {k}.day and {t}.hour >= {k}.hour))"
    ),
    "gpu_day": "{t}.gpu_uuid = {k}.gpu_uuid and {t}.day = {k}.day",
    "gpu_episode": "{t}.gpu_uuid = {k}.gpu_uuid and {t}.episode_id = {k}.run_id",
    "gpu_event": "{t}.gpu_uuid = {k}.gpu_uuid and {t}.event_id = {k}.run_id",
    "day": "{t}.day = {k}.day",
    "iso_week": "{t}.iso_week = {k}.iso_week",
}
# A bound beside a key no zone map helps with (an episode's or event's id is a hash): the
# rows of a run a build touched ended at or after the `since_ts` it logged, before the build
# and after it (`build/incremental/pieces.py`), so the row groups of runs that ended earlier
# are skipped. A key logged by an older release has none: every row group is read.
RUN_ENDS = "{t}.end_ts >= coalesce({k}.since_ts, '-infinity'::timestamptz)"
REPLAY_BOUNDS = {"gpu_episode": RUN_ENDS, "gpu_event": RUN_ENDS}
LOG_KEPT = 16  # generations of the log kept: a slot further behind is copied afresh


def replay_match(kind: str, *, t: str, k: str) -> str:
    """SQL: the row `t` of a table is one that the logged key `k` (of kind `kind`, a name in
    REPLAY_KEYS) selects."""
    bound = REPLAY_BOUNDS.get(kind)
    match = REPLAY_KEYS[kind] if bound is None else f"{REPLAY_KEYS[kind]} and {bound}"
    return match.format(t=t, k=k)


def current_generation(con: duckdb.DuckDBPyConnection) -> int:
    """The number of the publish this connection's changes will be (or were) part of."""
    row = con.execute("select value from build_state.generation").fetchone()
    return int(row[0]) if row else 0


def start_publish(con: duckdb.DuckDBPyConnection) -> None:
    """Count a new publish, and forget the log of those more than LOG_KEPT before it."""
    con.execute("update build_state.generation set value = value + 1")
    con.execute(
        "delete from build_state.replaced where generation < ?",
        [current_generation(con) - LOG_KEPT],
    )
