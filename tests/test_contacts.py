"""Contacts: users.csv's optional `email`, ref/teams.csv, and the [notify] configuration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpufleet.addresses import is_address, split_addresses
from gpufleet.config import Config, NotifyConfig, load_config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from tests.templates import made_once
from tests.test_ingest import DAY1, sample, write_samples
from tests.test_refs import rows, write

USERS = "user,team,email\nalice,vision,alice@example.org\nbob,nlp,\nalice,vision,\n"
TEAMS = (
    "team,lead_email,cc\n"
    'nlp,lead@example.org,"ops@example.org, fin@example.org"\n'
    "vision,v@example.org,\n"
)


@pytest.fixture
def config(config: Config) -> Config:
    """The shared `config` (tests/conftest.py) with USERS and TEAMS written."""
    write(config, "ref/users.csv", USERS)
    write(config, "ref/teams.csv", TEAMS)
    return config


def test_addresses_and_leads_become_documented_tables(config: Config) -> None:
    ingest(config, compact=False)
    assert rows(config, 'select "user", team from ref_users order by 1') == [
        ("alice", "vision"),
        ("bob", "nlp"),
    ]
    assert rows(config, 'select "user", email from ref_user_emails') == [
        ("alice", "alice@example.org")
    ]
    assert rows(config, "select team, lead_email, cc from ref_teams order by team") == [
        ("nlp", "lead@example.org", ["ops@example.org", "fin@example.org"]),
        ("vision", "v@example.org", []),
    ]
    comments = rows(
        config,
        "select table_name, comment from duckdb_tables()"
        " where table_name in ('ref_user_emails', 'ref_teams') order by 1",
    )
    assert [name for name, _ in comments] == ["ref_teams", "ref_user_emails"]
    assert all(comment and "ref/" in comment for _, comment in comments)
    undocumented = rows(
        config,
        "select table_name, column_name from duckdb_columns()"
        " where table_name in ('ref_user_emails', 'ref_teams') and comment is null",
    )
    assert undocumented == []


def test_old_files_without_the_new_columns_keep_working(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    write(config, "ref/users.csv", "user,team\nalice,vision\n")
    write(config, "ref/teams.csv", "lead_email,team\nlead@example.org,vision\n")  # no cc
    ingest(config, compact=False)
    assert rows(config, 'select "user", team from ref_users') == [("alice", "vision")]
    assert rows(config, "select count(*) from ref_user_emails") == [(0,)]
    assert rows(config, "select team, cc from ref_teams") == [("vision", [])]
    (config.data_dir / "ref/teams.csv").unlink()
    ingest(config, compact=False)
    assert rows(config, "select count(*) from ref_teams") == [(0,)]


def test_a_changed_address_needs_no_build(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    ingest(config, compact=False)
    assert build(config).mode == "full"

    write(config, "ref/users.csv", USERS.replace("alice@example.org", "alice@new.example.org"))
    write(config, "ref/teams.csv", "team,lead_email\nnlp,other@example.org\n")
    result = ingest(config, compact=False)

    assert not result.references_changed and not result.loaded_anything
    assert rows(config, "select email from ref_user_emails") == [("alice@new.example.org",)]
    assert rows(config, "select lead_email from ref_teams") == [("other@example.org",)]
    assert build(config).mode == "up to date"


def _one_sample_loaded(data_dir: Path) -> None:
    """USERS, TEAMS and a sample file, ingested: where each bad contact file starts from."""
    config = Config(data_dir=data_dir)
    write(config, "ref/users.csv", USERS)
    write(config, "ref/teams.csv", TEAMS)
    write_samples(data_dir, f"{DAY1}/a.parquet", [sample(0)])
    ingest(config, compact=False)


@pytest.mark.parametrize(
    ("relative", "text", "message"),
    [
        (
            "ref/users.csv",
            "user,team,email\nalice,vision,alice@\n",
            r"ref/users\.csv: line 2: 'email' is not an email address: 'alice@'",
        ),
        (
            "ref/users.csv",
            "user,team,email\nalice,vision,Alice <alice@example.org>\n",
            r"ref/users\.csv: line 2: 'email' is not an email address: 'Alice <alice@",
        ),
        (
            "ref/users.csv",
            "user,team,email\nalice,vision,a@example.org\nalice,vision,b@example.org\n",
            r"ref/users\.csv: line 3: user 'alice' has address 'b@example.org' but an earlier",
        ),
        (
            "ref/users.csv",
            "user,team,mail\nalice,vision,a@example.org\n",
            r"ref/users\.csv: line 1: unknown column 'mail' in header \(expected user,team\[,email",
        ),
        (
            "ref/teams.csv",
            "team,lead_email,cc\nnlp,lead-at-example.org,\n",
            r"ref/teams\.csv: line 2: 'lead_email' is not an email address: 'lead-at-example",
        ),
        ("ref/teams.csv", "team,lead_email,cc\nnlp,,\n", r"ref/teams\.csv: line 2: 'lead_email'"),
        (
            "ref/teams.csv",
            "team,cc\nnlp,ops@example.org\n",
            r"ref/teams\.csv: line 1: missing column 'lead_email'",
        ),
        (
            "ref/teams.csv",
            "team,lead_email,cc\nnlp,a@example.org,b@example.org;c@\n",
            r"ref/teams\.csv: line 2: 'cc' is not an email address: 'c@'",
        ),
        (
            "ref/teams.csv",
            "team,lead_email\nnlp,a@example.org\ncv,c@example.org\nnlp,b@example.org\n",
            r"ref/teams\.csv: line 4: team 'nlp' is listed twice \(first on line 2\)",
        ),
    ],
)
def test_a_bad_contact_fails_naming_file_and_line_and_changes_nothing(
    config: Config, relative: str, text: str, message: str
) -> None:
    made_once("test_contacts._one_sample_loaded", _one_sample_loaded, config.data_dir)
    before = config.warehouse_path.read_bytes()
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [sample(10)])  # must not load
    write(config, relative, text)

    with pytest.raises(GpufleetError, match=message) as raised:
        ingest(config, compact=False)

    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith(str(config.data_dir / relative))
    assert config.warehouse_path.read_bytes() == before
    assert rows(config, "select count(*) from samples") == [(1,)]


@pytest.mark.parametrize(
    "address",
    ["alice@example.org", "a.b+gpu@sub.example.co.uk", "root@localhost", "o'neil@example.org"],
)
def test_plain_addresses_are_addresses(address: str) -> None:
    assert is_address(address)


@pytest.mark.parametrize(
    "text",
    [
        "alice",
        "alice@",
        "@example.org",
        "a b@example.org",
        "Alice <alice@example.org>",
        "alice@@example.org",
        "alice@example..org",
        ".alice@example.org",
        "alice@-example.org",
        "<script>@example.org",
        "alice@example.org\nBcc: x@y.org",
        "a" * 250 + "@example.org",
    ],
)
def test_anything_else_is_not(text: str) -> None:
    assert not is_address(text)


def test_address_lists_split_on_semicolons_commas_and_spaces() -> None:
    assert split_addresses(" a@x.org; b@x.org,c@x.org  d@x.org ") == (
        "a@x.org",
        "b@x.org",
        "c@x.org",
        "d@x.org",
    )
    assert split_addresses("") == ()


# --- [notify] -------------------------------------------------------------------------


def test_notify_defaults_and_values(tmp_path: Path) -> None:
    assert load_config(data_dir=tmp_path, environ={}).notify == NotifyConfig(
        min_waste_gpu_hours=2.0, opt_out=()
    )
    (tmp_path / "gpufleet.toml").write_text(
        '[notify]\nmin_waste_gpu_hours = 1\nopt_out = ["carol", " dave@example.org "]\n'
    )
    notify = load_config(data_dir=tmp_path, environ={}).notify
    assert notify == NotifyConfig(min_waste_gpu_hours=1.0, opt_out=("carol", "dave@example.org"))
    assert isinstance(notify.min_waste_gpu_hours, float)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[notify]\nmin_waste_gpu_hours = -1\n", r"line 2: 'notify.min_waste_gpu_hours' must be"),
        ("[notify]\nmin_waste_gpu_hours = nan\n", r"line 2: 'notify.min_waste_gpu_hours' must be"),
        ('[notify]\nmin_waste_gpu_hours = "2"\n', r"line 2: 'notify.min_waste_gpu_hours' must be"),
        ('[notify]\nopt_out = "bob"\n', r"line 2: 'notify.opt_out' must be a list"),
        ("\n[notify]\nopt_out = [1]\n", r"line 3: 'notify.opt_out' must be a list of strings"),
        ('[notify]\nopt_out = [" "]\n', r"line 2: 'notify.opt_out' must not hold an empty"),
        ("[notify]\nthreshold = 1\n", r"line 2: unknown key 'notify.threshold'"),
    ],
)
def test_a_bad_notify_section_is_one_line_naming_file_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "gpufleet.toml"
    path.write_text(text)
    with pytest.raises(GpufleetError, match=expected) as info:
        load_config(data_dir=tmp_path, environ={})
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)
    assert re.search(r"gpufleet\.toml: line \d+: ", str(info.value))
