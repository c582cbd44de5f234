"""Posting core/v1 Events about objects, and ``object_reference``."""

from __future__ import annotations

import datetime
import time
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
        body = event_body(
            object_reference(regarding),
            reason=reason,
            message=message,
            event_type=event_type,
            action=action,
            component=component,
            instance=instance,
        )
        return await self.create(EVENTS, body, namespace=body["metadata"]["namespace"])


_STAMP = "%Y-%m-%dT%H:%M:%SZ"
_last_stamp: tuple[int, str] = (-1, "")  # the second last stamped, and its text


def event_stamp(when: datetime.datetime | None = None) -> str:
    """An Event's ``firstTimestamp``/``lastTimestamp`` (whole seconds, UTC). Now's is formatted
    once a second (py-spy: ``strftime`` was a percent of the coordinator's CPU per pod)."""
    global _last_stamp
    if when is not None:
        return when.strftime(_STAMP)
    second = int(time.time())
    if second != _last_stamp[0]:
        text = datetime.datetime.fromtimestamp(second, datetime.UTC).strftime(_STAMP)
        _last_stamp = (second, text)
    return _last_stamp[1]


def event_body(
    reference: ObjectReference,
    *,
    reason: str,
    message: str,
    event_type: str = "Normal",
    action: str = "",
    component: str = "topos",
    instance: str = "",
    count: int = 1,
    first: str = "",
    last: str = "",
) -> dict[str, Any]:
    """A new core/v1 Event about ``reference`` (named after it, with a random suffix)."""
    namespace = reference.get("namespace") or "default"
    stamp = event_stamp()
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
        "firstTimestamp": first or stamp,
        "lastTimestamp": last or stamp,
        "count": count,
    }
    if action:
        body["action"] = action
    return body


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
