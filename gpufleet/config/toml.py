"""Reading the configuration file: its TOML, and where a key sits (for messages that name
the line). The standard library's `tomllib` parses it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from gpufleet.errors import GpufleetError


def line_of(text: str, section: str | None, key: str) -> int | None:
    """The 1-based line where `key` is set inside `[section]` of a TOML text (or as a
    dotted `section.key` at the top), or where the table `[key]` opens, if found."""
    current: str | None = None
    dotted = f"{section}.{key}" if section else None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = re.match(r"^\[\s*([^\]]+?)\s*\]", stripped)
        if header:
            current = header.group(1)
            if section is None and current == key:
                return number
            continue
        if current == section and re.match(rf"^\"?{re.escape(key)}\"?\s*=", stripped):
            return number
        if current is None and dotted and re.match(rf"^{re.escape(dotted)}\s*=", stripped):
            return number
    return None


def where_in(path: Path, text: str, section: str | None, key: str) -> str:
    line = line_of(text, section, key)
    return f"{path}: line {line}" if line else f"{path}"


def read_toml(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GpufleetError(f"{path}: cannot read config file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise GpufleetError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GpufleetError(f"{path}: invalid TOML: {exc}") from exc
