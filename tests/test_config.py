"""Configuration: precedence (flag > environment > file > default) and one-line errors."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_file(tmp_path: Path) -> None:
    config = load_config(data_dir=tmp_path, environ={})
    assert config.data_dir == tmp_path
    assert config.timezone == "UTC"
    assert config.idle.threshold_pct == 5.0
    assert config.idle.min_minutes == 30
    assert config.series.max_gap_factor == 2.5
    assert config.report.recipients == ()
    assert config.smtp.port == 25 and config.smtp.starttls is False
    assert config.source is None
    assert config.warehouse_path == tmp_path / "warehouse.duckdb"


def test_file_in_data_dir_is_read(tmp_path: Path) -> None:
    write(
        tmp_path / "gpufleet.toml",
        'timezone = "Europe/Berlin"\n[idle]\nthreshold_pct = 10\nmin_minutes = 45\n'
        '[report]\nrecipients = ["a@example.com"]\n[smtp]\nport = 2525\nstarttls = true\n',
    )
    config = load_config(data_dir=tmp_path, environ={})
    assert config.timezone == "Europe/Berlin"
    assert config.idle.threshold_pct == 10.0
    assert config.idle.min_minutes == 45.0
    assert config.report.recipients == ("a@example.com",)
    assert config.smtp.port == 2525 and config.smtp.starttls is True
    assert config.source == tmp_path / "gpufleet.toml"


def test_precedence_flag_over_environment_over_file(tmp_path: Path) -> None:
    config_file = write(tmp_path / "elsewhere.toml", f'data_dir = "{tmp_path / "from-file"}"\n')
    env = {"GPUFLEET_CONFIG": str(config_file)}
    assert load_config(environ=env).data_dir == tmp_path / "from-file"
    env["GPUFLEET_DATA_DIR"] = str(tmp_path / "from-env")
    assert load_config(environ=env).data_dir == tmp_path / "from-env"
    flagged = load_config(data_dir=tmp_path / "from-flag", environ=env)
    assert flagged.data_dir == tmp_path / "from-flag"


def test_config_flag_beats_environment_file(tmp_path: Path) -> None:
    env_file = write(tmp_path / "env.toml", 'timezone = "Asia/Tokyo"\n')
    flag_file = write(tmp_path / "flag.toml", 'timezone = "America/New_York"\n')
    config = load_config(config_path=flag_file, environ={"GPUFLEET_CONFIG": str(env_file)})
    assert config.timezone == "America/New_York"


def test_password_comes_only_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUFLEET_SMTP_PASSWORD", "s3cret")
    config = load_config(data_dir=tmp_path, environ={})
    assert config.smtp.password == "s3cret"
    assert "s3cret" not in repr(config)
    write(tmp_path / "gpufleet.toml", '[smtp]\nusername = "u"\npassword = "inline"\n')
    with pytest.raises(
        GpufleetError, match=r"line 3: unknown key 'smtp.password'.*GPUFLEET_SMTP_PASSWORD"
    ):
        load_config(data_dir=tmp_path, environ={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("timezone = \n", r"invalid TOML"),
        ('[idle]\nthreshold_pct = "five"\n', r"line 2: 'idle.threshold_pct' must be a number"),
        ("[idle]\nmin_minutes = -1\n", r"line 2: 'idle.min_minutes' must be >= 0"),
        ("[smtp]\nport = true\n", r"line 2: 'smtp.port' must be an integer"),
        ('timezone = "Mars/Olympus"\n', r"line 1: unknown time zone 'Mars/Olympus'"),
        ("[colour]\nred = 1\n", r"unknown section \[colour\]"),
        ("\n\n[series]\ngap = 3\n", r"line 4: unknown key 'series.gap'"),
        ('[report]\nrecipients = "a@b"\n', r"line 2: 'report.recipients' must be a list"),
        ("\n[idel]\nthreshold_pct = 1\n", r"line 2: unknown section \[idel\]"),
        ("idle.threshold_pct = 0\n", r"line 1: 'idle.threshold_pct' must be in"),
        ('timezone = "posix/Europe/Berlin"\n', r"line 1: unknown time zone"),
        ('timezone = "localtime"\n', r"line 1: unknown time zone 'localtime'"),
        ('[report]\nrecipients = ["ops@x.org", "Ops <ops>"]\n', r"line 2: .*'Ops <ops>', not an"),
        ('\n[report]\nsender = "gpufleet"\n', r"line 3: 'report.sender' is not an email address"),
        ("[ingest]\nearliest = 20150101\n", r"line 2: 'ingest.earliest' must be a date such as"),
        ('[ingest]\nearliest = "2015-02-30"\n', r"line 2: 'ingest.earliest' must be a date such"),
        ('[ingest]\nearliest = "Jan 2015"\n', r"line 2: 'ingest.earliest' must be a date such as"),
        ("[ingest]\nearliest = 2015-01-01T00:00:00Z\n", r"line 2: 'ingest.earliest' must be a"),
        ("[ingest]\nearliest = 2999-01-01\n", r"line 2: 'ingest.earliest' must not be in the fu"),
        ("[ingest]\nmax_clock_skew_minutes = -1\n", r"line 2: 'ingest.max_clock_skew_minutes' mu"),
        ("[ingest]\nmax_clock_skew_minutes = 10000000000\n", r"between 0 and 527040"),
        ('[ingest]\nmax_clock_skew_minutes = "1d"\n', r"line 2: .* a whole number of minutes"),
        ("[ingest]\nmax_clock_skew_minutes = 1.5\n", r"line 2: .* a whole number of minutes"),
    ],
)
def test_bad_file_is_one_line_naming_file_and_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = write(tmp_path / "gpufleet.toml", text)
    with pytest.raises(GpufleetError, match=expected) as info:
        load_config(data_dir=tmp_path, environ={})
    message = str(info.value)
    assert message.startswith(str(path))
    assert "\n" not in message


def test_the_times_a_sample_may_have(tmp_path: Path) -> None:
    """[ingest] earliest (a TOML date, or the same as a string) and max_clock_skew_minutes:
    docs/reference.md#valid-values."""
    assert Config().ingest.earliest == dt.date(2015, 1, 1)
    assert Config().ingest.max_clock_skew_minutes == 24 * 60
    for earliest in ("2020-06-01", '"2020-06-01"'):
        text = f"[ingest]\nearliest = {earliest}\nmax_clock_skew_minutes = 0\n"
        write(tmp_path / "gpufleet.toml", text)
        ingest = load_config(data_dir=tmp_path, environ={}).ingest
        assert (ingest.earliest, ingest.max_clock_skew_minutes) == (dt.date(2020, 6, 1), 0)


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(GpufleetError, match="config file not found"):
        load_config(config_path=tmp_path / "nope.toml", environ={})


def test_config_is_immutable() -> None:
    config = Config()
    with pytest.raises(AttributeError):
        config.timezone = "UTC"  # type: ignore[misc]
