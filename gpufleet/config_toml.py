"""Reading the configuration file: its TOML, where a key sits (for messages that name the
line), and the `[prometheus.series]` overrides."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from gpufleet.config_sources import DEFAULT_PROMETHEUS_SERIES, LABEL_NAME
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


def series_overrides(
    path: Path, text: str, table: dict[str, Any]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`[prometheus.series]` over the defaults: each key a known column, each value a series
    name or a list of them (first found wins)."""
    defaults = dict(DEFAULT_PROMETHEUS_SERIES)
    for key, value in table.items():
        where = where_in(path, text, "prometheus.series", key)
        if key not in defaults:
            raise GpufleetError(
                f"{where}: unknown key 'prometheus.series.{key}' (known: {', '.join(defaults)})"
            )
        names = [value] if isinstance(value, str) else value
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(n, str) and LABEL_NAME.match(n) for n in names)
        ):
            raise GpufleetError(
                f"{where}: 'prometheus.series.{key}' must be a series name or a list of them, "
                f"got {value!r}"
            )
        defaults[key] = tuple(names)
    return tuple(defaults.items())


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
