"""Posting core/v1 Events about objects, and ``object_reference``."""

from __future__ import annotations

import datetime
import uuid
from typing import Any, cast

from common.kube.resources import EVENTS
from common.kube.types import KubeObject, ObjectReference
from common.kube.verbs import GenericVerbs


class EventVerbs(GenericVerbs):
    async def create_event(
        self,
        *,
        regarding: KubeObject | ObjectReference,
        reason: str,
        message: str,
        event_type: str = "Normal",
        action: str = "",
        component: str = "topos",
        instance: str = "",
    ) -> KubeObject:
        """Post a core/v1 Event about an object (what ``kubectl describe`` shows under Events).

        ``regarding`` may be the object itself or an ObjectReference; cluster-scoped objects
        (Nodes) get their Event in the ``default`` namespace, as the kubelet does.
        """
        reference = object_reference(regarding)
        namespace = reference.get("namespace") or "default"
        now = datetime.datetime.now(datetime.UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{reference['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": dict(reference),
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": instance or component,
            # the legacy timestamps only: with eventTime set the API server demands the
            # events.k8s.io fields (action, reportingController) and rejects the rest
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        if action:
            body["action"] = action
        return await self.create(EVENTS, body, namespace=namespace)


def object_reference(obj: KubeObject | ObjectReference) -> ObjectReference:
    """An ObjectReference to ``obj`` (a full object or already a reference)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        reference: ObjectReference = {
            "apiVersion": str(obj["apiVersion"]),
            "kind": str(obj["kind"]),
            "name": str(metadata["name"]),
        }
        for key in ("namespace", "uid", "resourceVersion"):
            if metadata.get(key):
                reference[key] = str(metadata[key])
        return reference
    return cast(ObjectReference, dict(obj))
