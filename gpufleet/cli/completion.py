"""`gpufleet completion SHELL`: the shell's tab completion of gpufleet's commands and options,
written by shtab from the parsers themselves (as gpustat's CLI does), so it never lags them."""

from __future__ import annotations

import argparse

from gpufleet.cli.common import command_parsers
from gpufleet.config import Config

SHELLS = ("bash", "zsh", "tcsh")


def add_completion(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "completion",
        help="print the shell's tab completion script (bash, zsh or tcsh)",
        description=(
            "Print a script that completes gpufleet's commands, options and file names in "
            "the shell, made by shtab from this version's own options. Install it where the "
            "shell loads completions from, or load it from the shell's start-up file."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet completion bash > ~/.local/share/bash-completion/completions/gpufleet\n"
            "  gpufleet completion zsh > ~/.zfunc/_gpufleet   # a folder on $fpath\n"
            "  gpufleet completion tcsh >> ~/.tcshrc"
        ),
    )
    parser.add_argument("shell", metavar="SHELL", choices=SHELLS, help=", ".join(SHELLS))
    parser.set_defaults(handler=run_completion, needs_pipeline=False)


def run_completion(args: argparse.Namespace, config: Config) -> int:
    import shtab

    from gpufleet.cli import build_parser  # the module that imports this one

    parser = build_parser()
    # What an option's metavar names, its values complete as: FILE a file, DIR a folder.
    paths = {"FILE": shtab.FILE, "DIR": shtab.DIRECTORY}
    for each in (parser, *(command for _, command in command_parsers(parser))):
        for action in each._actions:
            if action.metavar in paths:
                action.complete = paths[action.metavar]  # type: ignore[attr-defined]
    print(shtab.complete(parser, shell=args.shell), end="")
    return 0
