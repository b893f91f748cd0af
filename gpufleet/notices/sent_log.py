"""`notices_sent`: every waste episode a notice was sent for, so none is sent twice.

A row is written only after the SMTP server accepted the message, in the warehouse's
write transaction. The table is none of the models', so a full build leaves it alone, and
the other warehouse slot gets it whole like the other small tables.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import NamedTuple

import duckdb

from gpufleet.warehouse.table_docs import TableDoc, document

TABLE = "notices_sent"

SENT_LOG_DDL = """
create table if not exists notices_sent (
    day date not null,
    kind varchar not null,
    episode_id bigint not null,
    gpu_uuid varchar not null,
    "user" varchar not null,
    team varchar not null,
    recipient varchar not null,
    message_id varchar not null,
    sent_at timestamptz not null
);
"""
SENT_LOG_DOCS: tuple[TableDoc, ...] = (
    (
        TABLE,
        None,
        "One row per idle episode an idle notice was sent for (gpufleet notify idle --send), "
        "written once the SMTP server accepted the message: an episode is never notified "
        "twice. Not a model: builds keep it.",
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
    (TABLE, "user", "The episode's user."),
    (TABLE, "team", "The episode's team."),
    (TABLE, "recipient", "The address the notice was sent to (To:)."),
    (TABLE, "message_id", "The Message-ID of the email."),
    (TABLE, "sent_at", "When the SMTP server accepted the message (TIMESTAMPTZ)."),
)


class SentEpisode(NamedTuple):
    """One episode of one accepted message."""

    day: dt.date
    kind: str
    episode_id: int
    gpu_uuid: str
    user: str
    team: str
    recipient: str
    message_id: str
    sent_at: dt.datetime


def ensure_sent_log(con: duckdb.DuckDBPyConnection) -> None:
    """Create (and document) notices_sent if it does not exist yet."""
    con.execute(SENT_LOG_DDL)
    document(con, SENT_LOG_DOCS)


def has_sent_log(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the warehouse on `con` has notices_sent (nothing was ever sent otherwise)."""
    row = con.execute(
        "select count(*) from duckdb_tables() where database_name = current_database()"
        " and schema_name = 'main' and table_name = ?",
        [TABLE],
    ).fetchone()
    return bool(row and row[0])


def record_sent(con: duckdb.DuckDBPyConnection, rows: Sequence[SentEpisode]) -> None:
    """Remember the episodes of accepted messages (in the caller's write transaction)."""
    if rows:
        con.executemany(
            "insert into notices_sent values (?, ?, ?, ?, ?, ?, ?, ?, ?)", [tuple(r) for r in rows]
        )
