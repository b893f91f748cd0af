"""Read-only views of parsed data (a TOML file's tables) that a cache shares with every
caller."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any


def frozen(value: Any) -> Any:
    """`value` with every dict, at every level, a read-only MappingProxyType and every list
    a tuple: made once, then shared without a copy, as no caller can change it (an attempt
    raises TypeError or AttributeError)."""
    if isinstance(value, dict):
        return MappingProxyType({key: frozen(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(frozen(item) for item in value)
    return value
