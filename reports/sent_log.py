"""`reports_sent`: to whom each week's report and team emails went, so none goes twice.

`send_once` sends a week's messages the way `gpufleet report --send` does:

- each message goes only to those of its recipients that have no 'sent' row for it in the
  week, so a re-run after a partial failure sends only what did not go, and a re-run after
  a full success sends nothing (and says "already sent");
- each recipient's answer is a row: 'sent' once the SMTP server accepted the message for
  it, 'refused' with the server's reply when it would not. A refusal does not stop the
  other messages, and the next run tries the refused recipient again;
- the rows are recorded in one short warehouse transaction once the sending ends, also when
  it ends in an error (an unreachable server), so what went before is never sent again;
- one sending run at a time, under a lock of its own (`.report.lock`), so two runs never
  send the same message, and ingest and build are not held up while the server answers.

A run killed between a message's acceptance and its record sends that message again. The
table is none of the models', so a full build leaves it alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from typing import NamedTuple

import duckdb

from gpufleet.config import Config
from gpufleet.smtp import Refusal, deliver
from gpufleet.warehouse.base import TableDoc, document
from gpufleet.warehouse.publish import (
    DEFAULT_LOCK_TIMEOUT_S,
    connect_read_only,
    write_transaction,
    writer_lock,
)

TABLE = "reports_sent"
FLEET, TEAM = "fleet", "team"  # which email of the week
SENT, REFUSED = "sent", "refused"
REPORT_LOCK_NAME = ".report.lock"  # in the data directory: one sending run at a time

REPORTS_SENT_DDL = """
create table if not exists reports_sent (
    iso_week varchar not null,
    email varchar not null,
    team varchar,
    recipient varchar not null,
    status varchar not null,
    reply varchar,
    message_id varchar not null,
    sent_at timestamptz not null
);
"""
REPORTS_SENT_DOCS: tuple[TableDoc, ...] = (
    (
        TABLE,
        None,
        "One row per recipient of each weekly email that gpufleet report --send handed to "
        "the SMTP server, with its answer: a re-run sends a week's email only to the "
        "recipients without a 'sent' row. Not a model: builds keep it.",
    ),
    (TABLE, "iso_week", "The report's week, YYYY-Www."),
    (
        TABLE,
        "email",
        "'fleet': the weekly report; 'team': a team's email to its lead (--per-team).",
    ),
    (TABLE, "team", "The team of a team email; null for the fleet report."),
    (TABLE, "recipient", "The address (an envelope recipient: To or Cc)."),
    (
        TABLE,
        "status",
        "'sent': the server accepted the message for the recipient; 'refused': it did not "
        "(the next --send tries it again).",
    ),
    (TABLE, "reply", "The server's reply to a refused recipient (e.g. '550 5.1.1 ...')."),
    (TABLE, "message_id", "The Message-ID of the email."),
    (TABLE, "sent_at", "When the server answered (TIMESTAMPTZ)."),
)


class SentRecipient(NamedTuple):
    """One recipient's answer for one message."""

    iso_week: str
    email: str
    team: str | None
    recipient: str
    status: str
    reply: str | None
    message_id: str
    sent_at: dt.datetime


@dataclass(frozen=True, kw_only=True)
class Outgoing:
    """One message of the week to send: which email it is, and to whom."""

    email: str  # FLEET or TEAM
    team: str | None  # TEAM emails
    message: EmailMessage
    recipients: tuple[str, ...]
    what: str  # for an error line: "the report", "team nlp's report"


@dataclass(frozen=True, kw_only=True)
class Sending:
    """What one run did with one message."""

    sent_to: tuple[str, ...] = ()  # accepted now
    already_sent_to: tuple[str, ...] = ()  # accepted by an earlier run: not sent again
    refused: tuple[Refusal, ...] = ()  # refused now, with the server's reply


def refused_line(what: str, refusal: Refusal) -> str:
    """The error line of one refused recipient of `what` ("the report for 2026-W46")."""
    return (
        f"{what}: the SMTP server refused {refusal.address}: {refusal.reply} "
        "(not sent to it; the next --send tries it again)"
    )


def _delivered(con: duckdb.DuckDBPyConnection, week: str) -> set[tuple[str, str | None, str]]:
    """(email, team, recipient casefolded) of the week's accepted messages."""
    exists = con.execute(
        "select count(*) from duckdb_tables() where database_name = current_database()"
        " and schema_name = 'main' and table_name = ?",
        [TABLE],
    ).fetchone()
    if not exists or not exists[0]:
        return set()
    rows = con.execute(
        "select distinct email, team, lower(recipient) from reports_sent"
        " where iso_week = ? and status = ?",
        [week, SENT],
    ).fetchall()
    return {(email, team, recipient) for email, team, recipient in rows}


def _record(config: Config, rows: Sequence[SentRecipient]) -> None:
    """Publish the rows in one short warehouse transaction."""
    with write_transaction(config) as con:
        con.execute(REPORTS_SENT_DDL)
        document(con, REPORTS_SENT_DOCS)
        con.executemany(
            "insert into reports_sent"
            " (iso_week, email, team, recipient, status, reply, message_id, sent_at)"
            " values (?, ?, ?, ?, ?, ?, ?, ?)",
            [tuple(row) for row in rows],
        )


def _answers(week: str, item: Outgoing, sending: Sending) -> list[SentRecipient]:
    at = dt.datetime.now(dt.UTC)
    message_id = str(item.message["Message-ID"])
    answers: list[tuple[str, str, str | None]] = [(a, SENT, None) for a in sending.sent_to]
    answers += [(refusal.address, REFUSED, refusal.reply) for refusal in sending.refused]
    return [
        SentRecipient(week, item.email, item.team, address, status, reply, message_id, at)
        for address, status, reply in answers
    ]


def send_once(config: Config, week: str, outgoing: Sequence[Outgoing]) -> list[Sending]:
    """Send each message to those of its recipients it has not gone to yet (see the module);
    returns what happened to each, in order. An error that stops the sending (no
    connection, a refused login) is raised once what went before it is recorded."""
    with writer_lock(
        config.data_dir / REPORT_LOCK_NAME,
        DEFAULT_LOCK_TIMEOUT_S,
        holder="another 'gpufleet report --send' is sending",
    ):
        with connect_read_only(config) as con:
            delivered = _delivered(con, week)
        results: list[Sending] = []
        rows: list[SentRecipient] = []
        try:
            for item in outgoing:
                recipients = tuple({r.lower(): r for r in item.recipients}.values())
                done = tuple(
                    r for r in recipients if (item.email, item.team, r.lower()) in delivered
                )
                pending = tuple(r for r in recipients if r not in done)
                if not pending:
                    results.append(Sending(already_sent_to=done))
                    continue
                delivery = deliver(
                    config,
                    item.message,
                    sender=config.report.sender,
                    recipients=pending,
                    what=item.what,
                )
                sending = Sending(
                    sent_to=delivery.accepted, already_sent_to=done, refused=delivery.refused
                )
                rows += _answers(week, item, sending)
                results.append(sending)
        finally:
            if rows:
                _record(config, rows)
    return results
