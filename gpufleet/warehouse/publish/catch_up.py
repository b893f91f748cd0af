"""Catching the stale warehouse slot up with the published one, instead of copying the file.

`catch_up` adds the samples loaded since, replays the mart rows that incremental builds
replaced (`log.py`) and copies every other table whole, each table the way `way_of` names;
it answers False where copying the file is the way (see `docs/warehouse.md`, the two slots).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import NamedTuple

import duckdb

from gpufleet.warehouse.base.deletes import delete_in_key_ranges
from gpufleet.warehouse.publish.log import LOG_KEPT, current_generation, replay_match

# Tables only ever changed by incremental builds (which log what they replace) or full
# builds (after which the other slot is copied afresh); every other table is copied whole.
LOGGED_TABLES = (
    "samples_attributed_rows",
    "run_pieces",
    "idle_episodes",
    "thermal_events",
    "gpu_team_daily",
    "gpu_hourly",
    "team_daily",
    "gpu_daily",
    "host_daily",
    "team_weekly",
)
# The one table in series order, a few of whose rows each series replaces in a build (its
# series_id never NULL): large, and deleted from a range of series at a time.
_SERIES_ORDERED = "samples_attributed_rows"
# Rows are appended with a growing load_id, and deleted only when they leave for the lake.
_APPEND_ONLY = "samples_stored"
# The publish log: rows are added with their publish's generation, and deleted only when
# that generation is forgotten (publish_log.start_publish).
_LOG = "build_state.replaced"
# The mart rows builds keep as they are (closed months, expired days): large, and changed
# only by publishes listed in build_state.full_builds, after which the file is copied.
_KEPT = "build_state.kept_"
# More rows than this (a table copied whole, or samples gained) are not copied row by row:
# the file is (row by row is slower).
_WHOLE_TABLE_LIMIT = 5_000_000


def catch_up(con: duckdb.DuckDBPyConnection, published: Path, *, rebuild: bool) -> bool:
    """Bring the slot open on `con` up to the published warehouse; False if it cannot.

    The slot is the warehouse as it was one publish (or a few) ago. A full build since, a
    different schema, or a slot too far behind means copying the file instead. When the
    writer is about to rebuild every mart (`rebuild`: a full build), the marts are left as
    they are (the build replaces them all), so neither a full build since nor the log matters.
    """
    own = con.execute("select current_database()").fetchone()
    assert own is not None
    con.execute("attach ? as _published (read_only)", [str(published)])
    try:
        own_tables, tables = _columns(con, own[0], "_published")
        if own_tables != tables:
            return False
        if not rebuild and _views(con, own[0]) != _views(con, "_published"):
            return False
        behind = current_generation(con)
        row = con.execute("select value from _published.build_state.generation").fetchone()
        ahead = int(row[0]) if row else 0
        if ahead == behind:
            return True
        if not rebuild and not _log_covers(con, behind=behind, ahead=ahead):
            return False
        # Stops at the first table that cannot be caught up: the samples first, as a load
        # too large to add (a backfill, hours loaded at once) comes with as large a replay.
        order = sorted(tables, key=lambda name: name != f"main.{_APPEND_ONLY}")
        replaced = frozenset() if rebuild else _replaced_tables(con, behind)
        ways = {name: way_of(name, rebuild=rebuild) for name in order}
        whole = _compare_whole(con, [name for name in order if ways[name] is Way.COPY])
        return all(
            _catch_up_table(con, name, ways[name], tables[name], behind, replaced, whole)
            for name in order
        )
    finally:
        con.execute("detach _published")


def _columns(
    con: duckdb.DuckDBPyConnection, *databases: str
) -> list[dict[str, list[tuple[str, str]]]]:
    """Each database's tables' columns, as (name, type) in order, by schema.table (one
    query for them all)."""
    rows = con.execute(
        """
        select database_name, schema_name || '.' || table_name,
            list([column_name, data_type] order by column_index),
        from duckdb_columns()
        where database_name in (select unnest($databases))
            and schema_name in ('main', 'build_state')
            and not internal
            and (database_name, schema_name, table_name) in (
                select (database_name, schema_name, table_name) from duckdb_tables()
                where database_name in (select unnest($databases))
            )
        group by all
        """,
        {"databases": list(databases)},
    ).fetchall()
    found: dict[str, dict[str, list[tuple[str, str]]]] = {database: {} for database in databases}
    for database, name, columns in rows:
        found[database][name] = [(column, kind) for column, kind in columns]
    return [found[database] for database in databases]


def _views(con: duckdb.DuckDBPyConnection, database: str) -> dict[str, str]:
    """Each view's definition, by schema.view (a full build replaces them)."""
    rows = con.execute(
        """
        select schema_name || '.' || view_name, sql,
        from duckdb_views()
        where database_name = ? and schema_name in ('main', 'build_state') and not internal
        """,
        [database],
    ).fetchall()
    return {name: sql for name, sql in rows}


def _log_covers(con: duckdb.DuckDBPyConnection, *, behind: int, ahead: int) -> bool:
    """Whether the published log holds every publish since `behind`, none a full build."""
    if not behind < ahead <= behind + LOG_KEPT:
        return False
    full = con.execute(
        "select count(*) from _published.build_state.full_builds where generation > ?",
        [behind],
    ).fetchone()
    return not (full and full[0])


def _replaced_tables(con: duckdb.DuckDBPyConnection, behind: int) -> frozenset[str]:
    """The tables whose rows the publishes since `behind` replaced, by the published log."""
    rows = con.execute(
        f"select distinct table_name from _published.{_LOG} where generation > ?", [behind]
    ).fetchall()
    return frozenset(str(row[0]) for row in rows)


class Way(enum.Enum):
    """How the catch-up brings a table up to the published one's rows (`way_of`)."""

    APPEND = "append"  # the samples: those of later loads added (`_append_samples`)
    REPLAY = "replay"  # a logged mart: the rows the log names since replaced (`_replay`)
    ADD_GENERATIONS = "add_generations"  # the publish log: later generations (`_copy_log`)
    LEAVE = "leave"  # as it is: a kept table, or a logged mart before a full build
    COPY = "copy"  # compared (`_compare_whole`), given the published rows if they differ


def way_of(name: str, *, rebuild: bool) -> Way:
    """How `catch_up` brings table `name` (schema.table) up to date: the one place that
    chooses, for the comparison of the tables copied whole and for the catch-up itself.
    Before a full build (`rebuild`) the logged marts are left (the build replaces them),
    and the kept tables, which only a full build's publish changes, are copied."""
    if name == f"main.{_APPEND_ONLY}":
        return Way.APPEND
    if name.removeprefix("main.") in LOGGED_TABLES:
        return Way.LEAVE if rebuild else Way.REPLAY
    if name == _LOG:
        return Way.ADD_GENERATIONS
    if name.startswith(_KEPT):
        # changed only by publishes that count as full builds (build/kept.py)
        return Way.COPY if rebuild else Way.LEAVE
    return Way.COPY


class _Compared(NamedTuple):
    """The tables copied whole, compared with the published ones in two statements for
    them all (one each took half a catch-up's time): each one's published rows, and which
    of them differ (as many rows, each among the published: the same rows)."""

    published_rows: dict[str, int]
    differing: frozenset[str]


def _compare_whole(con: duckdb.DuckDBPyConnection, names: list[str]) -> _Compared:
    if not names:
        return _Compared({}, frozenset())
    counted = con.execute(
        " union all ".join(
            f"select {i}, (select count(*) from {name}), (select count(*) from _published.{name})"
            for i, name in enumerate(names)
        )
    ).fetchall()
    rows = {names[i]: (int(own), int(published)) for i, own, published in counted}
    # A table too large stops the catch-up before it is compared (`_catch_up_table`).
    alike = [
        i for i, name in enumerate(names) if rows[name][0] == rows[name][1] <= _WHOLE_TABLE_LIMIT
    ]
    unlike = {name for name, (own, published) in rows.items() if own != published}
    if alike:
        found = con.execute(
            " union all ".join(
                f"select {i} where exists "
                f"(select * from {names[i]} except all select * from _published.{names[i]})"
                for i in alike
            )
        ).fetchall()
        unlike |= {names[i] for (i,) in found}
    return _Compared({name: published for name, (_, published) in rows.items()}, frozenset(unlike))


def _catch_up_table(
    con: duckdb.DuckDBPyConnection,
    name: str,
    way: Way,
    columns: list[tuple[str, str]],
    behind: int,
    replaced: frozenset[str],
    whole: _Compared,
) -> bool:
    """Bring one table (schema.table, its `columns` as `_columns` gives them) up to the
    published one's rows, the `way` `way_of` names (a replayed table: if among `replaced`,
    `_replaced_tables`; a table copied whole: if among `whole.differing`); False if it
    cannot."""
    match way:
        case Way.APPEND:
            return _append_samples(con, name)
        case Way.REPLAY:
            _replay(con, name, behind, replaced)
        case Way.ADD_GENERATIONS:
            _copy_log(con, name)
        case Way.LEAVE:
            pass
        case Way.COPY:
            if whole.published_rows[name] > _WHOLE_TABLE_LIMIT:
                return False
            if name in whole.differing:
                _copy_rows(con, name, [column for column, _ in columns])
    return True


def _copy_rows(con: duckdb.DuckDBPyConnection, name: str, columns: list[str]) -> None:
    """Give a table that differs (`_compare_whole`) the published one's rows (as a
    multiset), writing only what differs: most tables change by a few rows a publish, or
    none (`loaded_files`, the allocations, the publish log grow with the history; copied
    whole, they would cost every cycle time that grows with the history too). Every copy
    of a row the published table has fewer of is deleted, then the published rows missing
    are added."""
    same = " and ".join(
        f'rows."{column}" is not distinct from gone."{column}"'
        for column in (column.replace('"', '""') for column in columns)
    )
    con.execute(
        f"""
        create or replace temp table _sync_gone as
        select * from {name} except all select * from _published.{name}
        """
    )
    con.execute(f"delete from {name} as rows using temp._sync_gone as gone where {same}")
    con.execute(
        f"insert into {name} select * from _published.{name} except all select * from {name}"
    )
    con.execute("drop table temp._sync_gone")


def _copy_log(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Add the publish log's later generations (a generation's rows never change once
    published); those the published log has forgotten, `start_publish` forgets next."""
    con.execute(
        f"""
        insert into {name}
        select * from _published.{name}
        where generation > (select coalesce(max(generation), -1) from {name})
        """
    )


def _append_samples(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Add the samples of later loads; False if they are too many, or rows left since."""
    row = con.execute(f"select coalesce(max(load_id), -1) from {name}").fetchone()
    loaded = row[0] if row else -1
    gained = con.execute(
        f"select count(*) from _published.{name} where load_id > ?", [loaded]
    ).fetchone()
    if not gained or gained[0] > _WHOLE_TABLE_LIMIT:
        return False  # a backfill since: copying the file is cheaper
    con.execute(
        f"insert into {name} select * from _published.{name} where load_id > ?",
        [loaded],
    )
    counts = con.execute(
        f"select (select count(*) from {name}), (select count(*) from _published.{name})"
    ).fetchone()
    return bool(counts and counts[0] == counts[1])  # unequal: rows left for the lake since


def _replay(
    con: duckdb.DuckDBPyConnection, name: str, behind: int, replaced: frozenset[str]
) -> None:
    """Replace the table's rows the publishes since `behind` replaced, key by key
    (_SERIES_ORDERED's a range of series at a time); nothing for a table not among
    `replaced` (the tables the publish log names since `behind`)."""
    table = name.removeprefix("main.")
    if table not in replaced:
        return
    con.execute(
        """
        create or replace temp table _sync_keys as
        select distinct key, gpu_uuid, since_ts, day, hour, run_id, iso_week,
        from _published.build_state.replaced
        where generation > ? and table_name = ?
        """,
        [behind, table],
    )
    kinds = [row[0] for row in con.execute("select distinct key from _sync_keys").fetchall()]
    for kind in kinds:
        match = replay_match(kind, t="rows", k="keys")
        keys = f"(select * from _sync_keys where key = '{kind}') as keys"
        if table == _SERIES_ORDERED:  # a few rows of every series: a statement per range
            delete_in_key_ranges(con, f"{name} as rows", match, key="rows.series_id", using=keys)
        else:
            con.execute(f"delete from {name} as rows using {keys} where {match}")
        con.execute(
            f"""
            insert into {name}
            select distinct on (rows.rowid) rows.* exclude (rowid),
            from (select *, rowid from _published.{name}) as rows
            inner join {keys} on {match}
            """
        )
    con.execute("drop table temp._sync_keys")
