"""`notices_sent`: every waste episode a notice was sent for, so none is sent twice, and
every address that refused one.

A 'sent' row is written only after the SMTP server accepted the message for its recipient
(To), in the warehouse's write transaction. A 'refused' row keeps an address the server
refused, with its reply; it does not count as sent, so the next run tries again. The table
is none of the models', so a full build leaves it alone, and the other warehouse slot gets
it whole like the other small tables. Its DDL and comments are the warehouse's
(`gpufleet.warehouse.base.notices_sent`), which creates it with the raw tables.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import NamedTuple

import duckdb

from gpufleet.warehouse.base.notices_sent import TABLE

SENT, REFUSED = "sent", "refused"
_SENT_NONE = "select null::varchar as gpu_uuid, null::bigint as episode_id where false"


class SentEpisode(NamedTuple):
    """One episode of one accepted message."""

    day: dt.date
    kind: str
    episode_id: int
    gpu_uuid: str
    user: str | None  # None: a job with no known user
    team: str
    recipient: str
    message_id: str
    sent_at: dt.datetime
    status: str = SENT
    reply: str | None = None  # the server's, for a REFUSED row


def _columns(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The columns of notices_sent on `con` (none without the table)."""
    rows = con.execute(
        "select column_name from duckdb_columns() where database_name = current_database()"
        " and schema_name = 'main' and table_name = ?",
        [TABLE],
    ).fetchall()
    return {name for (name,) in rows}


def sent_episodes_sql(con: duckdb.DuckDBPyConnection) -> str:
    """A query for (gpu_uuid, episode_id) of every episode a notice was sent for (none when
    nothing was ever sent; every row of an earlier version's table)."""
    columns = _columns(con)
    if not columns:
        return _SENT_NONE
    where = f" where status = '{SENT}'" if "status" in columns else ""
    return f"select gpu_uuid, episode_id from {TABLE}{where}"


def record_sent(con: duckdb.DuckDBPyConnection, rows: Sequence[SentEpisode]) -> None:
    """Remember the episodes of accepted messages and the refused addresses (in the
    caller's write transaction)."""
    if rows:
        columns = ", ".join(f'"{name}"' for name in SentEpisode._fields)
        marks = ", ".join("?" for _ in SentEpisode._fields)
        con.executemany(
            f"insert into {TABLE} ({columns}) values ({marks})", [tuple(r) for r in rows]
        )
