"""Leases (coordination.k8s.io/v1), for leader election."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.kube.errors import NotFound
from common.kube.resources import LEASES
from common.kube.types import KubeObject
from common.kube.verbs import GenericVerbs


class LeaseVerbs(GenericVerbs):
    async def get_lease(self, *, namespace: str, name: str) -> KubeObject | None:
        """The Lease, or ``None`` if there is none yet."""
        try:
            return await self.get(LEASES, name, namespace=namespace)
        except NotFound:
            return None

    async def create_lease(
        self, *, namespace: str, name: str, spec: Mapping[str, Any]
    ) -> KubeObject:
        """Create a Lease (``AlreadyExists`` if someone else did first)."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": dict(spec),
        }
        return await self.create(LEASES, body, namespace=namespace)

    async def update_lease(self, lease: KubeObject, spec: Mapping[str, Any]) -> KubeObject:
        """Replace the Lease's spec, guarded by the resourceVersion it was read at (``Conflict``
        if another holder wrote it since)."""
        metadata = lease["metadata"]
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "resourceVersion": metadata["resourceVersion"],
            },
            "spec": dict(spec),
        }
        return await self.replace(LEASES, metadata["name"], body, namespace=metadata["namespace"])
