"""The command line: help, argument checking and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.cli import build_parser, main

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
        (["report", "--week", "2026-W54"], "is not a valid ISO week"),
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
        "import sys, gpufleet.cli, collectors.collect\n"
        "heavy = {'prefect', 'duckdb', 'altair', 'polars', 'jinja2', 'vl_convert'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
