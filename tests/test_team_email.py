"""The weekly email to each team's lead (`gpufleet report --per-team [--send]`)."""

from __future__ import annotations

import datetime as dt
import re
from email.message import EmailMessage
from pathlib import Path

import duckdb
import pytest

from gpufleet.cli import main
from gpufleet.config import load_config
from gpufleet.errors import GpufleetError
from gpufleet.reports.mail import read_message
from gpufleet.reports.render import format_usd
from gpufleet.reports.team import (
    NOT_TEAMS,
    load_team_weeks,
    send_team_emails,
    team_file_name,
    write_team_emails,
)
from gpufleet.simulate.demo import demo_spec, import_demo_jobs, simulate_demo
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.weeks import last_complete_week
from tests import report_fixtures as fx
from tests.report_fixtures import REFUSAL_REPLY, RefusingInbox, smtp_inbox
from tests.templates import made_once
from tests.test_browser import BlackHoleProxy, run_chromium

pytestmark = pytest.mark.fleet

LEADS = {
    fx.EVIL_TEAM: ("evil-lead@example.org", ["evil-cc@example.org"]),
    "vision": ("vision-lead@example.org", []),
}  # nlp has no lead


# A vision waste episode that began on the Sunday before the week and ran 4 h into its
# Monday: 6 h in all, of which the email counts the 4 h (and their share of its cost) in
# the week, as team_weekly does.
CROSSING = ("gpu-v2", "node-a", 1, "NVIDIA H100", "vision", "dora", "77", "allocation",
            dt.datetime(2026, 11, 8, 22, tzinfo=dt.UTC), dt.datetime(2026, 11, 9, 4, tzinfo=dt.UTC),
            6 * 3600.0, 720, True, True, 60.0)  # fmt: skip


def _add_crossing_episode(con: duckdb.DuckDBPyConnection) -> None:
    """CROSSING, with its two run pieces: 2 h on the Sunday before the week, 4 h in it."""
    con.execute(
        "insert into idle_episodes values (" + ", ".join("?" * len(CROSSING)) + ", null)", CROSSING
    )
    fx.add_run_pieces(con)
    con.execute(
        """
        update run_pieces set seconds = 2 * 3600.0 where gpu_uuid = 'gpu-v2';
        insert into run_pieces
        select gpu_uuid, idle_run_start_ts, date '2026-11-09', 4 * 3600.0
        from run_pieces where gpu_uuid = 'gpu-v2';
        """
    )


def _warehouse(data_dir: Path, port: int = 25) -> Path:
    """The hand-made warehouse with CROSSING and the leads (made once per test process and
    copied), and a configuration with an SMTP server at `port`."""

    def fill(folder: Path) -> None:
        fx.make_warehouse(folder)
        with duckdb.connect(str(folder / "warehouse.duckdb")) as con:
            _add_crossing_episode(con)
            con.execute("create table ref_teams (team varchar, lead_email varchar, cc varchar[])")
            con.executemany(
                "insert into ref_teams values (?, ?, ?)",
                [(team, lead, cc) for team, (lead, cc) in LEADS.items()],
            )

    made_once("test_team_email._warehouse", fill, data_dir)
    return fx.write_config(
        data_dir,
        f'[smtp]\nhost = "127.0.0.1"\nport = {port}\n[report]\nsender = "gpufleet@example.org"\n',
    )


def _team_rows(data_dir: Path) -> dict[str, tuple[float, float]]:
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
        rows = con.execute(
            "select team, waste_usd, gpu_hours from team_weekly where iso_week = ?", [fx.WEEK]
        ).fetchall()
    return {team: (waste, hours) for team, waste, hours in rows}


def _html(message: EmailMessage) -> str:
    part = message.get_body(("html",))
    assert part is not None
    return str(part.get_content())


def test_one_email_per_team_with_its_own_figures(tmp_path: Path) -> None:
    config = load_config(config_path=_warehouse(tmp_path))
    emails = write_team_emails(config, fx.WEEK)
    figures = _team_rows(tmp_path)
    teams = {team for team in figures if team not in NOT_TEAMS}
    assert {email.team for email in emails} == teams and "(unallocated)" in figures
    for email in emails:
        assert email.path == tmp_path / "reports" / fx.WEEK / "teams" / team_file_name(email.team)
        message = read_message(email.path)
        waste, gpu_hours = figures[email.team]
        assert message["Subject"] == (
            f"gpufleet weekly report {fx.WEEK} for team {' '.join(email.team.split())}: "
            f"{format_usd(waste)} idle waste"
        )
        text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
        lines = {
            line.split("  ")[1].strip(): line
            for line in text.splitlines()
            if line.startswith("  ") and "  " in line[2:]
        }
        assert format_usd(waste) in lines["Idle waste"]
        assert (f"{gpu_hours:,.0f}" if gpu_hours >= 100 else f"{gpu_hours:,.1f}") in lines[
            "GPU-hours"
        ]
        lead = LEADS.get(email.team)
        assert email.lead_email == (lead[0] if lead else None)
        assert message["To"] == (lead[0] if lead else None)
        assert message["Cc"] == (", ".join(lead[1]) if lead and lead[1] else None)
        # the charts travel as inline PNGs that the HTML references
        cids = {
            p["Content-ID"].strip("<>")
            for p in message.walk()
            if p.get_content_type() == "image/png"
        }
        assert cids and all(f"cid:{cid}" in _html(message) for cid in cids)


def test_the_email_shows_the_teams_waste_by_user_and_job_and_escapes_names(tmp_path: Path) -> None:
    config = load_config(config_path=_warehouse(tmp_path))
    emails = {email.team: email for email in write_team_emails(config, fx.WEEK)}
    html = _html(read_message(emails[fx.EVIL_TEAM].path))
    assert fx.EVIL_TEAM not in html and fx.EVIL_USER not in html
    assert "Team &lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;/script&gt;&lt;b&gt;bob&lt;/b&gt;" in html  # the user, as text
    assert "$1,150" in html and "j1" in html  # the episode's cost and job (fixture rows)
    vision = emails["vision"]
    vision_html = _html(read_message(vision.path))
    assert "alice" in vision_html and "carol" not in vision_html  # carol's was last week
    text = read_message(vision.path).get_body(("plain",)).get_content()  # type: ignore[union-attr]
    # dora's episode crossed into the week: its 4 h of 6 in the week, and 4/6 of its $60
    assert "$40  4.0 GPU-hours  user dora, job 77 (1 episode on 1 GPU)" in text
    assert "$40  8.0 GPU-hours  user alice, job 42 (1 episode on 1 GPU)" in text
    # the costliest episodes: dora's costs $40 in the week, of the whole episode's $60
    assert "  this week: $40 (whole episode: $60)  job 77, user dora: 1 GPU idle 6 h" in text
    assert "  $40  job 42, user alice: 1 GPU idle 8 h, node-a GPU 0, from Wed 11 Nov" in text
    assert fx.EVIL_TEAM.replace("<", "&lt;") not in vision_html  # only its own rows


# An 8-GPU Slurm job of vision's (imported by 'gpufleet import slurm': in slurm_jobs), idle
# 6 h on Tuesday on all its GPUs, and a pod (an allocation 'gpufleet import prometheus'
# wrote, no user label) idle 4 h from the week's last Sunday evening into the next week.
TUESDAY = fx.MONDAY + dt.timedelta(days=1)
SLURM_JOB = [
    (f"gpu-s{index}", "node12", index, "NVIDIA H100", "vision", "erin", "4807074", "allocation",
     dt.datetime.combine(TUESDAY, dt.time(2, index), tzinfo=dt.UTC),
     dt.datetime.combine(TUESDAY, dt.time(8), tzinfo=dt.UTC), 6 * 3600.0 - 60 * index, 360,
     True, True, 15.0)
    for index in range(8)
]  # fmt: skip
SUNDAY_NIGHT = dt.datetime.combine(fx.MONDAY + dt.timedelta(days=6), dt.time(22), tzinfo=dt.UTC)
POD = ("gpu-p0", "node-e", 0, "NVIDIA H100", "vision", None, "ml-serving/llm-0", "allocation",
       SUNDAY_NIGHT, SUNDAY_NIGHT + dt.timedelta(hours=4), 4 * 3600.0, 240, True, False,
       10.0)  # fmt: skip
EPISODE_COLUMNS = (
    'gpu_uuid, host, gpu_index, gpu_name, team, "user", job_id, attributed_by, start_ts, '
    "end_ts, idle_seconds, samples, is_waste, held_memory, waste_usd"
)


def _add_job_and_pod(data_dir: Path) -> None:
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as con:
        marks = ", ".join("?" * len(POD))
        con.executemany(
            f"insert into idle_episodes ({EPISODE_COLUMNS}) values ({marks})", [*SLURM_JOB, POD]
        )
        con.execute(
            "update idle_episodes set episode_id = (hash(gpu_uuid, start_ts) >> 1)::bigint"
            " where episode_id is null"
        )
        # each Slurm episode in one piece on Tuesday; the pod's 2 h on Sunday, 2 h after
        pieces = [(row[0], row[8], TUESDAY, row[10]) for row in SLURM_JOB]
        pieces += [
            (POD[0], POD[8], SUNDAY_NIGHT.date(), 2 * 3600.0),
            (POD[0], POD[8], SUNDAY_NIGHT.date() + dt.timedelta(days=1), 2 * 3600.0),
        ]
        con.executemany("insert into run_pieces values (?, ?, ?, ?)", pieces)
        con.execute(
            "create table slurm_jobs as select '4807074' as job_id, null::varchar as job_id_raw"
        )


def test_a_multi_gpu_slurm_job_and_a_pod_are_one_row_each_with_their_advice(
    tmp_path: Path,
) -> None:
    config = load_config(config_path=_warehouse(tmp_path))
    _add_job_and_pod(tmp_path)
    vision = next(e for e in write_team_emails(config, fx.WEEK) if e.team == "vision")
    message = read_message(vision.path)
    text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = _html(message)
    episodes = text.split("COSTLIEST WASTE EPISODES\n")[1].split("\n\n")[0].splitlines()
    assert episodes[:2] == [
        "  $120  job 4807074, user erin: 8 GPUs idle 6 h, node12 GPUs 0-7, "
        "from Tue 10 Nov 02:00 to Tue 10 Nov 08:00",
        "    What to do: end the job if it no longer needs them: scancel 4807074",
    ]
    (pod,) = [line for line in episodes if "pod ml-serving/llm-0" in line]
    assert pod == (
        "  this week: $5 (whole episode: $10)  pod ml-serving/llm-0, no user known: "
        "1 GPU idle 4 h, node-e GPU 0, from Sun 15 Nov 22:00 to Mon 16 Nov 02:00"
    )
    assert episodes[episodes.index(pod) + 1] == (
        "    What to do: delete the pod if it no longer needs them: "
        "kubectl delete pod llm-0 -n ml-serving"
    )
    assert sum("4807074" in line for line in episodes) == 2  # its line and its advice
    assert not re.search(r"\b1 (GPUs|episodes)\b", text)
    assert "(8 episodes on 8 GPUs)" in text and "(1 episode on 1 GPU)" in text
    # the HTML part: one row each, the job's GPUs summed up, the two costs apart
    section = html.split('<section id="episodes">')[1].split("</section>")[0]
    assert section.count("<td>job 4807074</td>") == 1
    assert section.count("<td>pod ml-serving/llm-0</td>") == 1
    assert "<td>node12 GPUs 0-7</td>" in section and "scancel 4807074" in section
    assert "kubectl delete pod llm-0 -n ml-serving" in section
    assert '<td class="num"><strong>$5</strong></td>\n      <td class="num">$10</td>' in section


def test_send_mails_each_lead_and_copies_and_skips_teams_without_one(tmp_path: Path) -> None:
    with smtp_inbox() as (inbox, port):
        config = load_config(config_path=_warehouse(tmp_path, port))
        sent = send_team_emails(config, write_team_emails(config, fx.WEEK))
    by_team = {email.team: email for email in sent}
    assert by_team[fx.EVIL_TEAM].sent_to == ("evil-lead@example.org", "evil-cc@example.org")
    assert by_team["vision"].sent_to == ("vision-lead@example.org",)
    assert by_team["nlp"].sent_to == () and "no lead" in str(by_team["nlp"])
    assert sorted(tuple(e.rcpt_tos) for e in inbox.envelopes) == [
        ("evil-lead@example.org", "evil-cc@example.org"),
        ("vision-lead@example.org",),
    ]
    received = {inbox.message(i)["To"]: inbox.message(i) for i in range(len(inbox.envelopes))}
    assert "for team vision" in received["vision-lead@example.org"]["Subject"]


def test_an_unreachable_server_is_one_error_and_the_files_stay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prefect_harness: None
) -> None:
    port = fx.free_port()  # nothing listens there
    config_path = _warehouse(tmp_path, port)
    config = load_config(config_path=config_path)
    written = write_team_emails(config, fx.WEEK)
    with pytest.raises(GpufleetError, match=f"through SMTP server 127.0.0.1:{port}") as info:
        send_team_emails(config, written)
    assert "\n" not in str(info.value)
    assert all(email.path.is_file() for email in written)

    with config_path.open("a", encoding="utf-8") as file:
        file.write('recipients = ["fleet@example.org"]\n')
    for email in written:
        email.path.unlink()
    argv = ["--config", str(config_path), "report", "--week", fx.WEEK, "--per-team", "--send"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        f"gpufleet: error: cannot send the report through SMTP server 127.0.0.1:{port}"
    )
    assert all(email.path.is_file() for email in written)  # every file written before sending


def test_per_team_send_without_fleet_recipients_mails_the_leads_only(
    tmp_path: Path, prefect_harness: None
) -> None:
    from gpufleet.flows.report import report_flow

    with smtp_inbox() as (inbox, port):
        config_path = _warehouse(tmp_path, port)  # no report.recipients
        result = report_flow(
            str(tmp_path), str(config_path), week=fx.WEEK, send=True, per_team=True
        )
    assert result.sent_to == () and result.fleet_not_sent
    assert "not sent: report.recipients is empty" in str(result)
    assert sorted(e.rcpt_tos[0] for e in inbox.envelopes) == [
        "evil-lead@example.org",
        "vision-lead@example.org",
    ]


# --- re-runs and refused recipients -------------------------------------------------------


def _point_at(config_path: Path, port: int) -> None:
    """The configuration's [smtp] port set to `port` (another server)."""
    text = re.sub(r"(?m)^port = \d+$", f"port = {port}", config_path.read_text())
    config_path.write_text(text, encoding="utf-8")


def _errors(stderr: str) -> list[str]:
    """The command's error lines (the flow's log lines left out)."""
    return [line for line in stderr.splitlines() if line.startswith("gpufleet: error: ")]


def _sent_log(data_dir: Path) -> list[tuple[object, ...]]:
    """(email, team, recipient, status, reply) of every row of reports_sent."""
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(
            "select email, team, recipient, status, reply from reports_sent"
            " order by email, team, recipient, sent_at"
        ).fetchall()


def test_a_rerun_sends_only_what_was_not_delivered_then_says_already_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prefect_harness: None
) -> None:
    argv = ["report", "--week", fx.WEEK, "--per-team", "--send"]
    with smtp_inbox(RefusingInbox(refused=frozenset({"vision-lead@example.org"}))) as (
        inbox,
        port,
    ):
        config_path = _warehouse(tmp_path, port)
        with config_path.open("a", encoding="utf-8") as file:
            file.write('recipients = ["fleet@example.org"]\n')
        argv = ["--config", str(config_path), *argv]
        assert main(argv) == 1  # the vision lead refused; everything else went out
    out, err = capsys.readouterr()
    assert sorted(tuple(e.rcpt_tos) for e in inbox.envelopes) == [
        ("evil-lead@example.org", "evil-cc@example.org"),
        ("fleet@example.org",),
    ]
    (line,) = _errors(err)
    assert "vision-lead@example.org" in line
    assert REFUSAL_REPLY in line and "vision" in line
    assert "sent to: fleet@example.org" in out

    with smtp_inbox() as (inbox, port):  # the same command again: only the vision email
        _point_at(config_path, port)
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert [e.rcpt_tos for e in inbox.envelopes] == [["vision-lead@example.org"]]
        assert _errors(err) == []
        assert "already sent to: fleet@example.org" in out

        assert main(argv) == 0  # and again: nothing at all
        out, err = capsys.readouterr()
        assert len(inbox.envelopes) == 1 and _errors(err) == []
        assert "already sent to: fleet@example.org" in out
        assert out.count("already sent to") == 3  # the fleet's and two teams' emails

    assert [row for row in _sent_log(tmp_path) if row[3] == "sent"] == [
        ("fleet", None, "fleet@example.org", "sent", None),
        ("team", fx.EVIL_TEAM, "evil-cc@example.org", "sent", None),
        ("team", fx.EVIL_TEAM, "evil-lead@example.org", "sent", None),
        ("team", "vision", "vision-lead@example.org", "sent", None),
    ]
    assert [row for row in _sent_log(tmp_path) if row[3] == "refused"] == [
        ("team", "vision", "vision-lead@example.org", "refused", REFUSAL_REPLY)
    ]


def test_a_refused_fleet_recipient_does_not_stop_the_rest_and_is_tried_on_each_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prefect_harness: None
) -> None:
    refusing = RefusingInbox(refused=frozenset({"gone@example.org"}))
    with smtp_inbox(refusing) as (inbox, port):
        config_path = _warehouse(tmp_path, port)
        with config_path.open("a", encoding="utf-8") as file:
            file.write('recipients = ["fleet@example.org", "gone@example.org"]\n')
        argv = ["--config", str(config_path), "report", "--week", fx.WEEK, "--per-team", "--send"]
        for _ in range(2):  # a refused address is tried again, and reported again
            assert main(argv) == 1
            out, err = capsys.readouterr()
            (line,) = _errors(err)
            assert "gone@example.org" in line and REFUSAL_REPLY in line and "report" in line
            assert "gone@example.org" in out
        assert refusing.tried.count("gone@example.org") == 2
        # the fleet's other recipient and the leads got theirs once, on the first run
        assert sorted(tuple(e.rcpt_tos) for e in inbox.envelopes) == [
            ("evil-lead@example.org", "evil-cc@example.org"),
            ("fleet@example.org",),
            ("vision-lead@example.org",),
        ]
    assert ("fleet", None, "gone@example.org", "refused", REFUSAL_REPLY) in _sent_log(tmp_path)


@pytest.mark.slow
def test_a_team_email_renders_in_the_browser_with_names_as_text(tmp_path: Path) -> None:
    config = load_config(config_path=_warehouse(tmp_path))
    evil = next(e for e in write_team_emails(config, fx.WEEK) if e.team == fx.EVIL_TEAM)
    page = tmp_path / "team.html"
    page.write_text(_html(read_message(evil.path)), encoding="utf-8")
    proxy = BlackHoleProxy()
    try:
        dom = run_chromium(page, proxy, tmp_path / "profile", "--dump-dom").stdout
    finally:
        proxy.close()
    assert "<script>alert(1)</script>" not in dom.split("<body", 1)[1]
    assert "Team &lt;script&gt;alert(1)&lt;/script&gt;: GPU report" in dom
    assert "Idle waste by user and job" in dom and "$1,150" in dom
    assert proxy.page_requests() == []


@pytest.mark.slow
def test_waste_by_user_and_job_adds_up_to_team_weekly_on_a_built_fleet(tmp_path: Path) -> None:
    """On a simulated, ingested and built fleet whose episodes cross into the week: each
    team's waste by user and job sums to its team_weekly waste hours and dollars."""
    config = load_config(data_dir=tmp_path, environ={})
    week = last_complete_week(config.timezone)
    # the demo's steps up to its build (run_demo_steps), not its report and emails
    simulate_demo(config, week=week, gpus=16, days=2, history_weeks=1, progress=_quiet)
    spec = demo_spec(config, week=week, gpus=16, days=2, history_weeks=1)
    import_demo_jobs(config, at=spec.end, progress=_quiet)
    ingest(config, progress=_quiet)
    build(config)
    teams = {team.team: team for team in load_team_weeks(config, week)}
    weekly = _team_weekly(tmp_path, week)
    assert teams and set(teams) == set(weekly) - NOT_TEAMS
    for name, team in teams.items():
        hours, usd = weekly[name]
        assert team.by_user["waste_gpu_hours"].sum() == pytest.approx(hours, rel=1e-9, abs=1e-9)
        assert team.by_user["waste_usd"].sum() == pytest.approx(usd, rel=1e-9, abs=1e-9)
    assert any(hours > 0 for hours, _ in weekly.values())


def _quiet(message: str) -> None:
    pass


def _team_weekly(data_dir: Path, week: str) -> dict[str, tuple[float, float]]:
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
        rows = con.execute(
            "select team, waste_gpu_hours, waste_usd from team_weekly where iso_week = ?", [week]
        ).fetchall()
    return {team: (hours, usd) for team, hours, usd in rows}


def test_the_users_beyond_the_top_ones_are_summed_in_one_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    import gpufleet.reports.team

    monkeypatch.setattr(gpufleet.reports.team, "TOP_USERS", 1)
    config = load_config(config_path=_warehouse(tmp_path))
    vision = next(e for e in write_team_emails(config, fx.WEEK) if e.team == "vision")
    text = read_message(vision.path).get_body(("plain",)).get_content()  # type: ignore[union-attr]
    # alice's $40 first (8 h), then dora's 4 h and $40 summed as the rest
    assert "$40  8.0 GPU-hours  user alice, job 42" in text
    assert "$40  4.0 GPU-hours  1 more user and job" in text
    assert "user dora" not in text.split("COSTLIEST")[0]
    html = _html(read_message(vision.path))
    assert '<tr class="others">' in html and "1 more user and job" in html


def test_the_flow_run_fails_when_a_recipient_is_refused(
    tmp_path: Path, prefect_harness: None
) -> None:
    """The others get their email; the run ends Failed (not Completed), naming the address,
    and the exception carries what the run did."""
    from gpufleet.flows.report import RecipientsRefused, report_flow

    refusing = RefusingInbox(refused=frozenset({"vision-lead@example.org"}))
    with smtp_inbox(refusing) as (inbox, port):
        config_path = _warehouse(tmp_path, port)
        with pytest.raises(RecipientsRefused) as caught:
            report_flow(str(tmp_path), str(config_path), week=fx.WEEK, send=True, per_team=True)
        state = report_flow(
            str(tmp_path), str(config_path), week=fx.WEEK, send=True, per_team=True,
            return_state=True,
        )  # fmt: skip
    assert "vision-lead@example.org" in str(caught.value) and REFUSAL_REPLY in str(caught.value)
    assert caught.value.result.failures
    assert state.is_failed() and "vision-lead@example.org" in (state.message or "")
    assert [e.rcpt_tos for e in inbox.envelopes] == [
        ["evil-lead@example.org", "evil-cc@example.org"]
    ]
