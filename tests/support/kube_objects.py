"""Objects the tests create on the real API server, written once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.kube import NODES, PODS, SERVICE_ACCOUNTS, KubeClient

AGENT_IMAGE = "topos/agent:0.1.0"


async def create_node(
    kube: KubeClient,
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A bare Node (no kubelet runs here) labelled ``kubernetes.io/hostname`` as a kubelet
    would; ``labels`` add to it. The API server adds its not-ready taint (nothing lifts it)."""
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"kubernetes.io/hostname": name, **dict(labels or {})},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": meta}
    if spec is not None:
        body["spec"] = dict(spec)
    return await kube.create(NODES, body)


async def create_service_account(kube: KubeClient, namespace: str, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
    await kube.create(SERVICE_ACCOUNTS, body, namespace=namespace)


async def create_agent_pod(
    kube: KubeClient, namespace: str, *, name: str, node: str, service_account: str
) -> dict[str, Any]:
    """An agent's pod already bound to ``node``, running as ``service_account`` — what a
    DaemonSet pod looks like to TokenRequest (a token bound to it names the node)."""
    return await kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "serviceAccountName": service_account,
                "automountServiceAccountToken": False,
                "containers": [{"name": "agent", "image": AGENT_IMAGE}],
            },
        },
        namespace=namespace,
    )
