"""The command line as a shell uses it: `gpufleet query ... | head` ends quietly; every
command's --help ends in examples that parse; `gpufleet completion` prints a script that
completes the commands; query and export take the same output options."""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from gpufleet.cli import READER_GONE, build_parser
from gpufleet.cli.common import command_parsers

PARSER = build_parser()
# Every parser by its command's name ("" for gpufleet itself).
PARSERS = {"": PARSER, **dict(command_parsers(PARSER))}
GPUFLEET = [sys.executable, "-m", "gpufleet"]
# A shell's words that end a command: what follows is the shell's (a redirection, a pipe).
SHELL_OPERATORS = {">", ">>", "<", "|", "&&", ";"}
# An example's command: gpufleet, after the variables set for it.
COMMAND = r"(?:[A-Z_]+=\S+ )*gpufleet "


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory whose warehouse has a table of 20,000 rows: far more text than a
    pipe holds."""
    data_dir = tmp_path_factory.mktemp("pipe") / "data"
    data_dir.mkdir()
    with duckdb.connect(str(data_dir / "warehouse.duckdb")) as con:
        con.execute(
            "create table hosts as select range as n, 'host-' || range as host from range(20000)"
        )
    return data_dir


@pytest.mark.parametrize("flags", [[], ["--csv"], ["--json"]], ids=["table", "csv", "json"])
def test_query_piped_into_head_ends_quietly(warehouse: Path, flags: list[str]) -> None:
    command = [*GPUFLEET, "--data-dir", str(warehouse), "query", "from hosts", *flags]
    query = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert query.stdout is not None and query.stderr is not None
    head = subprocess.Popen(["head", "-1"], stdin=query.stdout, stdout=subprocess.PIPE)
    query.stdout.close()  # head is the only reader
    first, _ = head.communicate(timeout=120)
    err = query.stderr.read().decode()
    query.stderr.close()
    status = query.wait(timeout=120)
    assert first.strip(), "head printed nothing"
    assert err == "", err
    # The status a shell gives a command killed by SIGPIPE, or 0 when the last write went
    # through in part before the reader left; never an error.
    assert status in (0, READER_GONE)


@pytest.mark.parametrize("flags", [[], ["--csv"]], ids=["table", "csv"])
def test_query_into_a_pipe_closed_before_it_writes_ends_quietly(
    warehouse: Path, flags: list[str]
) -> None:
    """A reader that is gone before the first write (`gpufleet query ... | true`): the table
    meets the closed pipe in print, CSV in the writer that names its output."""
    command = [*GPUFLEET, "--data-dir", str(warehouse), "query", "from hosts", *flags]
    query = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert query.stdout is not None
    query.stdout.close()
    _, err = query.communicate(timeout=120)
    assert err.decode() == ""
    assert query.returncode == READER_GONE


def example_lines(parser: argparse.ArgumentParser) -> list[str]:
    """The commands of the examples block that ends the parser's --help, which fails
    unless the help ends in one."""
    blocks = parser.format_help().rstrip().split("\n\n")
    heading, *lines = blocks[-1].splitlines()
    assert re.fullmatch(r"examples?:", heading, re.IGNORECASE), f"ends in {blocks[-1]!r}"
    assert lines and all(re.match(rf"  {COMMAND}", line) for line in lines), lines
    return [line.strip() for line in lines]


@pytest.mark.parametrize("name", sorted(PARSERS), ids=lambda name: name or "gpufleet")
def test_every_help_ends_in_examples_that_parse(name: str) -> None:
    for line in example_lines(PARSERS[name]):
        words = shlex.split(re.sub(rf"^{COMMAND}", "", line), comments=True)
        shell = [k for k, word in enumerate(words) if word in SHELL_OPERATORS]
        args = build_parser().parse_args(words[: shell[0] if shell else None])
        assert callable(args.handler), line
        if name:
            assert f" {name} " in f" {' '.join(words)} ", f"{line}: not an example of {name}"


def test_a_description_laid_out_in_lines_keeps_them_and_a_paragraph_is_wrapped() -> None:
    query_help = PARSERS["query"].format_help()
    assert "Run one read-only SQL statement (select, describe, show, summarize, explain)\n" in (
        query_help
    )
    ingest_help = PARSERS["ingest"].format_help()
    assert max(len(line) for line in ingest_help.splitlines()) <= 100


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_completion_prints_a_script_naming_every_command(shell: str) -> None:
    result = subprocess.run(
        [*GPUFLEET, "completion", shell], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    for name in ("collect", "query", "job", "export", "completion"):
        assert name in result.stdout, name


def test_the_bash_completion_completes_commands_options_and_files(tmp_path: Path) -> None:
    script = tmp_path / "gpufleet.bash"
    result = subprocess.run(
        [*GPUFLEET, "completion", "bash"], capture_output=True, text=True, timeout=120, check=True
    )
    script.write_text(result.stdout)
    assert "_shtab_gpufleet_subparsers=(" in result.stdout
    (tmp_path / "fleet.toml").write_text("")

    def complete(*words: str) -> set[str]:
        line = " ".join(shlex.quote(word) for word in words)
        code = (
            f"source {shlex.quote(str(script))}; cd {shlex.quote(str(tmp_path))}; "
            f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _shtab_gpufleet; "
            'printf "%s\\n" "${COMPREPLY[@]}"'
        )
        done = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True)
        return set(done.stdout.split())

    assert complete("gpufleet", "qu") == {"query"}
    assert complete("gpufleet", "notify", "") == {"idle"}
    assert "--month" in complete("gpufleet", "export", "showback", "--")
    assert complete("gpufleet", "completion", "") == {"bash", "zsh", "tcsh"}
    assert complete("gpufleet", "--config", "fle") == {"fleet.toml"}


def test_query_and_export_take_the_same_output_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def options(parser: argparse.ArgumentParser) -> dict[str, tuple[str, object]]:
        return {
            flag: (action.dest, action.const)
            for action in parser._actions
            for flag in action.option_strings
            if action.dest in {"format", "output"}
        }

    query, showback = options(PARSERS["query"]), options(PARSERS["export showback"])
    assert query == {**showback, "--json": ("format", "json")}
    assert set(showback) == {"--csv", "--parquet", "-o", "--output"}
    for argv in (["query", "x"], ["export", "showback", "--month", "2026-11"]):
        with pytest.raises(SystemExit):
            PARSER.parse_args([*argv, "--csv", "--parquet"])
        assert "--parquet: not allowed with argument --csv" in capsys.readouterr().err
