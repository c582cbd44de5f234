"""How ``KubeClient.connect`` sets up its HTTP session: environment lookups (proxy variables,
``~/.netrc``) only when a proxy variable is set; idle connections kept; Events sharing a few
connections of the lean pool."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common.kube import EVENTS, ClientSettings, Deferrable, KubeClient

pytestmark = pytest.mark.kube


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


async def test_without_proxy_variables_requests_skip_environment_lookups(
    kubeconfig: Path, no_proxy_env: pytest.MonkeyPatch
) -> None:
    async with await KubeClient.connect(kubeconfig) as kube:
        assert kube._api.rest_client.pool_manager.trust_env is False
        assert kube._transport is not None
        assert kube._transport.pool is not None  # JSON requests on the lean pool
        assert (await kube.version())["gitVersion"].startswith("v")  # and it still talks


async def test_a_proxy_variable_keeps_aiohttps_environment_handling(
    kubeconfig: Path, no_proxy_env: pytest.MonkeyPatch
) -> None:
    no_proxy_env.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    async with await KubeClient.connect(kubeconfig) as kube:
        assert kube._api.rest_client.pool_manager.trust_env is True
        assert kube._transport is not None
        assert kube._transport.pool is None  # never around the proxy: every request via aiohttp


async def test_idle_connections_stay_pooled_for_the_keepalive_setting(kubeconfig: Path) -> None:
    # aiohttp's default (15 s) emptied the pool between two bursts of binds: every connection
    # of the next burst paid a TLS handshake again.
    settings = ClientSettings(keepalive_s=45.0)
    async with await KubeClient.connect(kubeconfig, settings=settings) as kube:
        assert kube._api.rest_client.pool_manager.connector._keepalive_timeout == 45.0
        assert (await kube.version())["gitVersion"].startswith("v")
    async with await KubeClient.connect(kubeconfig) as kube:
        assert kube._api.rest_client.pool_manager.connector._keepalive_timeout == 60.0


async def test_a_burst_of_events_shares_the_deferrable_connections_and_all_arrive(
    kubeconfig: Path, namespace: str
) -> None:
    def event(i: int) -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"burst-{i}"},
            "involvedObject": {"kind": "Pod", "name": f"p-{i}", "namespace": namespace},
            "reason": "Scheduled",
            "message": f"event {i}",
            "type": "Normal",
        }

    settings = ClientSettings(deferrable_connections=2)
    async with await KubeClient.connect(kubeconfig, settings=settings) as kube:
        assert kube._transport is not None
        assert kube._transport.pool is not None
        await asyncio.gather(
            *(
                kube.create(EVENTS, event(i), namespace=namespace, deferrable=Deferrable())
                for i in range(30)
            )
        )
        assert kube._transport.pool.opened == 2  # 30 at once, over two connections
        stored = await kube.list(EVENTS, namespace=namespace)
    names = {item["metadata"]["name"] for item in stored["items"]}
    assert names >= {f"burst-{i}" for i in range(30)}
