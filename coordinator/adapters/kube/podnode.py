"""Which node a pod is bound to, read from the API server: the agent guard's
:class:`~coordinator.app.auth.agents.PodNodeResolver` where a token review names only the pod."""

from __future__ import annotations

import logging

from common.kube import PODS, KubeClient, KubeError

_log = logging.getLogger("topos.coordinator.app.auth")

__all__ = ["KubePodNodeResolver"]


class KubePodNodeResolver:
    """Reads the pod from the API server (needs ``pods get``, which the coordinator has)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def node_of(self, namespace: str, pod: str, uid: str | None) -> str | None:
        try:
            obj = await self._client.get(PODS, pod, namespace=namespace)
        except KubeError as exc:
            _log.info("cannot read pod %s/%s for an agent token: %s", namespace, pod, exc)
            return None
        if uid is not None and (obj.get("metadata") or {}).get("uid") != uid:
            return None
        node = (obj.get("spec") or {}).get("nodeName")
        return node if isinstance(node, str) and node else None
