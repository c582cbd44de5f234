"""Writes on the coordinator's own Pod (``POD_NAME``/``POD_NAMESPACE`` from the downward API): the
leader label the coordinator Service selects, and Warning Events that ``kubectl describe pod``
shows (a refused configuration).

A failed write is logged, never raised: neither leading nor a refused reload may fail because
its Pod could not be written."""

from __future__ import annotations

import logging
from collections.abc import Callable

from common.kube import PODS, KubeClient, KubeError

from .connection import NotConnected

log = logging.getLogger(__name__)

__all__ = ["OwnPod"]


class OwnPod:
    """The Pod ``namespace/name``, written through ``client()`` (asked at each write)."""

    def __init__(self, client: Callable[[], KubeClient], *, namespace: str, name: str) -> None:
        self._client = client
        self.namespace = namespace
        self.name = name

    async def label(self, key: str, value: str | None) -> None:
        """Set the label ``key`` to ``value`` (``None``: remove it)."""
        patch = {"metadata": {"labels": {key: value}}}
        try:
            await self._client().patch(PODS, self.name, patch, namespace=self.namespace)
        except (KubeError, NotConnected) as exc:
            log.warning(
                "cannot set %s=%s on pod %s/%s: %s", key, value, self.namespace, self.name, exc
            )

    async def warn(self, reason: str, message: str) -> None:
        """Post a Warning Event ``reason`` about the Pod (``message`` cut to the API's 1 KiB)."""
        regarding = {"apiVersion": "v1", "kind": "Pod", "name": self.name}
        try:
            await self._client().create_event(
                regarding={**regarding, "namespace": self.namespace},
                reason=reason,
                message=message[:1024],
                event_type="Warning",
            )
        except (KubeError, NotConnected) as exc:
            log.warning("no Event %s on pod %s/%s: %s", reason, self.namespace, self.name, exc)
