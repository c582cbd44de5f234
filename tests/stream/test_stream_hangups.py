"""Agents that go away at awkward moments: a hang-up right after a frame, before the ack, is an
ordinary close (one quiet line naming the node), not a server error — over plain TCP and TLS."""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from common.wire import encode
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.sections import Config, CoordinatorSection
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.inventory.store import Inventory
from devcluster import pki
from tests.support.inventory_wait import until
from tests.support.raw_ws import RawWebSocket
from tests.support.stream_frames import hello

NO_SWEEPS = Config(coordinator=CoordinatorSection(sweep_interval_s=3600))


@pytest.fixture
def inv() -> Inventory:
    return Inventory(stale_ttl_s=30.0)


@pytest.fixture(params=["tcp", "tls"])
async def coordinator(
    request: pytest.FixtureRequest, inv: Inventory, tmp_path: Path
) -> AsyncIterator[tuple[str, ssl.SSLContext | None]]:
    server_tls = client_tls = None
    if request.param == "tls":
        ca = pki.make_ca("topos-test-ca")
        pki.write_pair(ca, tmp_path, "ca")
        pki.write_pair(pki.make_serving_cert(ca, ips=("127.0.0.1",)), tmp_path, "tls")
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
        client_tls = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    app = wire(NO_SWEEPS, MemoryBackend(MemoryCluster(inv)))
    async with running(app, ssl_context=server_tls) as url:
        yield url, client_tls


@pytest.mark.parametrize("hang_up", ["close", "abort"])
async def test_an_agent_hanging_up_before_its_ack_is_a_quiet_close(
    coordinator: tuple[str, ssl.SSLContext | None],
    inv: Inventory,
    caplog: pytest.LogCaptureFixture,
    hang_up: str,
) -> None:
    url, tls = coordinator
    caplog.set_level(logging.DEBUG)
    names = [f"gone-{i}" for i in range(10)]
    for name in names:
        ws = await RawWebSocket.open(url, tls=tls)
        ws.send_binary(encode(hello(name, agent_id=name)))
        if hang_up == "abort":
            await ws.writer.drain()
            ws.abort()
        else:
            await ws.close()
    for name in names:  # every stream ended: its node is kept, not connected
        await until(inv, lambda n=name: n in inv and not inv.node(n).connected)  # type: ignore[union-attr]
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert loud == [], [r.getMessage() for r in loud]
    said = [r.getMessage() for r in caplog.records if "coordinator" in r.name]
    assert all(any(name in line for line in said) for name in names), said
