"""Names with control characters: the report, the emails and the notices still render, and
show each such character as its escape (`\\x1b`, `\\r\\n`), never raw.

A raw ESC in a chart's text made vl-convert panic and abort `gpufleet report` (exit 134,
nothing written), and a CR/LF in a user's name wrote a `Bcc:` line of its own into a team
email's text part. The report runs in a subprocess, so that an abort fails the test rather
than pytest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from email.message import EmailMessage
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.notices.idle import WRITE, notify_idle
from gpufleet.reports.mail import read_message
from gpufleet.reports.names import printable_names
from tests import notify_fixtures as nfx
from tests import report_fixtures as fx

TEAM = "vis\x1b[2Jion\x7f"  # ESC (a terminal's "clear screen") and DEL
HOST = "node\x1b]0;pwned\x07\x9b-a"  # ESC, BEL and the C1 CSI
USER = "al\r\nBcc: x@evil.org\r\nice"  # a line of its own that reads as a header
JOB = "42\u2028Bcc: y@evil.org"  # a line separator (str.splitlines breaks there)
# What no part of a rendered file may hold: controls but tab and line feed, DEL, C1
# controls, line and paragraph separators (and a CR/LF outside a line break).
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
HEADER_LINE = re.compile(r"^\s*(Bcc|Cc|To|From|Subject):", re.MULTILINE | re.IGNORECASE)


def _rename(con: duckdb.DuckDBPyConnection, column: str, old: str, new: str) -> None:
    """`old` as `new` in every table of the warehouse that has `column`."""
    tables = con.execute(
        "select schema_name, table_name from duckdb_columns() inner join duckdb_tables()"
        " using (database_name, schema_name, table_name)"
        " where column_name = ? and database_name = current_database()",
        [column],
    ).fetchall()
    for schema, table in tables:
        con.execute(
            f'update "{schema}"."{table}" set "{column}" = ? where "{column}" = ?', [new, old]
        )


def _hostile_warehouse(data_dir: Path) -> Path:
    """The report fixture's warehouse with vision as TEAM (which has a lead), node-a as HOST,
    alice as USER and job 42 as JOB; its configuration file."""
    fx.make_warehouse(data_dir)
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as con:
        con.execute("create table ref_teams (team varchar, lead_email varchar, cc varchar[])")
        con.execute("insert into ref_teams values ('vision', 'lead@example.org', [])")
        _rename(con, "team", "vision", TEAM)
        _rename(con, "host", "node-a", HOST)
        _rename(con, "user", "alice", USER)
        _rename(con, "job_id", "42", JOB)
    return fx.write_config(data_dir, '[report]\nsender = "gpufleet@example.org"\n')


def _parts(message: EmailMessage) -> dict[str, str]:
    """The message's text parts by content type."""
    return {
        part.get_content_type(): str(part.get_content())
        for part in message.walk()
        if part.get_content_maintype() == "text" and not part.is_attachment()
    }


def _assert_clean(message: EmailMessage) -> None:
    """No raw control character in its headers or text parts, no header-like line in them,
    and no header that names an address but its own."""
    assert message["Bcc"] is None
    for name, value in message.items():
        assert not RAW_CONTROL.search(str(value)), (name, value)
    for content_type, text in _parts(message).items():
        assert not RAW_CONTROL.search(text), content_type
        assert "\r" not in text, content_type
        assert not HEADER_LINE.search(text), (content_type, HEADER_LINE.findall(text))


@pytest.mark.slow  # starts processes
def test_hostile_names_render_escaped_in_the_report_and_the_team_emails(tmp_path: Path) -> None:
    config_path = _hostile_warehouse(tmp_path / "data")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PREFECT_", "GPUFLEET_"))
        or k == "GPUFLEET_CACHE_DIR"  # the test run's, not ~/.cache
    }
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    command = ["--config", str(config_path), "report", "--week", fx.WEEK, "--per-team"]
    result = subprocess.run(
        [sys.executable, "-m", "gpufleet", *command],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "panicked" not in result.stderr

    folder = tmp_path / "data" / "reports" / fx.WEEK
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert not RAW_CONTROL.search(page)
    assert f"<td>{printable(TEAM)}</td>" in page  # the name as its escapes, recognisable

    report = read_message(folder / "report.eml")
    _assert_clean(report)
    text = _parts(report)["text/plain"]
    assert f"team {printable(TEAM)}, user {printable(USER)}, job {printable(JOB)}" in text
    assert printable(HOST) in text
    pngs = [part for part in report.walk() if part.get_content_type() == "image/png"]
    assert len(pngs) >= 4  # the charts, rendered with the names in them

    emails = {read_message(path)["To"]: read_message(path) for path in folder.glob("teams/*")}
    lead = emails["lead@example.org"]
    _assert_clean(lead)
    assert f"for team {printable(TEAM)}:" in lead["Subject"]
    text = _parts(lead)["text/plain"]
    assert f"user {printable(USER)}, job {printable(JOB)}" in text
    assert f"{printable(HOST)} GPU 0" in text
    assert printable(USER) in _parts(lead)["text/html"]


def test_hostile_names_are_escaped_in_every_part_of_an_idle_notice(tmp_path: Path) -> None:
    config: Config = nfx.make_fleet(tmp_path)
    with duckdb.connect(str(config.warehouse_path)) as con:
        # the user without an address, whose notice goes to the nlp lead
        _rename(con, "user", nfx.EVIL, USER)
        _rename(con, "team", "nlp", TEAM)
        _rename(con, "host", "node-b", HOST)
        _rename(con, "job_id", "202", JOB)

    run = notify_idle(config, day=nfx.DAY, mode=WRITE)

    (path,) = (tmp_path / "notices" / nfx.DAY.isoformat()).glob("team-*.eml")
    assert path.name.isprintable() and "\\" not in path.name
    notice = read_message(path)
    assert notice["To"] == "nlp-lead@example.org"
    _assert_clean(notice)
    assert f"team {printable(TEAM)} on" in notice["Subject"]
    text, html = _parts(notice)["text/plain"], _parts(notice)["text/html"]
    assert f"User {printable(USER)}:" in text
    assert f"- job {printable(JOB)} on {printable(HOST)} GPU 1 (" in text
    assert printable(TEAM) in html and printable(USER) in html
    assert not RAW_CONTROL.search(str(run))


def test_printable_names_escapes_strings_in_every_column_and_keeps_the_rest() -> None:
    frame = pl.DataFrame(
        {
            "team": ["ok", TEAM, None],
            "waste_usd": [1.0, 2.0, 3.0],
            "cc": [["a@example.org"], [USER], None],
            "gpu_list": [[{"host": HOST, "gpu_index": 3}], [], None],
        }
    )

    escaped = printable_names(frame)

    assert escaped.schema == frame.schema
    assert escaped.to_dicts() == [
        {"team": "ok", "waste_usd": 1.0, "cc": ["a@example.org"], "gpu_list": [
            {"host": printable(HOST), "gpu_index": 3}]},
        {"team": printable(TEAM), "waste_usd": 2.0, "cc": [printable(USER)], "gpu_list": []},
        {"team": None, "waste_usd": 3.0, "cc": None, "gpu_list": None},
    ]  # fmt: skip
    clean = pl.DataFrame({"team": ["ok"], "cc": [["x"]]})
    assert printable_names(clean) is clean  # nothing to escape: the same frame


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("a\x1bb", "a\\x1bb"),
        ("a\x7fb", "a\\x7fb"),
        ("a\r\nb", "a\\r\\nb"),
        ("a\x85b", "a\\x85b"),  # C1 NEL
        ("a\u2028b", "a\\u2028b"),
        ("a\ud800b", "a\\ud800b"),  # a lone surrogate
        ("café ok", "café ok"),
    ],
)
def test_each_character_that_is_not_printable_shows_as_its_escape(name: str, shown: str) -> None:
    assert printable(name) == shown
