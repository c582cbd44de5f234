"""The AgentPool controller's writes (``coordinator/neuronetes/kube/``, which decides them): the
pools' pods and gates, their PriorityClasses, AgentPool and ToolBinding status, the pools' Events;
and the API types it reads and writes.

Each method is one write of the controller's reconcile. A write whose object is gone is not an
error (the next reconcile sees it gone): those return ``None`` or nothing; any other refusal is
raised, for the reconcile to fail and retry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from common.kube import PODS, AlreadyExists, Invalid, KubeClient, KubeObject, NotFound, Resource
from common.kube.types import JsonPatchOperation

__all__ = ["AGENT_POOLS", "PRIORITY_CLASSES", "TOOL_BINDINGS", "AgentPoolWriter"]

AGENT_POOLS: Final = Resource("neuronetes.io", "v1alpha1", "agentpools", True, "AgentPool")
TOOL_BINDINGS: Final = Resource("neuronetes.io", "v1alpha1", "toolbindings", True, "ToolBinding")
PRIORITY_CLASSES: Final = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False, kind="PriorityClass"
)


class AgentPoolWriter:
    """The controller's writes through ``client`` (the connection's ``agentpools`` budget)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def event(
        self, obj: KubeObject, reason: str, message: str, *, warning: bool, instance: str
    ) -> None:
        await self._client.create_event(
            regarding=obj,
            reason=reason,
            message=message,
            event_type="Warning" if warning else "Normal",
            component="topos-neuronetes",
            instance=instance,
        )

    async def status(
        self, obj: KubeObject, status: Mapping[str, Any], *, binding: bool = False
    ) -> KubeObject | None:
        """Patch the AgentPool's (or ToolBinding's) status; ``None``: it is gone."""
        meta = obj["metadata"]
        try:
            return await self._client.patch(
                TOOL_BINDINGS if binding else AGENT_POOLS,
                meta["name"],
                {"status": dict(status)},
                namespace=meta.get("namespace"),
                subresource="status",
            )
        except NotFound:
            return None

    async def scale(self, obj: KubeObject, replicas: int) -> KubeObject:
        """Set the AgentPool's ``spec.replicas``; the pool as written."""
        meta = obj["metadata"]
        return await self._client.patch(
            AGENT_POOLS,
            meta["name"],
            {"spec": {"replicas": replicas}},
            namespace=meta.get("namespace"),
        )

    async def priority_class(self, body: KubeObject) -> None:
        """Make the PriorityClass ``body``; one of that name with another value or preemption
        policy is replaced (both are immutable)."""
        name = body["metadata"]["name"]
        try:
            await self._client.create(PRIORITY_CLASSES, body)
        except AlreadyExists:
            have = await self._client.get(PRIORITY_CLASSES, name)
            want = (body.get("value"), body.get("preemptionPolicy"))
            if (have.get("value"), have.get("preemptionPolicy")) != want:
                await self._client.delete(PRIORITY_CLASSES, name)
                await self._client.create(PRIORITY_CLASSES, body)

    async def delete_priority_class(self, name: str) -> None:
        with contextlib.suppress(NotFound):  # made by this or an earlier leader, or never
            await self._client.delete(PRIORITY_CLASSES, name)

    async def create_pod(self, namespace: str, body: KubeObject) -> KubeObject:
        return await self._client.create(PODS, body, namespace=namespace)

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod of that uid (one re-made under its name is left alone)."""
        with contextlib.suppress(NotFound):
            await self._client.delete(PODS, name, namespace=namespace, uid=uid)

    async def set_gates(self, namespace: str, name: str, uid: str, kept: Sequence[str]) -> None:
        """Leave the pod of that uid only the scheduling gates ``kept``."""
        ops: list[JsonPatchOperation] = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": g} for g in kept]}
            if kept
            else {"op": "remove", "path": "/spec/schedulingGates"},
        ]
        with contextlib.suppress(NotFound, Invalid):  # gone, or another pod by that name
            await self._client.patch(PODS, name, ops, namespace=namespace, patch_type="json")
