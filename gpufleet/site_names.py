"""Site (cluster) names, checked with the standard library alone, below every layer: the
collector, the configuration, the command line (before `gpufleet collect` chooses Arrow's
memory pool) and `close` check them."""

from __future__ import annotations

import re

# A site (the `cluster` column) as the collector and the importers accept it: it becomes
# part of a folder name (`host_folder` in collectors/schema.py), so letters, digits, `.`,
# `_` and `-`.
_CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_cluster(name: str) -> str:
    """`name` if it is a valid site name, else ValueError saying why."""
    if not _CLUSTER_NAME.fullmatch(name):
        raise ValueError(
            f"cluster {name!r} is not a site name: 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name
