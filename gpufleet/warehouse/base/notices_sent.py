"""`notices_sent`, the idle notices' record of what was sent: its DDL and comments.

The warehouse creates it with the raw tables, empty until a notice is sent, so that a query
of it works from the first ingest on; the notices (`gpufleet.notices.sent_log`) write and
read it.
"""

from __future__ import annotations

import duckdb

from gpufleet.warehouse.base.table_docs import TableDoc, document

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


def ensure_sent_log(con: duckdb.DuckDBPyConnection) -> None:
    """Create (and document) notices_sent if it does not exist yet, or add the columns an
    earlier version's lacks."""
    con.execute(SENT_LOG_DDL)
    con.execute(_SENT_LOG_COLUMNS_DDL)
    document(con, SENT_LOG_DOCS)
