"""docs/cli.md, the command reference, against the real argparse tree: every command,
subcommand and option is documented, and every example parses."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from gpufleet.cli import build_parser
from gpufleet.cli.common import command_parsers

DOCS = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
HEADING = re.compile(r"^#{2,3} `gpufleet ([a-z][a-z ]*)`$", re.MULTILINE)
PARSER = build_parser()
COMMANDS = dict(command_parsers(PARSER))


def sections() -> dict[str, str]:
    """Each command's section of the page by the command's name ("notify idle"), and the
    text before the first command under ""."""
    text = DOCS.read_text()
    headings = list(HEADING.finditer(text))
    found = {"": text[: headings[0].start()] if headings else text}
    for heading, following in zip(headings, [*headings[1:], None], strict=True):
        end = following.start() if following else len(text)
        found[heading.group(1)] = text[heading.end() : end]
    return found


def documented_names(parser: argparse.ArgumentParser) -> list[str]:
    """The option strings of the parser's own options and the names of its positionals
    (not -h/--help, not the subcommands, which have sections of their own)."""
    names: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.option_strings:
            names.extend(action.option_strings)
        else:
            names.append(str(action.metavar or action.dest))
    return names


def mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def test_the_tree_has_the_commands_and_the_global_options() -> None:
    assert {"collect", "report", "notify idle", "export showback"} <= set(COMMANDS)
    for name, parser in COMMANDS.items():
        options = {o for action in parser._actions for o in action.option_strings}
        assert {"--config", "--data-dir"} <= options, name


def test_global_options_are_documented_before_the_commands() -> None:
    intro = sections()[""]
    for name in documented_names(PARSER):
        assert mentions(intro, name), f"docs/cli.md does not explain {name}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_a_section_naming_its_options(command: str) -> None:
    section = sections().get(command)
    assert section is not None, f"docs/cli.md has no section '## `gpufleet {command}`'"
    global_options = {"--config", "--data-dir"}
    for name in documented_names(COMMANDS[command]):
        if name not in global_options:
            assert mentions(section, name), f"gpufleet {command}: {name} is not in docs/cli.md"


def test_every_section_is_a_command() -> None:
    stale = set(sections()) - set(COMMANDS) - {""}
    assert not stale, f"docs/cli.md documents commands that do not exist: {sorted(stale)}"


def examples() -> list[str]:
    """The `gpufleet ...` lines of the page's sh blocks."""
    blocks = re.findall(r"^```sh\n(.*?)^```", DOCS.read_text(), re.MULTILINE | re.DOTALL)
    return [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if re.match(r"^([A-Z_]+=\S+\s+)*gpufleet\s", line.strip())
    ]


def parse_example(line: str) -> argparse.Namespace:
    words = shlex.split(line, comments=True)
    while re.match(r"^[A-Z_]+=", words[0]):  # a variable set for the command
        words.pop(0)
    assert words[0] == "gpufleet"
    # what follows a redirection or a pipe is the shell's
    end = next((k for k, word in enumerate(words) if word in {">", ">>", "|"}), None)
    return PARSER.parse_args(words[1:end])


def test_every_command_has_an_example() -> None:
    shown = {parse_example(line).handler for line in examples()}
    for command, parser in COMMANDS.items():
        handler = parser.get_default("handler")
        # A group (notify, export) has no handler: its subcommands have the examples.
        assert handler is None or handler in shown, f"docs/cli.md has no example of {command}"


@pytest.mark.parametrize("line", examples())
def test_every_example_parses(line: str) -> None:
    assert callable(parse_example(line).handler)
