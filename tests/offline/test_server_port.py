"""The port an embedded server will take: chosen at random below the range the kernel gives
outgoing connections, since the server binds it seconds later and an outgoing connection
could take it meanwhile, and never one in use. The servers that take it, on homes of their
own: tests/homes/test_server_choice.py."""

import random
import socket
from pathlib import Path

from nexusflow._prefect.server import free_port_for_a_server


def test_a_servers_port_is_free_and_never_one_an_outgoing_connection_may_take(monkeypatch):
    """The embedded server is started seconds after its port is chosen. A port the kernel
    chose was from the range it gives outgoing connections, and one took it meanwhile: the
    server failed with ``address already in use`` (a resume on a loaded machine)."""
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port_for_a_server() for _ in range(200)]
    assert all(10_000 <= port < ephemeral for port in ports), sorted(ports)
    assert len(set(ports)) > 150, "chosen at random: two processes rarely pick one port"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy, 23_456])
        monkeypatch.setattr(random, "randrange", lambda low, high: next(picks))
        assert free_port_for_a_server() == 23_456, "a port in use is passed over"
