"""The coordinator as ``topos coordinator`` serves it (``wire`` over the API server) on the real API
server: HTTPS with a certificate from files (as mounted from the Secret), probes open, API calls
needing a token, a real agent ``StreamClient`` with its pod-bound ServiceAccount token admitted for
its own node and evicted when it claims another, and the leader elected on a Lease.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from agent.stream import StreamClient, StreamSettings
from common.kube import LEASES, PODS, KubeClient
from common.model import Gpu, NodeTopology
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.api.keys import INVENTORY
from coordinator.app.auth.tls import TlsConfigError
from coordinator.app.config.load import ConfigError, parse_config
from coordinator.app.config.sections import Config, TlsSection
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.leadership import LEADER
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.security import listener_tls
from coordinator.inventory.store import Inventory
from devcluster import pki
from devcluster.kube_wait import wait_for_object
from tests.support.kube_objects import create_agent_pod, create_node, create_service_account
from tests.support.polling import eventually


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    ca = pki.make_ca("topos-test-ca")
    serving = pki.make_serving_cert(ca, ips=("127.0.0.1",))
    pki.write_pair(ca, tmp_path, "ca")
    pki.write_pair(serving, tmp_path, "tls")
    return tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"


def _topology(node: str) -> NodeTopology:
    return NodeTopology(
        hostname=node,
        gpus=(Gpu(index=0, uuid=f"GPU-{node}", product="NVIDIA H100 80GB HBM3"),),
        links=(("X",),),
    )


async def _pod_bound_token(kube: KubeClient, namespace: str, node: str) -> str:
    await create_service_account(kube, namespace, "agent")
    await create_node(kube, node)
    pod = await create_agent_pod(
        kube, namespace, name="agent-0", node=node, service_account="agent"
    )
    return await kube.request_token(namespace=namespace, service_account="agent", bound_pod=pod)


async def _labels(kube: KubeClient, namespace: str, pod: str) -> dict[str, str]:
    obj = await kube.get(PODS, pod, namespace=namespace)
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels


async def test_secure_coordinator_end_to_end(
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    tls_files: tuple[Path, Path, Path],
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cert, key, ca = tls_files
    node, other = unique_name("gpu"), unique_name("gpu")
    token = await _pod_bound_token(kube, namespace, node)
    # the coordinator's own pod (as the Deployment's downward-API env names it)
    await kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "coordinator-0", "labels": {"app": "topos"}},
            "spec": {"containers": [{"name": "c", "image": "topos/coordinator:0.1.0"}]},
        },
        namespace=namespace,
    )
    monkeypatch.setenv("POD_NAME", "coordinator-0")
    monkeypatch.setenv("POD_NAMESPACE", namespace)
    config = parse_config(
        {
            # the leader's scheduler runs, but only over this test's namespace: the control plane
            # is shared, and other tests' pending pods are not ours to bind
            "scheduler": {"namespace": namespace},
            "tls": {"certFile": str(cert), "keyFile": str(key)},
            "auth": {"agentServiceAccounts": [f"{namespace}/agent"]},
            "limits": {"ratePerSecond": 100, "burst": 200},
            "leaderElection": {
                "namespace": namespace,
                "leaseDurationSeconds": 4,
                "renewDeadlineSeconds": 3,
                "retryPeriodSeconds": 0.5,
            },
        }
    )
    app = wire(config, KubeBackend(str(kubeconfig)))
    ssl_context = listener_tls(config.tls)
    assert ssl_context is not None
    client_tls = ssl.create_default_context(cafile=str(ca))
    async with (
        running(app, ssl_context=ssl_context) as url,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_tls)) as http,
    ):
        assert url.startswith("https://127.0.0.1:")
        async with http.get(f"{url}/healthz") as resp:
            assert resp.status == 200
        async with http.get(f"{url}/v1/nodes") as resp:
            assert resp.status == 401
        async with http.get(f"{url}/v1/nodes", headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status == 200

        # the leader is elected on the Lease in our namespace
        await asyncio.wait_for(app[LEADER].wait_until_leading(), 120)
        lease = await kube.get(LEASES, "topos-coordinator", namespace=namespace)
        assert lease["spec"]["holderIdentity"] == app[LEADER].identity
        # ... and its pod carries the label the Service selects
        await wait_for_object(
            kube,
            PODS,
            "coordinator-0",
            lambda pod: (pod["metadata"].get("labels") or {}).get("topos.io/leader") == "true",
            namespace=namespace,
            what="the leader label on coordinator-0",
        )

        # a real agent stream for its own node is admitted
        ws_url = url.replace("https://", "wss://") + "/v1/agents/stream"
        auth = StreamSettings(headers={"Authorization": f"Bearer {token}"}, backoff_max_s=1)
        agent = StreamClient(ws_url, node, agent_version="0.1.0", settings=auth, session=http)
        agent.publish(_topology(node))
        running_agent = asyncio.create_task(agent.run())
        await asyncio.wait_for(agent.connected.wait(), 120)
        assert app[INVENTORY].node(node) is not None
        await agent.close()
        await asyncio.gather(running_agent, return_exceptions=True)

        # the same token claiming another node is turned away, and never reaches the inventory
        liar = StreamClient(ws_url, other, agent_version="0.1.0", settings=auth, session=http)
        liar.publish(_topology(other))
        running_liar = asyncio.create_task(liar.run())
        await eventually(lambda: liar.stats.last_close, what="the liar's stream to be closed")
        await liar.close()
        await asyncio.gather(running_liar, return_exceptions=True)
        assert liar.stats.last_close is not None
        assert liar.stats.last_close.startswith("unauthorized: credentials are bound to node")
        assert node in liar.stats.last_close
        assert not liar.connected.is_set()
        assert app[INVENTORY].node(other) is None

        # no token at all: the upgrade is refused
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(ws_url)
        assert refused.value.status == 401

    # stopped gracefully: the lease is released and the pod no longer attracts the Service
    lease = await kube.get(LEASES, "topos-coordinator", namespace=namespace)
    assert lease["spec"].get("holderIdentity") in ("", None)
    assert "topos.io/leader" not in await _labels(kube, namespace, "coordinator-0")


def _in_memory() -> MemoryBackend:
    return MemoryBackend(MemoryCluster(Inventory()))


def test_in_memory_runs_with_auth_off_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        app = wire(Config(), _in_memory())
    assert any("authentication is OFF" in r.getMessage() for r in caplog.records)
    assert app[LEADER].is_leader()  # no election without an API server


def test_auth_cannot_be_forced_on_without_an_api_server() -> None:
    with pytest.raises(ConfigError, match="needs an API server"):
        wire(parse_config({"auth": {"enabled": True}}), _in_memory())


def test_missing_certificate_files_are_named() -> None:
    tls = TlsSection(cert_file="/nonexistent.crt", key_file="/nonexistent.key")
    with pytest.raises(TlsConfigError, match="does not exist"):
        listener_tls(tls)
    assert listener_tls(TlsSection()) is None  # no tls section: plain HTTP
