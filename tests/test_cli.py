"""The command line: help, argument checking and one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from gpufleet.cli import build_parser, main
from tests.prefect_runs import own_flow_runs

pytestmark = pytest.mark.fleet

COMMANDS = (
    "collect",
    "simulate",
    "ingest",
    "build",
    "report",
    "demo",
    "serve",
    "query",
    "notify",
    "export",
)


def test_help_lists_every_contract_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "--week", "2026-47"], "is not an ISO week"),
        (["report", "--week", "2026-W54"], "is not an ISO week like 2026-W47"),
        (["report", "--week", "2026-W4"], "is not an ISO week like 2026-W47"),
        (["collect", "--interval", "0"], "must be greater than 0"),
        (["simulate", "--gpus", "many"], "is not a whole number"),
        (["simulate", "--start", "yesterday"], "is not a date"),
    ],
)
def test_bad_arguments_are_rejected(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "--data-dir", "X"],
        ["--data-dir", "X", "report"],
        ["--data-dir", "Y", "report", "--data-dir", "X"],
        ["notify", "idle", "--data-dir", "X"],
        ["--data-dir", "Y", "notify", "--data-dir", "X", "idle"],
        ["export", "showback", "--month", "2026-11", "--data-dir", "X"],
        ["query", "--data-dir", "X", "show tables"],
        ["collect", "--interval", "5", "--data-dir", "X"],
    ],
)
def test_data_dir_before_or_after_the_command(argv: list[str]) -> None:
    """Given after the command (or a nested one), the global option wins over one before it."""
    args = build_parser().parse_args(argv)
    assert args.data_dir == "X"
    assert args.config is None


def test_an_option_absent_after_the_command_keeps_the_one_before_it() -> None:
    args = build_parser().parse_args(["--config", "F", "--data-dir", "D", "notify", "idle"])
    assert (args.config, args.data_dir) == ("F", "D")
    args = build_parser().parse_args(["--config", "F", "query", "select 1", "--data-dir", "D"])
    assert (args.config, args.data_dir) == ("F", "D")


def test_config_after_a_nested_command_is_the_file_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "elsewhere.toml"
    config.write_text("[idle]\nthreshold_pct = 'x'\n")
    argv = ["export", "showback", "--month", "2026-11", "--config", str(config)]
    assert main(["--data-dir", str(tmp_path), *argv]) == 1
    assert "elsewhere.toml: line 2" in capsys.readouterr().err


def test_query_takes_config_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUFLEET_DATA_DIR", raising=False)
    data_dir = tmp_path / "data"
    config = tmp_path / "gpufleet.toml"
    config.write_text(f"data_dir = '{data_dir}'\n")
    assert main(["query", "select 42", "--config", str(config)]) == 1
    assert f"{data_dir / 'warehouse.duckdb'}: no warehouse yet" in capsys.readouterr().err


def test_bad_config_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "gpufleet.toml").write_text("[idle]\nthreshold_pct = 'x'\n")
    result = subprocess.run(
        [sys.executable, "-m", "gpufleet", "--data-dir", str(tmp_path), "build"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("gpufleet: error: ")
    assert "gpufleet.toml: line 2" in result.stderr
    assert "Traceback" not in result.stderr


def test_collect_does_not_import_the_pipeline() -> None:
    """A GPU host runs the collector with nvidia-ml-py and pyarrow alone."""
    code = (
        "import sys, gpufleet.cli, gpufleet.collectors.collect\n"
        "heavy = {'prefect', 'duckdb', 'altair', 'polars', 'jinja2', 'vl_convert'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def _gpufleet(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


class Commands(NamedTuple):
    """`gpufleet ingest`, `build` and `report` run in processes of their own, in a user's
    environment: no PREFECT_ or GPUFLEET_ variable (but the suite's GPUFLEET_THREADS)."""

    prefect_home: Path
    ingested: subprocess.CompletedProcess[str]
    built: subprocess.CompletedProcess[str]
    reported: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def commands(tmp_path_factory: pytest.TempPathFactory) -> Commands:
    """A simulated day of 2 GPUs and a file that is not Parquet, ingested, built and
    reported by the commands: run once for the tests that read what they printed."""
    tmp_path = tmp_path_factory.mktemp("commands")
    prefect_home = tmp_path / "prefect-home"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PREFECT_", "GPUFLEET_"))
        or k in {"GPUFLEET_THREADS", "GPUFLEET_CACHE_DIR"}  # the test run's, not ~/.cache
    }
    env["PREFECT_HOME"] = str(prefect_home)
    data_dir = tmp_path / "data"
    assert main(["--data-dir", str(data_dir), "simulate", "--gpus", "2", "--days", "1"]) == 0
    bad = data_dir / "raw" / "samples" / "date=2026-11-20" / "host=h1" / "bad.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_text("not parquet")
    return Commands(
        prefect_home=prefect_home,
        ingested=_gpufleet(env, "ingest", "--data-dir", str(data_dir)),
        built=_gpufleet(env, "--data-dir", str(data_dir), "build"),
        reported=_gpufleet(env, "report", "--data-dir", str(data_dir)),
    )


@pytest.mark.slow  # starts processes
def test_ingest_build_and_report_without_a_prefect_server_call_the_engine(
    commands: Commands,
) -> None:
    """Without PREFECT_API_URL, `ingest`, `build` and `report` run without Prefect's temporary
    server (which would write its database into PREFECT_HOME): 15 s less a run on 2 cores."""
    ingested, built, reported = commands.ingested, commands.built, commands.reported
    assert ingested.returncode == 0, ingested.stderr
    assert "ingest: " in ingested.stdout and " 0 new samples" not in ingested.stdout
    assert built.returncode == 0, built.stderr
    assert built.stdout.startswith("full build (first build)")
    assert reported.returncode == 0, reported.stderr
    assert "(no data for week" not in reported.stdout
    assert "index.html" in reported.stdout and "report.eml" in reported.stdout
    assert not (commands.prefect_home / "prefect.db").exists()
    assert "temporary server" not in ingested.stderr + built.stderr + reported.stderr


@pytest.mark.slow  # starts processes
def test_ingest_names_a_quarantined_file_once_on_stderr(commands: Commands) -> None:
    result = commands.ingested
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("quarantined raw/samples/date=2026-11-20/host=h1/bad.parquet") == 1
    assert "QuarantineWarning" not in result.stderr
    assert " 1 quarantined" in result.stdout


_SERVER_CHECK = (
    "import sys\n"
    "from gpufleet.flows.server import prefect_server_configured\n"
    "print(prefect_server_configured(), 'prefect' in sys.modules)\n"
)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("none", "False False"),
        ("environment", "True False"),
        ("profile variable", "False True"),  # asked: Prefect finds no such profile
        ("profiles file", "True True"),
        ("dotenv", "True True"),
        ("prefect.toml", "True True"),
        ("pyproject.toml", "True True"),
        ("pyproject.toml of another tool", "False False"),
    ],
)
def test_the_server_check_asks_prefect_only_where_a_setting_could_name_one(
    tmp_path: Path, setting: str, expected: str
) -> None:
    """Importing Prefect's settings costs about 2 s: without a profile, a settings file or
    PREFECT_API_URL the answer is known without it; with one, Prefect's settings decide."""
    url = "http://127.0.0.1:4200/api"
    prefect_home = tmp_path / "prefect-home"
    prefect_home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(prefect_home)
    if setting == "environment":
        env["PREFECT_API_URL"] = url
    elif setting == "profile variable":
        env["PREFECT_PROFILE"] = "local"
    elif setting == "profiles file":
        (prefect_home / "profiles.toml").write_text(
            f'active = "mine"\n[profiles.mine]\nPREFECT_API_URL = "{url}"\n'
        )
    elif setting == "dotenv":
        (tmp_path / ".env").write_text(f"PREFECT_API_URL={url}\n")
    elif setting == "prefect.toml":
        (tmp_path / "prefect.toml").write_text(f'[api]\nurl = "{url}"\n')
    elif setting == "pyproject.toml":
        (tmp_path / "pyproject.toml").write_text(f'[tool.prefect.api]\nurl = "{url}"\n')
    elif setting == "pyproject.toml of another tool":
        (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 99\n")
    result = subprocess.run(
        [sys.executable, "-c", _SERVER_CHECK],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.strip() == expected


def test_build_with_a_prefect_server_is_a_recorded_flow_run(
    tmp_path: Path, prefect_harness: None
) -> None:
    data_dir = tmp_path / "data"
    assert own_flow_runs(data_dir, "build") == []
    assert main(["--data-dir", str(data_dir), "build"]) == 0
    assert len(own_flow_runs(data_dir, "build")) == 1
