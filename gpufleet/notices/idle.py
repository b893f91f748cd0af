"""`gpufleet notify idle`: the day's idle notices, previewed, written or sent.

- dry run: each message as text (recipients, subject, the text part) for the CLI to print;
  nothing is written, sent or recorded;
- write (the default): the messages as .eml files under `<data_dir>/notices/<day>/`
  (`<day>/<zone>/` for a run of the sites in one zone, `zone`, as `serve` runs them where
  the sites are in several: docs/sites.md);
- send: write them, send each through [smtp], then record the accepted messages'
  episodes in `notices_sent` in one short warehouse transaction. A lock of its own
  (`.notify.lock`) lets one sending run at a time, so two runs never send the same episode,
  and the warehouse's writers are not held up while the SMTP server answers. A notice
  counts as sent only once the server accepted it for its recipient (To:).

An address the server refuses (at RCPT TO, or the message after DATA) does not stop the
run: it is recorded in `notices_sent` with the server's reply ('refused'), the other
notices go out, and the run ends with one error line per refused address (exit status 1).
A notice whose To: was refused is not sent, so the next run tries it again (and its Cc:
with it); a refused Cc: of a sent notice is reported once, and the notice is not sent
again. An error that would fail every message (no connection, a refused login) stops the
sending: what was accepted before it is recorded, and the error is one line.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.console import printable, printable_lines
from gpufleet.errors import GpufleetError
from gpufleet.notices.episodes import day_episodes, read_contacts, yesterday
from gpufleet.notices.messages import build_notice, hours, usd
from gpufleet.notices.plan import USER, Notice, NoticePlan, plan_notices
from gpufleet.notices.sent_log import REFUSED, SENT, SentEpisode, record_sent
from gpufleet.site_zones import fleet_zones, last_complete_day
from gpufleet.smtp import Refusal, deliver
from gpufleet.warehouse.base.notices_sent import ensure_sent_log
from gpufleet.warehouse.publish import (
    DEFAULT_LOCK_TIMEOUT_S,
    connect_read_only,
    write_transaction,
    writer_lock,
)

DRY_RUN, WRITE, SEND = "dry-run", "write", "send"
NOTIFY_LOCK_NAME = ".notify.lock"  # in the data directory: one sending run at a time
MODES = (DRY_RUN, WRITE, SEND)
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, kw_only=True)
class RefusedNotice:
    """An address the SMTP server refused for a notice, and whether the notice went."""

    notice: Notice
    refusal: Refusal
    sent: bool  # the server accepted it for its To: (a copy was refused)

    def __str__(self) -> str:
        notice, refusal = self.notice, self.refusal
        head = (
            f"the idle notice for {notice.day} to {notice.to}: the SMTP server refused "
            f"{refusal.address}: {refusal.reply}"
        )
        if self.sent:
            return f"{head} (a copy; the notice was sent and is not sent again)"
        return f"{head} (not sent; the next --send tries it again)"


@dataclass(frozen=True, kw_only=True)
class NoticeRun:
    """What one run found, wrote and sent; `str()` is what the CLI prints, and `failures`
    the error lines it prints after (exit status 1 when there are any)."""

    plan: NoticePlan
    mode: str
    timezone: str  # the zones of its local day: the configured one and each site's
    directory: Path | None = None  # where the .eml files went
    files: tuple[Path, ...] = ()
    sent: tuple[Notice, ...] = ()
    refused: tuple[RefusedNotice, ...] = ()
    previews: tuple[str, ...] = ()  # a dry run's messages as text

    @property
    def failures(self) -> tuple[str, ...]:
        """One line per refused address, naming it and the server's reply."""
        return tuple(printable(refused) for refused in self.refused)

    def __str__(self) -> str:
        plan = self.plan
        episodes = sum(len(notice.episodes) for notice in plan.notices)
        totals = (
            f"{_count(len(plan.notices), 'notice')}, {_count(episodes, 'episode')}, "
            f"{hours(sum(n.gpu_hours for n in plan.notices))} GPU-hours, "
            f"{usd(sum(n.waste_usd for n in plan.notices))}"
            if plan.notices
            else "none"
        )
        # Names are escaped (`gpufleet.console`): a CR or LF in one would forge a line.
        lines = [printable_lines(preview) + "-" * 72 for preview in self.previews]
        lines.append(f"idle notices for {plan.day} ({self.timezone}): {totals}")
        lines += [f"  {printable(_describe(notice))}" for notice in plan.notices]
        lines += [printable(line) for line in _left_out(plan)]
        if self.mode == DRY_RUN:
            lines.append("dry run: nothing written, sent or recorded")
        elif self.files:
            lines.append(f"written: {_count(len(self.files), '.eml file')} in {self.directory}")
            lines.append(self._sent_line() if self.mode == SEND else "not sent: --send sends them")
        return "\n".join(lines)

    def _sent_line(self) -> str:
        if not self.refused:
            return f"sent: {_count(len(self.sent), 'notice')}, recorded in notices_sent"
        addresses = ", ".join(dict.fromkeys(r.refusal.address for r in self.refused))
        return (
            f"sent: {len(self.sent)} of {_count(len(self.plan.notices), 'notice')}, "
            f"recorded in notices_sent; refused by the SMTP server: {addresses}"
        )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _describe(notice: Notice) -> str:
    cc = f" (cc {', '.join(notice.cc)})" if notice.cc else ""
    who = (
        f"user {notice.user}"
        if notice.kind == USER
        else f"lead of team {notice.team}, for {', '.join(notice.users)} (no address)"
    )
    return (
        f"{notice.to}{cc}: {who}: {_count(len(notice.episodes), 'episode')}, "
        f"{hours(notice.gpu_hours)} GPU-hours, {usd(notice.waste_usd)}"
    )


def _left_out(plan: NoticePlan) -> list[str]:
    parts = []
    if plan.already_sent:
        parts.append(f"{_count(plan.already_sent, 'episode')} already notified")
    if plan.opted_out:
        parts.append(f"opted out: {', '.join(plan.opted_out)}")
    if plan.below_threshold:
        parts.append(f"under [notify] min_waste_gpu_hours: {', '.join(plan.below_threshold)}")
    lines = [f"left out: {'; '.join(parts)}"] if parts else []
    if plan.unreachable:
        who = ", ".join(f"{user} (team {team})" for user, team in plan.unreachable)
        lines.append(
            f"not notified, no address in ref/users.csv and no lead in ref/teams.csv: {who}"
        )
    return lines


def _plan(
    con: duckdb.DuckDBPyConnection, config: Config, day: dt.date, zone: str | None
) -> NoticePlan:
    episodes = day_episodes(con, day, config.timezone, config.sites, only_zone=zone)
    return plan_notices(day, episodes, read_contacts(con), config.notify)


def _file_name(notice: Notice) -> str:
    """`user-<name>.eml` or `team-<name>.eml`, with a hash where the name needed changes."""
    name = (notice.user if notice.kind == USER else notice.team) or ""
    slug = _UNSAFE_RE.sub("_", name).strip("._")[:60] or "_"
    if slug != name:
        slug += "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{'user' if notice.kind == USER else 'team'}-{slug}.eml"


def _write(
    directory: Path, notices: Sequence[Notice], messages: Sequence[EmailMessage]
) -> list[Path]:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for notice, message in zip(notices, messages, strict=True):
            path = directory / _file_name(notice)
            path.write_bytes(message.as_bytes())
            paths.append(path)
    except OSError as exc:
        problem = exc.strerror or exc
        raise GpufleetError(f"{directory}: cannot write the notices: {problem}") from exc
    return paths


def preview(notice: Notice, message: EmailMessage) -> str:
    """The message as a dry run prints it: recipients, subject and the text part."""
    text = message.get_body(preferencelist=("plain",))
    body = text.get_content() if isinstance(text, EmailMessage) else ""
    cc = f"Cc: {', '.join(notice.cc)}\n" if notice.cc else ""
    return f"To: {notice.to}\n{cc}Subject: {message['Subject']}\n\n{body.rstrip()}\n"


def _sent_rows(
    notice: Notice, message: EmailMessage, at: dt.datetime, refusal: Refusal | None = None
) -> list[SentEpisode]:
    """The sent-log rows of an accepted notice, or of one address it was refused for."""
    recipient, status, reply = (
        (notice.to, SENT, None) if refusal is None else (refusal.address, REFUSED, refusal.reply)
    )
    return [
        SentEpisode(
            day=notice.day,
            kind=notice.kind,
            episode_id=episode.episode_id,
            gpu_uuid=episode.gpu_uuid,
            user=episode.user,
            team=episode.team,
            recipient=recipient,
            message_id=str(message["Message-ID"]),
            sent_at=at,
            status=status,
            reply=reply,
        )
        for episode in notice.episodes
    ]


@dataclass
class _Sending:
    """What the sending did so far: the notices accepted, the refused addresses, the
    sent-log rows of both, and the error that stopped it, if one did."""

    sent: list[Notice]
    refused: list[RefusedNotice]
    rows: list[SentEpisode]
    failure: GpufleetError | None = None


def _send_all(
    config: Config, notices: Sequence[Notice], messages: Sequence[EmailMessage]
) -> _Sending:
    """Send each message; a refused address is recorded and the sending goes on, an error
    that would fail every message stops it."""
    done = _Sending(sent=[], refused=[], rows=[])
    for notice, message in zip(notices, messages, strict=True):
        try:
            delivery = deliver(
                config,
                message,
                sender=config.report.sender,
                recipients=notice.recipients,
                what=f"the idle notice to {notice.to}",
            )
        except GpufleetError as exc:
            done.failure = exc
            return done
        at = dt.datetime.now(dt.UTC)
        accepted = notice.to in delivery.accepted
        if accepted:
            done.rows += _sent_rows(notice, message, at)
            done.sent.append(notice)
        for refusal in delivery.refused:
            done.rows += _sent_rows(notice, message, at, refusal)
            done.refused.append(RefusedNotice(notice=notice, refusal=refusal, sent=accepted))
    return done


def _record(config: Config, rows: Sequence[SentEpisode]) -> None:
    """Publish the sent-log rows in one short warehouse transaction."""
    with write_transaction(config) as con:
        ensure_sent_log(con)
        record_sent(con, rows)


def notify_idle(
    config: Config, *, day: dt.date | None = None, mode: str = WRITE, zone: str | None = None
) -> NoticeRun:
    """The idle notices of `day`, the local day at each host's site (default: the last day
    that has ended at every site); with `zone`, of the sites in that zone only (the
    configured zone's: those with no zone of their own too), `day` by default yesterday
    there."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    zones = (zone,) if zone else fleet_zones(config)
    day = day or (yesterday(zone) if zone else last_complete_day(zones))
    directory = config.notices_dir / day.isoformat()
    if zone:
        directory /= _UNSAFE_RE.sub("_", zone)
    timezone = ", ".join(zones)
    with connect_read_only(config) as con:
        plan = _plan(con, config, day, zone)
    if mode == DRY_RUN:
        previews = tuple(preview(notice, build_notice(notice, config)) for notice in plan.notices)
        return NoticeRun(plan=plan, mode=mode, timezone=timezone, previews=previews)
    if mode == WRITE or not plan.notices:
        messages = [build_notice(notice, config) for notice in plan.notices]
        files = _write(directory, plan.notices, messages) if messages else []
        return NoticeRun(
            plan=plan, mode=mode, timezone=timezone, directory=directory, files=tuple(files)
        )
    # One sending run at a time (its own lock, not the warehouse's: ingest and build go on
    # while the SMTP server answers); each run records what it sent before the next plans.
    with writer_lock(
        config.data_dir / NOTIFY_LOCK_NAME,
        DEFAULT_LOCK_TIMEOUT_S,
        holder="another 'gpufleet notify idle --send' is sending",
    ):
        with connect_read_only(config) as con:
            plan = _plan(con, config, day, zone)  # what earlier runs recorded is left out
        messages = [build_notice(notice, config) for notice in plan.notices]
        files = _write(directory, plan.notices, messages)
        done = _send_all(config, plan.notices, messages)
        if done.rows:
            _record(config, done.rows)
    if done.failure is not None:
        refused = f", {len(done.refused)} refused" if done.refused else ""
        raise GpufleetError(
            f"sent {len(done.sent)} of {len(plan.notices)} idle notices for {day}{refused} "
            f"(all written to {directory}; the sent ones recorded); then: {done.failure} "
            f"(run 'gpufleet notify idle --day {day} --send' again to send the rest)"
        ) from done.failure
    return NoticeRun(
        plan=plan,
        mode=mode,
        timezone=timezone,
        directory=directory,
        files=tuple(files),
        sent=tuple(done.sent),
        refused=tuple(done.refused),
    )
