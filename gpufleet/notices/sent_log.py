"""`notices_sent`: every waste episode a notice was sent for, so none is sent twice, and
every address that refused one.

A 'sent' row is written only after the SMTP server accepted the message for its recipient
(To), in the warehouse's write transaction. A 'refused' row keeps an address the server
refused, with its reply; it does not count as sent, so the next run tries again. The table
is none of the models', so a full build leaves it alone, and the other warehouse slot gets
it whole like the other small tables.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import NamedTuple

import duckdb

from gpufleet.warehouse.base import TableDoc, document

TABLE = "notices_sent"

SENT_LOG_DDL = """
create table if not exists notices_sent (
    day date not null,
    kind varchar not null,
    episode_id bigint not null,
    gpu_uuid varchar not null,
    "user" varchar,
    team varchar not null,
    recipient varchar not null,
    message_id varchar not null,
    sent_at timestamptz not null,
    status varchar not null default 'sent',
    reply varchar
);
"""
# A notices_sent of an earlier version: every row of it is a sent notice.
_SENT_LOG_COLUMNS_DDL = """
alter table notices_sent add column if not exists status varchar default 'sent';
alter table notices_sent add column if not exists reply varchar;
alter table notices_sent alter column "user" drop not null;
"""
SENT, REFUSED = "sent", "refused"
SENT_LOG_DOCS: tuple[TableDoc, ...] = (
    (
        TABLE,
        None,
        "One row per idle episode an idle notice was sent for (gpufleet notify idle --send), "
        "written once the SMTP server accepted the message: an episode is never notified "
        "twice; and per episode of a notice an address refused (status 'refused'), tried "
        "again by the next run. Not a model: builds keep it.",
    ),
    (TABLE, "day", "The local day the notice was for (--day)."),
    (
        TABLE,
        "kind",
        "'user': mailed to the user; 'team_lead': the user has no address, so "
        "the episode was listed in the mail to the team's lead.",
    ),
    (TABLE, "episode_id", "The episode (idle_episodes.episode_id)."),
    (TABLE, "gpu_uuid", "The episode's GPU (idle_episodes.gpu_uuid)."),
    (TABLE, "user", "The episode's user (null: a job with no known user, listed to its lead)."),
    (TABLE, "team", "The episode's team."),
    (TABLE, "recipient", "The address the notice was sent to (To:), or the refused address."),
    (TABLE, "message_id", "The Message-ID of the email."),
    (TABLE, "sent_at", "When the SMTP server accepted (or refused) the message (TIMESTAMPTZ)."),
    (
        TABLE,
        "status",
        "'sent': the server accepted the notice for its recipient (To:), and the episode is "
        "not notified again; 'refused': it refused the address (To: or Cc:).",
    ),
    (TABLE, "reply", "The server's reply to a refused address (e.g. '550 5.1.1 ...')."),
)
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


def ensure_sent_log(con: duckdb.DuckDBPyConnection) -> None:
    """Create (and document) notices_sent if it does not exist yet, or add the columns an
    earlier version's lacks."""
    con.execute(SENT_LOG_DDL)
    con.execute(_SENT_LOG_COLUMNS_DDL)
    document(con, SENT_LOG_DOCS)


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
