"""`gpufleet notify idle`: who is mailed what, through a real SMTP server, and never twice.

The fleet is tests/notify_fixtures.py's: alice (two episodes), dave (one still open) and
the nlp lead (for a user without an address) are mailed about day D; bob is under the
threshold, carol opted out, frank has neither an address nor a team lead.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import duckdb
import pytest
from aiosmtpd.smtp import Envelope, Session

from gpufleet.cli import main
from gpufleet.config import Config
from gpufleet.episode_groups import span
from gpufleet.errors import GpufleetError
from gpufleet.notices.episodes import yesterday
from gpufleet.notices.idle import DRY_RUN, notify_idle
from gpufleet.notices.messages import clock, hours, usd
from gpufleet.notices.sent_log import sent_episodes_sql
from gpufleet.reports.mail import read_message
from gpufleet.warehouse.base.notices_sent import ensure_sent_log
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import lock_path, writer_lock
from tests import notify_fixtures as fx
from tests.report_fixtures import REFUSAL_REPLY, Inbox, RefusingInbox, free_port, smtp_inbox

pytestmark = pytest.mark.fleet

D = fx.DAY.isoformat()
D1 = fx.NEXT_DAY.isoformat()


# --- helpers --------------------------------------------------------------------------


def rows(config: Config, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def sent_log(config: Config) -> list[tuple[Any, ...]]:
    """(day, kind, user, recipient) of every row of notices_sent (none without the table)."""
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        exists = con.execute(
            "select count(*) from duckdb_tables() where table_name = 'notices_sent'"
        ).fetchall()
        if not exists[0][0]:
            return []
        return con.execute(
            'select day, kind, "user", recipient from notices_sent order by day, "user"'
        ).fetchall()


def mart_episodes(config: Config, user: str) -> list[tuple[Any, ...]]:
    """The user's waste episodes as the idle_episodes mart has them."""
    return rows(
        config,
        "select host, gpu_index, gpu_name, job_id, start_ts, end_ts, idle_seconds, waste_usd"
        ' from idle_episodes where "user" = ? and is_waste order by start_ts',
        [user],
    )


def episode_line(row: tuple[Any, ...], *, still_open: bool = False) -> str:
    """How the text part shows one episode, from the mart row (times in UTC here)."""
    host, index, name, job, start, end, seconds, waste_usd = row
    start, end = start.astimezone(dt.UTC), end.astimezone(dt.UTC)
    tail = " (still idle at the last sample)" if still_open else ""
    return (
        f"- job {job} on {host} GPU {index} ({name}): 1 GPU idle {span(seconds)}, from "
        f"{clock(start)} to {clock(end)}{tail}: {hours(seconds / 3600)} GPU-hours, "
        f"{usd(waste_usd)}; memory still allocated"
    )


def by_recipient(inbox: Inbox) -> dict[str, tuple[Envelope, EmailMessage]]:
    return {
        envelope.rcpt_tos[0]: (envelope, inbox.message(index))
        for index, envelope in enumerate(inbox.envelopes)
    }


def parts(message: EmailMessage) -> tuple[str, str]:
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert isinstance(text, EmailMessage) and isinstance(html, EmailMessage)
    return text.get_content(), html.get_content()


def notify(config: Config, *args: str) -> int:
    assert config.source is not None
    return main(["--config", str(config.source), "notify", "idle", *args])


# --- what is sent -----------------------------------------------------------------------


def test_send_mails_each_user_their_episodes_with_the_marts_figures(
    tmp_path: Path, inbox: tuple[Inbox, int], capsys: pytest.CaptureFixture[str]
) -> None:
    handler, port = inbox
    config = fx.make_fleet(tmp_path, extra=fx.smtp_section(port))

    assert notify(config, "--day", D, "--send") == 0

    out = capsys.readouterr().out
    assert "sent: 3 notices, recorded in notices_sent" in out
    assert "left out: opted out: carol; under [notify] min_waste_gpu_hours: bob" in out
    assert "no lead in ref/teams.csv: frank (team cv)" in out
    mails = by_recipient(handler)
    assert sorted(mails) == ["alice@example.org", "dave@example.org", "nlp-lead@example.org"]
    assert all(envelope.mail_from == "gpufleet@example.org" for envelope, _ in mails.values())

    envelope, message = mails["alice@example.org"]
    assert envelope.rcpt_tos == ["alice@example.org"] and message["To"] == "alice@example.org"
    alice = mart_episodes(config, "alice")
    assert len(alice) == 2
    total_hours, total_usd = sum(r[6] for r in alice) / 3600, sum(r[7] for r in alice)
    assert (total_hours, total_usd) == (5.5, 13.75)  # 4 h + 1.5 h of H100 at $2.50
    assert message["Subject"] == (
        f"gpufleet: your idle GPUs on {D}: {hours(total_hours)} GPU-hours, {usd(total_usd)}"
    )
    text, html = parts(message)
    for row in alice:
        assert episode_line(row) in text
        assert f"<td>job {row[3]}</td>" in html and f"<td>{row[0]} GPU {row[1]} " in html
    assert f"Total: {hours(total_hours)} GPU-hours, {usd(total_usd)}." in text
    # the jobs of processes are Slurm jobs (processes.job_id): each line says how to end it
    assert "  What to do: end the job if it no longer needs them: scancel 101" in text
    assert "  What to do: end the job if it no longer needs them: scancel 102" in text

    _, message = mails["dave@example.org"]
    text, _ = parts(message)
    (dave,) = mart_episodes(config, "dave")
    assert episode_line(dave, still_open=True) in text  # 22:00 D to 02:00 D+1, still idle

    envelope, message = mails["nlp-lead@example.org"]
    assert envelope.rcpt_tos == ["nlp-lead@example.org", "ops@example.org", "fin@example.org"]
    assert message["Cc"] == "ops@example.org, fin@example.org"
    assert "team nlp" in message["Subject"]
    text, _ = parts(message)
    (evil,) = mart_episodes(config, fx.EVIL)
    assert f"User {fx.EVIL}:" in text and episode_line(evil) in text

    assert sent_log(config) == [
        (fx.DAY, "team_lead", fx.EVIL, "nlp-lead@example.org"),
        (fx.DAY, "user", "alice", "alice@example.org"),
        (fx.DAY, "user", "alice", "alice@example.org"),
        (fx.DAY, "user", "dave", "dave@example.org"),
    ]
    written = sorted((tmp_path / "notices" / D).glob("*.eml"))
    assert len(written) == 3
    assert {read_message(path)["To"] for path in written} == set(mails)


def test_names_are_escaped_in_the_html_part(tmp_path: Path, inbox: tuple[Inbox, int]) -> None:
    handler, port = inbox
    config = fx.make_fleet(tmp_path, extra=fx.smtp_section(port))
    # The evil user now belongs to a team of the same name, which has a lead.
    (tmp_path / "ref/users.csv").write_text(
        fx.USERS_CSV.replace(f'"{fx.EVIL}",nlp,', f'"{fx.EVIL}","{fx.EVIL}",')
    )
    (tmp_path / "ref/teams.csv").write_text(f'team,lead_email\n"{fx.EVIL}",boss@example.org\n')
    ingest(config, compact=False)
    build(config)

    assert notify(config, "--day", D, "--send") == 0

    _, message = by_recipient(handler)["boss@example.org"]
    assert message["Subject"].startswith(f"gpufleet: idle GPUs of team {fx.EVIL} on {D}")
    text, html = parts(message)
    assert "<script" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 3  # title, team, user
    assert f"team {fx.EVIL} were held by users with no email" in text
    assert f"User {fx.EVIL}:" in text
    (path,) = (tmp_path / "notices" / D).glob("team-*.eml")
    assert path.parent == tmp_path / "notices" / D and "<" not in path.name


# --- never twice ------------------------------------------------------------------------


def test_a_rerun_sends_nothing_even_after_a_full_build_and_more_data(
    tmp_path: Path, inbox: tuple[Inbox, int], capsys: pytest.CaptureFixture[str]
) -> None:
    handler, port = inbox
    config = fx.make_fleet(tmp_path, extra=fx.smtp_section(port))
    assert notify(config, "--day", D, "--send") == 0
    assert len(handler.envelopes) == 3
    capsys.readouterr()

    assert notify(config, "--day", D, "--send") == 0
    assert len(handler.envelopes) == 3
    assert "none" in capsys.readouterr().out.splitlines()[0]

    # A full build, then more data: dave's open episode goes on (the same episode, longer),
    # alice gets a new one on D+1; ingested (with compaction: D's files go to the lake)
    # and built incrementally.
    assert build(config, full=True).mode == "full"
    d1 = fx.NEXT_DAY
    fx.write_samples(
        tmp_path,
        "day-two",
        [
            *fx.samples("GPU-a2", "node-a", 2, fx.H100, "dave", "401",
                        [(fx.at(d1, 2), fx.at(d1, 4), fx.IDLE)]),
            *fx.samples("GPU-a0", "node-a", 0, fx.H100, "alice", "103",
                        [(fx.at(d1, 8), fx.at(d1, 9), fx.BUSY),
                         (fx.at(d1, 9), fx.at(d1, 12), fx.IDLE)]),
        ],
    )  # fmt: skip
    ingest(config)
    assert build(config).mode == "incremental"
    assert rows(config, "select idle_seconds from idle_episodes where \"user\" = 'dave'") == [
        (6 * 3600.0,)
    ]

    assert notify(config, "--day", D, "--send") == 0
    assert len(handler.envelopes) == 3  # nothing of D again
    assert notify(config, "--day", D1, "--send") == 0
    new = by_recipient(Inbox(envelopes=handler.envelopes[3:]))
    assert sorted(new) == ["alice@example.org", "erin@example.org"]  # not dave's again
    text, _ = parts(new["alice@example.org"][1])
    assert "job 103" in text and "job 101" not in text and "job 102" not in text
    assert len(sent_log(config)) == 4 + 2
    assert "1 episode already notified" in capsys.readouterr().out  # dave's


# --- dry run, files only, the rules ------------------------------------------------------


def test_dry_run_prints_the_messages_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = fx.make_fleet(tmp_path)
    before = config.warehouse_path.read_bytes()

    assert notify(config, "--day", D, "--dry-run") == 0

    out = capsys.readouterr().out
    assert "To: alice@example.org\nSubject: gpufleet: your idle GPUs on 2026-11-16: 5.50" in out
    assert "To: nlp-lead@example.org\nCc: ops@example.org, fin@example.org\n" in out
    assert episode_line(mart_episodes(config, "alice")[0]) in out
    assert "dry run: nothing written, sent or recorded" in out
    assert not (tmp_path / "notices").exists()
    assert config.warehouse_path.read_bytes() == before
    assert sent_log(config) == []


def test_without_flags_the_messages_are_written_not_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = fx.make_fleet(tmp_path, extra=fx.smtp_section(free_port()))  # nothing listens

    assert notify(config, "--day", D) == 0

    out = capsys.readouterr().out
    assert f"written: 3 .eml files in {tmp_path / 'notices' / D}" in out
    assert "not sent: --send sends them" in out
    written = {path.name: read_message(path) for path in (tmp_path / "notices" / D).iterdir()}
    assert sorted(written) == ["team-nlp.eml", "user-alice.eml", "user-dave.eml"]
    assert written["user-alice.eml"]["To"] == "alice@example.org"
    assert sent_log(config) == []


@pytest.mark.parametrize(
    ("notify_lines", "mailed", "unreachable"),
    [
        # hours: alice 5.5, carol 5 (opted out), dave 4, the nlp lead's user 3, bob 0.67
        (fx.OPT_OUT_CAROL + "min_waste_gpu_hours = 0.5\n", {"alice", "bob", "dave", "nlp-lead"},
         {"frank"}),
        (fx.OPT_OUT_CAROL + "min_waste_gpu_hours = 5\n", {"alice"}, set()),
        ("min_waste_gpu_hours = 0\nopt_out = ['alice', 'NLP-lead@example.org']\n",
         {"bob", "carol", "dave"}, {fx.EVIL, "frank"}),
    ],
)  # fmt: skip
def test_the_threshold_and_the_opt_out_list(
    tmp_path: Path, notify_lines: str, mailed: set[str], unreachable: set[str]
) -> None:
    config = fx.make_fleet(tmp_path, notify=notify_lines)
    plan = notify_idle(config, day=fx.DAY, mode=DRY_RUN).plan
    assert {notice.to.split("@")[0] for notice in plan.notices} == mailed
    assert {user for user, _ in plan.unreachable} == unreachable


def test_an_episode_belongs_to_the_local_day_it_ended_or_is_still_open_in(
    tmp_path: Path,
) -> None:
    config = fx.make_fleet(tmp_path)
    day = {n.user for n in notify_idle(config, day=fx.DAY, mode=DRY_RUN).plan.notices}
    next_day = notify_idle(config, day=fx.NEXT_DAY, mode=DRY_RUN).plan.notices
    assert day == {"alice", "dave", None}  # None: the lead's; erin's ended on D+1
    assert {n.user for n in next_day} == {"dave", "erin"}  # dave's is still open on D+1

    # In New York (UTC-5) erin's episode ends at 20:00 on D: it is D's, and only D's.
    config = fx.make_fleet(tmp_path / "ny", timezone="America/New_York")
    notices = notify_idle(config, day=fx.DAY, mode=DRY_RUN).plan.notices
    next_day = notify_idle(config, day=fx.NEXT_DAY, mode=DRY_RUN).plan.notices
    assert {"erin", "dave"} <= {n.user for n in notices}
    assert {n.user for n in next_day} == set()
    (erin,) = [n for n in notices if n.user == "erin"]
    assert clock(erin.episodes[0].end_ts) == "2026-11-16 20:00"


def test_the_default_day_is_yesterday_in_the_configured_zone() -> None:
    now = dt.datetime(2026, 11, 16, 20, 0, tzinfo=dt.UTC)  # 09:00 on the 17th in Auckland
    assert yesterday("UTC", now) == dt.date(2026, 11, 15)
    assert yesterday("Pacific/Auckland", now) == dt.date(2026, 11, 16)


# --- failures -----------------------------------------------------------------------------


def test_an_unreachable_server_is_one_error_line_files_written_nothing_marked_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()  # nothing listens there
    config = fx.make_fleet(tmp_path, extra=fx.smtp_section(port))

    assert notify(config, "--day", D, "--send") == 1

    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert err.startswith(f"gpufleet: error: sent 0 of 3 idle notices for {D} (all written to ")
    assert (
        f"cannot send the idle notice to alice@example.org through SMTP server 127.0.0.1:{port}"
        in err
    )
    assert len(list((tmp_path / "notices" / D).glob("*.eml"))) == 3
    assert sent_log(config) == []

    with smtp_inbox() as (handler, port):  # the server is back: everything goes out once
        config = fx.write_config(tmp_path, extra=fx.smtp_section(port))
        assert notify(config, "--day", D, "--send") == 0
    assert len(handler.envelopes) == 3 and len(sent_log(config)) == 4


def refusals(config: Config) -> list[tuple[Any, ...]]:
    """(user, recipient, reply) of the refused rows of notices_sent."""
    return rows(
        config,
        "select distinct \"user\", recipient, reply from notices_sent where status = 'refused'"
        " order by all",
    )


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("gpufleet: error: ")]


def test_a_refused_address_is_recorded_and_reported_and_the_others_are_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refusing = RefusingInbox(refused=frozenset({"dave@example.org"}))
    with smtp_inbox(refusing) as (handler, port):
        config = fx.make_fleet(tmp_path, extra=fx.smtp_section(port))
        assert notify(config, "--day", D, "--send") == 1
        out, err = capsys.readouterr()
        # dave's is refused; alice's and the nlp lead's, after it, go out all the same
        assert sorted(e.rcpt_tos[0] for e in handler.envelopes) == [
            "alice@example.org",
            "nlp-lead@example.org",
        ]
        (line,) = errors(err)
        assert "dave@example.org" in line and REFUSAL_REPLY in line and D in line
        assert "sent: 2 of 3 notices, recorded in notices_sent" in out
        assert "refused by the SMTP server: dave@example.org" in out
        assert {(user, recipient) for _, _, user, recipient in sent_log(config)} >= {
            ("alice", "alice@example.org"),
            (fx.EVIL, "nlp-lead@example.org"),
        }
        assert refusals(config) == [("dave", "dave@example.org", REFUSAL_REPLY)]

        # the next run tries dave again, and says so again; the others are not sent again
        assert notify(config, "--day", D, "--send") == 1
        out, err = capsys.readouterr()
        (line,) = errors(err)
        assert "dave@example.org" in line and REFUSAL_REPLY in line
        assert refusing.tried.count("dave@example.org") == 2
        assert len(handler.envelopes) == 2
        assert "3 episodes already notified" in out  # alice's two, the lead's one

    with smtp_inbox() as (handler, port):  # dave's mailbox is back: his notice, once
        config = fx.write_config(tmp_path, extra=fx.smtp_section(port))
        assert notify(config, "--day", D, "--send") == 0
        assert [e.rcpt_tos for e in handler.envelopes] == [["dave@example.org"]]
        assert errors(capsys.readouterr().err) == []
        assert notify(config, "--day", D, "--send") == 0
        assert len(handler.envelopes) == 1


def test_a_refused_copy_is_reported_once_the_notice_counts_as_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refusing = RefusingInbox(refused=frozenset({"ops@example.org"}))  # the nlp lead's cc
    with smtp_inbox(refusing) as (handler, port):
        config = fx.make_fleet(tmp_path, extra=fx.smtp_section(port))
        assert notify(config, "--day", D, "--send") == 1
        (line,) = errors(capsys.readouterr().err)
        assert "ops@example.org" in line and "nlp-lead@example.org" in line
        assert "a copy" in line
        lead = [e.rcpt_tos for e in handler.envelopes if "nlp-lead@example.org" in e.rcpt_tos]
        assert lead == [["nlp-lead@example.org", "fin@example.org"]]
        assert refusals(config) == [(fx.EVIL, "ops@example.org", REFUSAL_REPLY)]

        assert notify(config, "--day", D, "--send") == 0  # the notice went: not again
        assert len(handler.envelopes) == 3


def test_a_sent_log_of_an_earlier_version_counts_as_sent_and_gains_the_new_columns() -> None:
    with duckdb.connect() as con:
        con.execute(
            "create table notices_sent (day date, kind varchar, episode_id bigint,"
            ' gpu_uuid varchar, "user" varchar, team varchar, recipient varchar,'
            " message_id varchar, sent_at timestamptz)"
        )
        con.execute(
            "insert into notices_sent values (date '2026-11-16', 'user', 7, 'GPU-a0', 'alice',"
            " 'vision', 'alice@example.org', '<m@gpufleet>', now())"
        )
        assert con.execute(sent_episodes_sql(con)).fetchall() == [("GPU-a0", 7)]
        ensure_sent_log(con)
        assert con.execute("select status, reply from notices_sent").fetchall() == [("sent", None)]
        assert con.execute(sent_episodes_sql(con)).fetchall() == [("GPU-a0", 7)]
        con.execute("update notices_sent set status = 'refused'")
        assert con.execute(sent_episodes_sql(con)).fetchall() == []


def test_no_warehouse_or_no_build_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = fx.write_config(tmp_path)
    assert notify(config, "--day", D) == 1
    assert "no warehouse yet" in capsys.readouterr().err
    ingest(config)
    assert notify(config, "--day", D) == 1
    assert "no idle_episodes yet; run 'gpufleet build' first" in capsys.readouterr().err


def test_the_command_line_checks_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["notify", "idle", "--dry-run", "--send"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["notify", "idle", "--day", "16.11.2026"])
    assert info.value.code == 2
    assert "is not a date like 2026-11-16" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["notify", "idle", "--help"])
    assert info.value.code == 0
    help_text = capsys.readouterr().out
    assert "--dry-run" in help_text and "min_waste_gpu_hours" in help_text


# --- the Prefect flow -------------------------------------------------------------------


def test_the_flow_sends_and_records(
    tmp_path: Path, inbox: tuple[Inbox, int], prefect_harness: None
) -> None:
    from gpufleet.flows.notify import idle_notices_flow

    handler, port = inbox
    config = fx.make_fleet(tmp_path, extra=fx.smtp_section(port))
    summary = idle_notices_flow(data_dir=str(tmp_path), config_path=str(config.source), day=D)
    assert "sent: 3 notices" in summary
    assert len(handler.envelopes) == 3 and len(sent_log(config)) == 4


def test_the_flow_fails_on_a_refused_address_after_sending_the_others(
    tmp_path: Path, prefect_harness: None
) -> None:
    from gpufleet.flows.notify import idle_notices_flow

    with smtp_inbox(RefusingInbox(refused=frozenset({"dave@example.org"}))) as (handler, port):
        config = fx.make_fleet(tmp_path, extra=fx.smtp_section(port))
        with pytest.raises(GpufleetError, match=f"refused dave@example.org: {REFUSAL_REPLY}"):
            idle_notices_flow(data_dir=str(tmp_path), config_path=str(config.source), day=D)
    assert len(handler.envelopes) == 2 and len(sent_log(config)) == 3 + 1  # + dave's refusal


@dataclass
class WarehouseWriterInbox(Inbox):
    """While each message arrives, tries to take the warehouse's writer lock (as a
    scheduled ingest would) and notes whether it could."""

    lock: Path = Path()
    free: list[bool] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Session, envelope: Envelope) -> str:
        try:
            with writer_lock(self.lock, 0.5):
                self.free.append(True)
        except GpufleetError:
            self.free.append(False)
        return await super().handle_DATA(server, session, envelope)


def test_sending_does_not_hold_the_warehouse_writers_up(tmp_path: Path) -> None:
    with smtp_inbox(WarehouseWriterInbox()) as (handler, port):
        config = fx.make_fleet(tmp_path, extra=fx.smtp_section(port))
        handler.lock = lock_path(config)
        assert notify(config, "--day", D, "--send") == 0
    assert handler.free == [True, True, True]  # every message, while it was being sent
    assert notify(config, "--day", D, "--send") == 0  # recorded: nothing is sent again
    assert len(handler.envelopes) == 3


def test_a_job_with_no_user_is_listed_to_its_teams_lead(tmp_path: Path) -> None:
    """A pod (an allocation row with no user) idle for hours: its episodes go to the lead
    of its team, named by job id, as '(no user known)'; a host-attributed GPU is not
    notified."""
    d = fx.DAY
    rows_ = fx.samples(
        "GPU-e0", "node-e", 0, fx.H100, "nobody", "",
        [(fx.at(d, 9), fx.at(d, 10), fx.BUSY), (fx.at(d, 10), fx.at(d, 14), fx.IDLE),
         (fx.at(d, 14), fx.at(d, 15), fx.BUSY)],
    )  # fmt: skip
    for row in rows_:
        row["processes"] = []
    config = fx.make_fleet(tmp_path)
    fx.write_samples(tmp_path, "pods", rows_)
    allocations = tmp_path / "raw" / "allocations"
    allocations.mkdir(parents=True, exist_ok=True)
    (allocations / "pods.csv").write_text(
        "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
        f"ml-serving/llm-0,,nlp,node-e,0,{fx.at(fx.DAY, 8).isoformat()},\n",
        encoding="utf-8",
    )
    ingest(config, compact=False)
    build(config)
    run = notify_idle(config, day=fx.DAY, mode=DRY_RUN)
    (lead,) = [notice for notice in run.plan.notices if notice.to == "nlp-lead@example.org"]
    pod_episodes = [episode for episode in lead.episodes if episode.job_id == "ml-serving/llm-0"]
    assert pod_episodes and all(episode.user is None for episode in pod_episodes)
    assert sum(episode.gpu_hours for episode in pod_episodes) == pytest.approx(4.0)
    assert "(no user known)" in lead.users
    text = str(run)
    assert "ml-serving/llm-0" in text and "(no user known)" in text


def test_an_8_gpu_slurm_job_and_a_pod_are_one_line_each_and_each_episode_is_recorded(
    tmp_path: Path, inbox: tuple[Inbox, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """alice's Slurm job (its processes name it) idle on the 8 GPUs of node12 from 09:00 to
    15:00, and a pod with no user idle 4 h: one line each, with the scheduler's command; the
    sent log still holds each of the 9 episodes, so a rerun sends nothing."""
    handler, port = inbox
    d = fx.DAY
    config = fx.write_config(tmp_path, extra=fx.smtp_section(port))
    fx.write_refs(tmp_path)
    job = [
        row
        for index in range(8)
        for row in fx.samples(
            f"GPU-j{index}", "node12", index, fx.H100, "alice", "4807074",
            [(fx.at(d, 8), fx.at(d, 9), fx.BUSY), (fx.at(d, 9), fx.at(d, 15), fx.IDLE),
             (fx.at(d, 15), fx.at(d, 16), fx.BUSY)],
        )
    ]  # fmt: skip
    pod = fx.samples(
        "GPU-e0", "node-e", 0, fx.H100, "nobody", "",
        [(fx.at(d, 9), fx.at(d, 10), fx.BUSY), (fx.at(d, 10), fx.at(d, 14), fx.IDLE),
         (fx.at(d, 14), fx.at(d, 15), fx.BUSY)],
    )  # fmt: skip
    for row in pod:
        row["processes"] = []
    fx.write_samples(tmp_path, "job-and-pod", [*job, *pod])
    allocations = tmp_path / "raw" / "allocations"
    allocations.mkdir(parents=True, exist_ok=True)
    (allocations / "prometheus-prom-2026-11-16.csv").write_text(
        "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
        f"ml-serving/llm-0,,nlp,node-e,0,{fx.at(d, 8).isoformat()},{fx.at(d, 16).isoformat()}\n",
        encoding="utf-8",
    )
    ingest(config, compact=False)
    build(config)

    assert notify(config, "--day", D, "--send") == 0

    mails = by_recipient(handler)
    text, html = parts(mails["alice@example.org"][1])
    listed = [line for line in text.splitlines() if line.startswith(("- ", "  What to do"))]
    assert listed == [
        f"- job 4807074 on node12 GPUs 0-7 ({fx.H100}): 8 GPUs idle 6 h, from {D} 09:00 to "
        f"{D} 15:00: {hours(48)} GPU-hours in all, {usd(48 * 2.5)}; memory still allocated",
        "  What to do: end the job if it no longer needs them: scancel 4807074",
    ]
    assert html.count("<td>job 4807074</td>") == 1 and "node12 GPUs 0-7" in html
    text, html = parts(mails["nlp-lead@example.org"][1])
    listed = [line for line in text.splitlines() if line.startswith(("- ", "  What to do"))]
    assert listed == [
        f"- pod ml-serving/llm-0 on node-e GPU 0 ({fx.H100}): 1 GPU idle 4 h, from {D} 10:00 "
        f"to {D} 14:00: {hours(4)} GPU-hours, {usd(4 * 2.5)}",
        "  What to do: delete the pod if it no longer needs them: "
        "kubectl delete pod llm-0 -n ml-serving",
    ]
    assert "kubectl delete pod llm-0 -n ml-serving" in html and "scancel" not in text
    assert "alice@example.org: user alice: 8 episodes" in capsys.readouterr().out
    assert [user for _, _, user, _ in sent_log(config)] == [*["alice"] * 8, None]

    assert notify(config, "--day", D, "--send") == 0  # every episode recorded: none again
    assert len(handler.envelopes) == 2
    assert "9 episodes already notified" in capsys.readouterr().out
