"""How ``KubeClient.connect`` sets up its HTTP session: environment lookups (proxy variables,
``~/.netrc``) only when a proxy variable is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.kube import KubeClient

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
        assert (await kube.version())["gitVersion"].startswith("v")  # and it still talks


async def test_a_proxy_variable_keeps_aiohttps_environment_handling(
    kubeconfig: Path, no_proxy_env: pytest.MonkeyPatch
) -> None:
    no_proxy_env.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    async with await KubeClient.connect(kubeconfig) as kube:
        assert kube._api.rest_client.pool_manager.trust_env is True
