"""free_port: a loopback port a server can bind a moment later, out of the kernel's ephemeral
range (an outgoing connection may take a port from that range between the pick and the bind)."""

from __future__ import annotations

import random
import socket

from penumbra.cli import processes
from penumbra.cli.processes import LOOPBACK, PORTS_FROM, free_port


def ephemeral_low() -> int:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
        return int(handle.read().split()[0])


def test_a_free_port_binds_and_lies_below_the_ephemeral_range():
    low = ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert PORTS_FROM <= port < low
        with socket.socket() as server:
            server.bind((LOOPBACK, port))
            server.listen()


def test_a_seeded_generator_does_not_make_processes_pick_alike():
    picks = []
    for _ in range(5):
        random.seed(7)
        picks.append(free_port())
    assert len(set(picks)) > 1


def test_a_port_with_a_listener_is_passed_over(monkeypatch):
    with socket.socket() as taken:
        taken.bind((LOOPBACK, free_port()))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy, busy, busy + 1 if busy + 1 < ephemeral_low() else busy - 1])
        monkeypatch.setattr(processes, "_PICK", type("Picks", (), {"randrange": lambda self, a, b: next(picks)})())
        port = free_port()
        assert port != busy and abs(port - busy) == 1
