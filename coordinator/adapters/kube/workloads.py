"""The selectors of Services, ReplicationControllers, ReplicaSets and StatefulSets, watched into
the view's :class:`~coordinator.core.snapshot.workloads.WorkloadSelectors` — what
PodTopologySpread's default constraints select a pod's siblings with, as kube-scheduler's
listers do.

Services and ReplicationControllers get a watch each (only their selectors are kept); ReplicaSets
and StatefulSets are read from the :class:`~.owners.Owners` caches, which already watch them.
Nothing is requeued on a change: default spreading under ``defaultingType: System`` only scores
(kube-scheduler registers no Service or controller events for it either).
"""

from __future__ import annotations

from common.kube import KubeClient, KubeObject, Resource
from coordinator.adapters.kube.objects import Key
from coordinator.adapters.kube.owners import Owners
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.core.snapshot.workloads import WorkloadSelectors

__all__ = ["REPLICATION_CONTROLLERS", "SERVICES", "workload_watches"]

SERVICES = Resource("", "v1", "services", namespaced=True, kind="Service")
REPLICATION_CONTROLLERS = Resource(
    "", "v1", "replicationcontrollers", namespaced=True, kind="ReplicationController"
)


class _Selectors:
    """A reflector's handler: one kind's selectors into ``workloads``."""

    def __init__(self, workloads: WorkloadSelectors, kind: str) -> None:
        self._workloads = workloads
        self._kind = kind

    def replace(self, items: list[KubeObject]) -> None:
        self._workloads.clear(self._kind)
        for obj in items:
            self._workloads.put(self._kind, obj)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        if kind == "DELETED":
            meta = obj.get("metadata") or {}
            name = str(meta.get("name") or "")
            self._workloads.remove(self._kind, str(meta.get("namespace") or "default"), name)
        else:
            self._workloads.put(self._kind, obj)


def workload_watches(
    client: KubeClient, workloads: WorkloadSelectors, owners: Owners, *, namespace: str | None
) -> list[Reflector]:
    """Reflectors for Services and ReplicationControllers (run them, wait for ``synced``), with
    ReplicaSets' and StatefulSets' selectors taken from ``owners``' caches as they change."""

    def owned(kind: str, key: Key, obj: KubeObject | None) -> None:
        if kind not in ("ReplicaSet", "StatefulSet"):
            return
        if obj is None:
            workloads.remove(kind, *key)
        else:
            workloads.put(kind, obj)

    owners.watchers.append(owned)
    return [
        Reflector(
            client, resource, _Selectors(workloads, resource.kind), namespace=namespace, what=what
        )
        for resource, what in (
            (SERVICES, "services"),
            (REPLICATION_CONTROLLERS, "replication controllers"),
        )
    ]
