"""Which of a pool's pods to create, delete or ungate so it runs ``desired`` pods of its
current template.

Finished pods (``Succeeded`` / ``Failed``) are deleted and replaced; pods of an older template
(another ``neuronetes.io/template-hash``) are deleted and replaced; above ``desired`` the pods
not yet bound go first, then the newest. A pod still held by a scheduling gate the template no
longer has is ungated in place (gates may only be removed from a pod).
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator.neuronetes.decide.podtemplate import CREATED_ANNOTATION, HASH_LABEL

__all__ = ["OwnedPod", "ReplicaPlan", "owned_pod", "plan_replicas"]


@dataclass(frozen=True, slots=True)
class OwnedPod:
    name: str
    uid: str
    created: float  # Unix time: the controller's annotation, else creationTimestamp
    node: str | None
    phase: str
    deleting: bool
    ready: bool
    template_hash: str
    gates: tuple[str, ...] = ()
    ip: str | None = None
    metrics_port: str | None = None  # annotation prometheus.io/port
    metrics_path: str | None = None  # annotation prometheus.io/path
    #: Why the scheduler has not placed it: its PodScheduled=False message, if any.
    unscheduled: str | None = None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def live(self) -> bool:
        return not self.deleting and not self.finished


def owned_pod(pod: Mapping[str, Any]) -> OwnedPod:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    conditions = status.get("conditions") or ()
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    gates = tuple(str(g.get("name")) for g in spec.get("schedulingGates") or ())
    unscheduled = next(
        (
            str(c.get("message") or c.get("reason") or "")
            for c in conditions
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ),
        None,
    )
    return OwnedPod(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        created=_created(meta),
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        ready=ready,
        template_hash=str((meta.get("labels") or {}).get(HASH_LABEL) or ""),
        gates=gates,
        ip=status.get("podIP") or None,
        metrics_port=(meta.get("annotations") or {}).get("prometheus.io/port"),
        metrics_path=(meta.get("annotations") or {}).get("prometheus.io/path"),
        unscheduled=unscheduled or None,
    )


@dataclass(slots=True)
class ReplicaPlan:
    create: int = 0
    delete: list[OwnedPod] = field(default_factory=list)
    ungate: list[tuple[OwnedPod, tuple[str, ...]]] = field(default_factory=list)
    """Pods and the gates they keep."""

    @property
    def empty(self) -> bool:
        return not (self.create or self.delete or self.ungate)


def _created(meta: Mapping[str, Any]) -> float:
    """When the pod was made, to the microsecond where the controller wrote it
    (``creationTimestamp`` has whole seconds: two pods of one reconcile would tie)."""
    stamp = (meta.get("annotations") or {}).get(CREATED_ANNOTATION)
    with contextlib.suppress(ValueError):
        return float(str(stamp))
    text = str(meta.get("creationTimestamp") or "")
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _scale_down_order(pod: OwnedPod) -> tuple[bool, float, str]:
    # Unbound first (False < True), then newest first.
    return (pod.node is not None, -pod.created, _neg(pod.name))


def _neg(text: str) -> str:
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


def plan_replicas(
    desired: int, pods: Iterable[OwnedPod], template_hash: str, gates: Iterable[str] = ()
) -> ReplicaPlan:
    plan = ReplicaPlan()
    keep_gates = set(gates)
    current: list[OwnedPod] = []
    for pod in pods:
        if pod.deleting:
            continue
        if pod.finished or pod.template_hash != template_hash:
            plan.delete.append(pod)
            continue
        current.append(pod)
    if len(current) > desired:
        current.sort(key=_scale_down_order)
        plan.delete.extend(current[: len(current) - desired])
        current = current[len(current) - desired :]
    plan.create = max(0, desired - len(current))
    for pod in current:
        kept = tuple(g for g in pod.gates if g in keep_gates)
        if pod.node is None and kept != pod.gates:
            plan.ungate.append((pod, kept))
    return plan
