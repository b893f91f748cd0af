"""A DELETE from a table too large for one statement's deletes to fit in DuckDB's memory.

DuckDB (2.0.1) keeps the deletes of each row group a statement deletes from in a block of
its buffer manager (256 KB at least), pinned until the deletes are checkpointed. A delete
that takes a few rows of every series (the oldest day, each series' newest hour) from a
table in series order touches every row group, and so pins a block per row group: at
thousands of GPUs over weeks, more than the build's cap. Statements over a range of the
key, each followed by a checkpoint, each touch only that range's row groups (and the few
appended later): what a delete pins is bounded by BATCH_ROWS rows' worth, whatever the
table's size. Without the checkpoints the blocks of every statement stay pinned.

A delete whose rows lie in few row groups (each series' newest rows, appended by the last
builds: what a steady cycle replaces) pins few blocks: it runs as one statement, however
large the table, rather than one statement and checkpoint per range, whose number grows
with the retained days.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

# Rows of the table per statement: about 130 row groups, 35 MB of pinned blocks.
BATCH_ROWS = 16_000_000
# DuckDB's rows per row group (its default, which the warehouse keeps): a row's rowid // this
# is its row group, as long as the groups are full (a bound, not an exact count, otherwise).
ROW_GROUP_ROWS = 122_880


def delete_in_key_ranges(
    con: duckdb.DuckDBPyConnection,
    target: str,
    condition: str,
    params: Sequence[object] = (),
    *,
    key: str,
    using: str = "",
) -> int:
    """`delete from {target} [using {using}] where {condition}`, as one statement on a table
    of up to BATCH_ROWS rows, or whose rows lie in the row groups of up to BATCH_ROWS rows,
    and as one per range of its integer column `key` otherwise, each committed and
    checkpointed on its own; the rows deleted. `target` is the table with an optional alias
    (`samples_attributed_rows as rows`); `key` is named as the condition would name it
    (`rows.series_id`)."""
    table, column = target.split()[0], key.rsplit(".", 1)[-1]
    statement = f"delete from {target} {f'using {using}' if using else ''} where ({condition})"
    ((rows,),) = con.execute(f"select count(*) from {table}").fetchall()  # from metadata
    if rows <= BATCH_ROWS or _row_groups(con, target, condition, params, using) <= (
        BATCH_ROWS // ROW_GROUP_ROWS
    ):
        return _deleted(con, statement, params)
    ((low, high),) = con.execute(f"select min({column}), max({column}) from {table}").fetchall()
    if low is None or low == high:
        return _deleted(con, statement, params)
    width = max(1, -(-(high - low + 1) * BATCH_ROWS // rows))
    deleted = 0
    for start in range(int(low), int(high) + 1, width):
        deleted += _deleted(
            con, f"{statement} and {key} >= {start} and {key} < {start + width}", params
        )
        con.execute("checkpoint")  # frees the blocks that hold this range's deletes
    return deleted


def _row_groups(
    con: duckdb.DuckDBPyConnection,
    target: str,
    condition: str,
    params: Sequence[object],
    using: str,
) -> int:
    """How many row groups hold a row the delete would delete: the blocks it would pin. It
    reads what the delete reads (the zone maps skip the same row groups)."""
    alias = target.split()[-1]
    ((groups,),) = con.execute(
        f"""
        select count(distinct {alias}.rowid // {ROW_GROUP_ROWS})
        from {target}{f", {using}" if using else ""}
        where ({condition})
        """,
        list(params),
    ).fetchall()
    return int(groups)


def _deleted(con: duckdb.DuckDBPyConnection, statement: str, params: Sequence[object]) -> int:
    """Run one DELETE; the rows it deleted."""
    rows = con.execute(statement, list(params)).fetchall()
    return int(rows[0][0]) if rows else 0
