"""`gpufleet notify idle`: the day's idle notices, previewed, written or sent.

- dry run: each message as text (recipients, subject, the text part) for the CLI to print;
  nothing is written, sent or recorded;
- write (the default): the messages as .eml files under `<data_dir>/notices/<day>/`;
- send: write them, send each through [smtp], then record the accepted messages'
  episodes in `notices_sent` in one short warehouse transaction. A lock of its own
  (`.notify.lock`) lets one sending run at a time, so two runs never send the same episode,
  and the warehouse's writers are not held up while the SMTP server answers. A message
  counts as sent only once the server accepted it; the first failure stops the sending,
  what was accepted before it is recorded, and the error is one line.
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
from gpufleet.errors import GpufleetError
from gpufleet.notices.episodes import day_episodes, read_contacts, yesterday
from gpufleet.notices.messages import build_notice, hours, usd
from gpufleet.notices.plan import USER, Notice, NoticePlan, plan_notices
from gpufleet.notices.sent_log import SentEpisode, ensure_sent_log, record_sent
from gpufleet.reports.smtp import deliver
from gpufleet.warehouse.slot_files import writer_lock
from gpufleet.warehouse.slots import DEFAULT_LOCK_TIMEOUT_S, connect_read_only, write_transaction

DRY_RUN, WRITE, SEND = "dry-run", "write", "send"
NOTIFY_LOCK_NAME = ".notify.lock"  # in the data directory: one sending run at a time
MODES = (DRY_RUN, WRITE, SEND)
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, kw_only=True)
class NoticeRun:
    """What one run found, wrote and sent; `str()` is what the CLI prints."""

    plan: NoticePlan
    mode: str
    timezone: str
    directory: Path | None = None  # where the .eml files went
    files: tuple[Path, ...] = ()
    sent: tuple[Notice, ...] = ()
    previews: tuple[str, ...] = ()  # a dry run's messages as text

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
        lines = [preview + "-" * 72 for preview in self.previews]
        lines.append(f"idle notices for {plan.day} ({self.timezone}): {totals}")
        lines += [f"  {_describe(notice)}" for notice in plan.notices]
        lines += _left_out(plan)
        if self.mode == DRY_RUN:
            lines.append("dry run: nothing written, sent or recorded")
        elif self.files:
            lines.append(f"written: {_count(len(self.files), '.eml file')} in {self.directory}")
            lines.append(
                f"sent: {_count(len(self.sent), 'notice')}, recorded in notices_sent"
                if self.mode == SEND
                else "not sent: --send sends them"
            )
        return "\n".join(lines)


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


def _plan(con: duckdb.DuckDBPyConnection, config: Config, day: dt.date) -> NoticePlan:
    episodes = day_episodes(con, day, config.timezone)
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


def _sent_rows(notice: Notice, message: EmailMessage, at: dt.datetime) -> list[SentEpisode]:
    return [
        SentEpisode(
            day=notice.day,
            kind=notice.kind,
            episode_id=episode.episode_id,
            gpu_uuid=episode.gpu_uuid,
            user=episode.user,
            team=episode.team,
            recipient=notice.to,
            message_id=str(message["Message-ID"]),
            sent_at=at,
        )
        for episode in notice.episodes
    ]


def _send_all(
    config: Config, notices: Sequence[Notice], messages: Sequence[EmailMessage]
) -> tuple[list[Notice], list[SentEpisode], GpufleetError | None]:
    """Send each message; stop at the first failure. Returns what the server accepted and
    the sent-log rows to record for it."""
    sent: list[Notice] = []
    rows: list[SentEpisode] = []
    for notice, message in zip(notices, messages, strict=True):
        try:
            deliver(
                config,
                message,
                sender=config.report.sender,
                recipients=notice.recipients,
                what=f"the idle notice to {notice.to}",
            )
        except GpufleetError as exc:
            return sent, rows, exc
        rows += _sent_rows(notice, message, dt.datetime.now(dt.UTC))
        sent.append(notice)
    return sent, rows, None


def _record(config: Config, rows: Sequence[SentEpisode]) -> None:
    """Publish the sent-log rows in one short warehouse transaction."""
    with write_transaction(config) as con:
        ensure_sent_log(con)
        record_sent(con, rows)


def notify_idle(config: Config, *, day: dt.date | None = None, mode: str = WRITE) -> NoticeRun:
    """The idle notices of `day` (default: yesterday in the configured zone)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    day = day or yesterday(config.timezone)
    directory = config.notices_dir / day.isoformat()
    with connect_read_only(config) as con:
        plan = _plan(con, config, day)
    if mode == DRY_RUN:
        previews = tuple(preview(notice, build_notice(notice, config)) for notice in plan.notices)
        return NoticeRun(plan=plan, mode=mode, timezone=config.timezone, previews=previews)
    if mode == WRITE or not plan.notices:
        messages = [build_notice(notice, config) for notice in plan.notices]
        files = _write(directory, plan.notices, messages) if messages else []
        return NoticeRun(
            plan=plan, mode=mode, timezone=config.timezone, directory=directory, files=tuple(files)
        )
    # One sending run at a time (its own lock, not the warehouse's: ingest and build go on
    # while the SMTP server answers); each run records what it sent before the next plans.
    with writer_lock(
        config.data_dir / NOTIFY_LOCK_NAME,
        DEFAULT_LOCK_TIMEOUT_S,
        holder="another 'gpufleet notify idle --send' is sending",
    ):
        with connect_read_only(config) as con:
            plan = _plan(con, config, day)  # what earlier runs recorded is left out
        messages = [build_notice(notice, config) for notice in plan.notices]
        files = _write(directory, plan.notices, messages)
        sent, rows, failure = _send_all(config, plan.notices, messages)
        if rows:
            _record(config, rows)
    if failure is not None:
        raise GpufleetError(
            f"sent {len(sent)} of {len(plan.notices)} idle notices for {day} (all written to "
            f"{directory}; the sent ones recorded); then: {failure} "
            f"(run 'gpufleet notify idle --day {day} --send' again to send the rest)"
        ) from failure
    return NoticeRun(
        plan=plan,
        mode=mode,
        timezone=config.timezone,
        directory=directory,
        files=tuple(files),
        sent=tuple(sent),
    )
