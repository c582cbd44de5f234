"""Pod subresources: ``pods/binding`` (bind to a node) and ``pods/eviction``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.kube.resources import PODS
from common.kube.verbs import GenericVerbs


class PodVerbs(GenericVerbs):
    async def bind(
        self,
        *,
        namespace: str,
        pod: str,
        node: str,
        pod_uid: str | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Bind a pending pod to a node through the ``pods/binding`` subresource.

        With ``pod_uid`` the bind fails (``Conflict``) if the pod was recreated under the same
        name; binding an already bound pod is a ``Conflict`` too. ``annotations`` are set on the
        pod by the API server in the same update that sets ``spec.nodeName`` (the Binding's
        annotations are copied onto the pod), so one request both records and binds.
        """
        metadata: dict[str, Any] = {"name": pod, "namespace": namespace}
        if pod_uid is not None:
            metadata["uid"] = pod_uid
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.create(PODS, body, namespace=namespace, name=pod, subresource="binding")

    async def evict(
        self,
        *,
        namespace: str,
        pod: str,
        pod_uid: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> None:
        """Evict through ``pods/eviction`` (honours PodDisruptionBudgets: a blocked eviction
        raises ``TooManyRequests``). With ``pod_uid`` only that pod goes: one re-created under
        the same name since fails the eviction with ``Conflict``."""
        body: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        options: dict[str, Any] = {}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if pod_uid is not None:
            options["preconditions"] = {"uid": pod_uid}
        if options:
            body["deleteOptions"] = options
        await self.create(PODS, body, namespace=namespace, name=pod, subresource="eviction")
