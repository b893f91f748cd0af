"""Free loopback ports for the servers the tests start (Slurm's daemons, SeaweedFS,
Prometheus, an SMTP inbox), taken below the kernel's ephemeral range.

A port the kernel hands out for `bind(("127.0.0.1", 0))` is one of the ephemeral ports that
every outgoing connection also takes its local port from; while the suite's workers talk to
Prefect, S3 and their own servers, such a port was taken between the moment it was chosen
and the moment a daemon bound it (a Slurm node's `slurmd`, seconds later, never started).
Ports below the range are only ever taken by a server that binds them.
"""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 20000  # clear of the well-known servers (8000-9000: Prefect's, 8787: Dask's)


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with contextlib.closing(socket.socket()) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_ports(count: int, *, consecutive: bool = False) -> list[int]:
    """`count` distinct loopback ports nothing listens on, below the ephemeral range;
    `consecutive`: a run of them (Slurm's `Port=[a-b]` for its nodes)."""
    top = _ephemeral_start()
    for _ in range(200):
        if consecutive:
            first = random.randrange(_LOWEST, top - count)
            ports = list(range(first, first + count))
        else:
            ports = random.sample(range(_LOWEST, top), count)
        if all(_bindable(port) for port in ports):
            return ports
    raise RuntimeError(f"no {count} free loopback ports between {_LOWEST} and {top}")


def free_port() -> int:
    """One loopback port nothing listens on, below the ephemeral range."""
    return free_ports(1)[0]
