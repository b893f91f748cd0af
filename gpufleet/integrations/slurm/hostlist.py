"""Slurm host lists: `gpu-node[01-03,07],login1` -> each node name, in order."""

from __future__ import annotations

import itertools
import math
import re

from gpufleet.errors import GpufleetError

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() also takes "²", which int() refuses
# More names than any cluster has nodes: a host list that expands past it is a mistake (or
# a record that would take the importer's memory), not a cluster.
MAX_HOSTS = 100_000


def _split_top(text: str) -> list[str]:
    """Split at the commas outside brackets."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        depth += (char == "[") - (char == "]")
        current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


def _range(text: str, hostlist: str) -> list[str]:
    """`01-03,07` -> ['01', '02', '03', '07'] (keeping the width of zero-padded numbers)."""
    values: list[str] = []
    for piece in text.split(","):
        first, _, last = piece.strip().partition("-")
        if not _DIGITS.fullmatch(first) or (last and not _DIGITS.fullmatch(last)):
            raise GpufleetError(f"host list {hostlist!r}: cannot read the range [{text}]")
        if last and len(values) + int(last) - int(first) >= MAX_HOSTS:
            raise GpufleetError(f"host list {hostlist!r}: more than {MAX_HOSTS:,} hosts")
        if not last:
            values.append(first)
            continue
        width = len(first) if first.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(int(first), int(last) + 1))
    return values


def expand_hostlist(hostlist: str) -> tuple[str, ...]:
    """Every node name of a Slurm host list, in the order written."""
    names: list[str] = []
    for part in _split_top(hostlist):
        pieces = _BRACKET.split(part)  # text, range, text, range, ..., text
        choices = [
            _range(piece, hostlist) if position % 2 else [piece]
            for position, piece in enumerate(pieces)
        ]
        if len(names) + math.prod(len(choice) for choice in choices) > MAX_HOSTS:
            raise GpufleetError(f"host list {hostlist!r}: more than {MAX_HOSTS:,} hosts")
        names.extend("".join(combination) for combination in itertools.product(*choices))
    return tuple(names)
