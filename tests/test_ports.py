"""tests/ports.py: the stacks' ports come from below the kernel's ephemeral range, where no
outgoing connection takes them between their choice and the daemon's bind."""

from __future__ import annotations

import socket

from tests.ports import _ephemeral_start, free_port, free_ports


def test_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    ports = free_ports(10)
    assert len(set(ports)) == 10
    assert all(20000 <= port < _ephemeral_start() for port in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # nothing holds it
    assert 20000 <= free_port() < _ephemeral_start()


def test_a_consecutive_run_is_consecutive() -> None:
    first, *rest = free_ports(4, consecutive=True)
    assert rest == [first + 1, first + 2, first + 3]


def test_a_port_a_server_holds_is_never_handed_out() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        assert all(taken not in free_ports(50) for _ in range(50))
