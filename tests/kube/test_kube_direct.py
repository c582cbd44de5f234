"""``KubeClient`` sends its requests on the ApiClient's session directly (``common.kube.direct``),
not through kubernetes_asyncio's ``call_api``: the credentials, refresh hooks and bodies must
reach the API server exactly as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.kube import (
    CONFIG_MAPS,
    SERVICE_ACCOUNTS,
    AlreadyExists,
    KubeClient,
    NotFound,
    Unauthorized,
)
from common.kube.direct import DirectTransport
from common.kube.resources import Resource
from devcluster.controlplane import ControlPlane

pytestmark = pytest.mark.kube

SELF_SUBJECT_REVIEWS = Resource(
    "authentication.k8s.io",
    "v1",
    "selfsubjectreviews",
    namespaced=False,
    kind="SelfSubjectReview",
)


async def _whoami(client: KubeClient) -> str:
    reply = await client.create(
        SELF_SUBJECT_REVIEWS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(reply["status"]["userInfo"]["username"])


def _token_kubeconfig(plane: ControlPlane, path: Path, token: str) -> Path:
    text = plane.kubeconfig.read_text()
    path.write_text(
        text.split("users:")[0]
        + f"users:\n- name: topos-admin\n  user:\n    token: {token}\n"
        + "contexts:"
        + text.split("contexts:")[1]
    )
    return path


async def _service_account_token(kube: KubeClient, namespace: str, name: str) -> str:
    await kube.create(
        SERVICE_ACCOUNTS,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        namespace=namespace,
    )
    return await kube.request_token(namespace=namespace, service_account=name)


async def test_requests_carry_the_kubeconfigs_bearer_token(
    kube: KubeClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    token = await _service_account_token(kube, namespace, "reader")
    config = _token_kubeconfig(control_plane, tmp_path / "sa", token)
    async with await KubeClient.connect(config) as client:
        assert client._transport is not None  # the direct path is the one in use
        assert await _whoami(client) == f"system:serviceaccount:{namespace}:reader"


async def test_the_token_is_asked_for_on_every_request(
    kube: KubeClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """A refresh hook (exec plugins, rotated in-cluster tokens) runs before each request."""
    first = await _service_account_token(kube, namespace, "first")
    second = await _service_account_token(kube, namespace, "second")
    config = _token_kubeconfig(control_plane, tmp_path / "sa", first)
    async with await KubeClient.connect(config) as client:
        assert await _whoami(client) == f"system:serviceaccount:{namespace}:first"
        calls: list[str] = []

        def rotate(configuration: Any) -> None:
            calls.append("refresh")
            configuration.api_key["BearerToken"] = f"Bearer {second}"

        client._api.configuration.refresh_api_key_hook = rotate
        assert await _whoami(client) == f"system:serviceaccount:{namespace}:second"
        assert calls == ["refresh"]

        def revoke(configuration: Any) -> None:
            configuration.api_key["BearerToken"] = "Bearer not-a-real-token"

        client._api.configuration.refresh_api_key_hook = revoke
        with pytest.raises(Unauthorized):
            await _whoami(client)


async def test_bodies_round_trip_non_ascii_text_and_empty_values(
    kube: KubeClient, namespace: str
) -> None:
    data = {"greeting": "grüße — 你好 ✓", "empty": "", "quote": 'say "hi"\n\\'}
    await kube.create(
        CONFIG_MAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "text"}, "data": data},
        namespace=namespace,
    )
    assert (await kube.get(CONFIG_MAPS, "text", namespace=namespace))["data"] == data
    await kube.patch(CONFIG_MAPS, "text", {"data": {"empty": None}}, namespace=namespace)
    left = (await kube.get(CONFIG_MAPS, "text", namespace=namespace))["data"]
    assert "empty" not in left
    assert left["greeting"] == data["greeting"]


def test_an_api_client_without_a_session_is_not_sent_to_directly() -> None:
    assert DirectTransport.of(object()) is None


async def test_json_requests_go_on_the_lean_pool_shared_by_budgets(
    control_plane: ControlPlane, namespace: str
) -> None:
    """Verbs with one JSON reply use ``common.kube.http1`` (kept connections, one pool for every
    budget over the connection); errors come back as before, naming the object."""
    async with await KubeClient.connect(control_plane.kubeconfig) as client:
        events = client.budget(None)
        assert client._transport is not None
        assert client._transport.pool is not None
        assert events._transport is client._transport
        pool = client._transport.pool
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "lean"}}
        for i in range(5):
            body["data"] = {"i": str(i)}
            if i == 0:
                await client.create(CONFIG_MAPS, body, namespace=namespace)
            else:
                await events.replace(CONFIG_MAPS, "lean", body, namespace=namespace)
        got = await client.get(CONFIG_MAPS, "lean", namespace=namespace)
        assert got["data"] == {"i": "4"}
        assert pool.opened == 1  # one kept connection carried all six, one after the other
        with pytest.raises(NotFound, match="absent"):
            await client.get(CONFIG_MAPS, "absent", namespace=namespace)
        with pytest.raises(AlreadyExists, match="lean"):
            await events.create(CONFIG_MAPS, body, namespace=namespace)
        assert pool.opened == 1  # an error reply leaves its connection usable
    assert pool.idle == 0  # closed with the client
