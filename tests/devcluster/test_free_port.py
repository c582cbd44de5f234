"""``free_port``: the port a harness server is told to listen on cannot be taken meanwhile by
an outgoing connection, because it is not one the kernel hands to those."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster import processes
from devcluster.processes import free_port


@pytest.fixture
def port_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in for ``net.ipv4.ip_local_port_range`` the test writes."""
    path = tmp_path / "ip_local_port_range"
    monkeypatch.setattr(processes, "EPHEMERAL_RANGE", path)
    processes._outside_ephemeral.cache_clear()
    yield path
    processes._outside_ephemeral.cache_clear()


def ephemeral() -> range:
    low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return range(low, high + 1)


def test_ports_lie_outside_the_range_outgoing_connections_take_theirs_and_are_never_repeated() -> (
    None
):
    listener = socket.create_server(("127.0.0.1", 0))
    # Hold many outgoing connections, as a busy test run does: their local ports are ephemeral.
    clients = [socket.create_connection(listener.getsockname()) for _ in range(50)]
    try:
        taken = {c.getsockname()[1] for c in clients}
        assert taken <= set(ephemeral())
        ports = [free_port() for _ in range(300)]
        assert len(set(ports)) == len(ports)
        assert not set(ports) & set(ephemeral())
        assert all(20000 <= port < 30000 for port in ports)
        for port in ports[:20]:  # each one a server can bind at once
            socket.create_server(("127.0.0.1", port)).close()
    finally:
        for client in clients:
            client.close()
        listener.close()


def test_a_port_a_server_holds_is_not_handed_out(port_range: Path) -> None:
    # A range that leaves room only above it: 64,500-65,535.
    port_range.write_text("20000\t64499\n")
    held = [socket.create_server(("127.0.0.1", port)) for port in range(64500, 64510)]
    try:
        ports = {free_port() for _ in range(200)}
    finally:
        for server in held:
            server.close()
    assert ports <= set(range(64510, 65536))


def test_a_range_that_leaves_no_room_falls_back_to_the_kernels_pick(port_range: Path) -> None:
    port_range.write_text("1024 65535\n")
    port = free_port()
    assert 1024 <= port <= 65535
    socket.create_server(("127.0.0.1", port)).close()
