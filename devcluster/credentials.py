"""Real ServiceAccount tokens for the playground, so the coordinator keeps authentication on.

The coordinator lets an agent report a node only with a token bound to a pod on that node
(``coordinator.app.auth.agents``). So, as the agent DaemonSet would, each simulated node gets an
agent Pod ``topos-system/topos-agent-<node>`` (bound to the node, ServiceAccount
``topos-agent``; KWOK runs it like any pod), and the TokenRequest API issues a token bound to
that pod: the API server writes the pod's name and node into it, and the coordinator's
TokenReview reads them back. People get a token of their own ServiceAccount ``topos-user`` for
``curl`` and ``kubectl topos --coordinator``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Final

from common.kube import NAMESPACES, PODS, SERVICE_ACCOUNTS, AlreadyExists, KubeClient
from common.kube.resources import Resource

NAMESPACE: Final = "topos-system"
AGENT_ACCOUNT: Final = "topos-agent"
USER_ACCOUNT: Final = "topos-user"
TOKEN_SECONDS: Final = 7 * 24 * 3600
"""How long the tokens live: a week of playground (``down`` and ``up`` again for more)."""
AGENT_IMAGE: Final = "topos/agent:simulated"


def agent_pod_name(node: str) -> str:
    return f"{AGENT_ACCOUNT}-{node}"[:253]


async def _ensure(
    kube: KubeClient, resource: Resource, body: dict[str, Any], namespace: str | None = None
) -> None:
    with contextlib.suppress(AlreadyExists):
        await kube.create(resource, body, namespace=namespace)


async def ensure_accounts(kube: KubeClient) -> None:
    """Namespace ``topos-system`` and the two ServiceAccounts (idempotent)."""
    await _ensure(
        kube, NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    for name in (AGENT_ACCOUNT, USER_ACCOUNT):
        body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        await _ensure(kube, SERVICE_ACCOUNTS, body, namespace=NAMESPACE)


async def agent_pod(kube: KubeClient, node: str) -> dict[str, Any]:
    """The node's agent Pod (created if missing), bound to the node as a DaemonSet's would be."""
    name = agent_pod_name(node)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/name": "topos-agent",
                "app.kubernetes.io/part-of": "topos",
            },
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": AGENT_ACCOUNT,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "agent", "image": AGENT_IMAGE}],
        },
    }
    try:
        created: dict[str, Any] = await kube.create(PODS, body, namespace=NAMESPACE)
        return created
    except AlreadyExists:
        existing: dict[str, Any] = await kube.get(PODS, name, namespace=NAMESPACE)
        return existing


async def agent_tokens(kube: KubeClient, nodes: list[str], directory: Path) -> dict[str, Path]:
    """For each node, a token bound to its agent Pod, written to ``directory/<node>.token``
    (mode 0600); returns the files by node."""
    await ensure_accounts(kube)
    files: dict[str, Path] = {}
    for node in nodes:
        pod = await agent_pod(kube, node)
        token = await kube.request_token(
            namespace=NAMESPACE,
            service_account=AGENT_ACCOUNT,
            expiration_seconds=TOKEN_SECONDS,
            bound_pod=pod,
        )
        files[node] = _write_secret(directory / f"{node}.token", token)
    return files


async def user_token(kube: KubeClient, path: Path) -> Path:
    """A token of ``topos-system/topos-user`` for calling the coordinator, written to ``path``."""
    await ensure_accounts(kube)
    token = await kube.request_token(
        namespace=NAMESPACE, service_account=USER_ACCOUNT, expiration_seconds=TOKEN_SECONDS
    )
    return _write_secret(path, token)


def _write_secret(path: Path, text: str) -> Path:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
    return path
