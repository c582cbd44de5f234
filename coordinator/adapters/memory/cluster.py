"""An in-memory cluster: the scheduler runtime's backend when there is no API server (the
embedded demo, ``--in-memory``, fast tests, ``topos simulate`` and predicted starts:
``coordinator/forecast/engine.py``).

It keeps Node and Pod objects as the API server would return them (plain dicts), and Events, and
plays the API server's part towards the rest of the coordinator:

- towards the **inventory** it is what ``KubeSync`` is on Kubernetes: Nodes and bound,
  unfinished pods are upserted, deleted and finished pods removed;
- towards the **queue** it is what :func:`~coordinator.adapters.kube.pending.pending_watch` is:
  pending pods with our scheduler name are added, updated and dropped (when bound or deleted);
- towards the **scheduler** it is a :class:`~coordinator.engine.ports.ClusterWriter`: DRA claim
  writes (:attr:`MemoryCluster.dra`, :mod:`.dra`), bind (annotations, ``spec.nodeName``,
  ``PodScheduled=True``), failures (Event + condition), Events, eviction. A finished or deleted
  pod leaves its claims' ``reservedFor`` (kube-controller-manager's part).

Objects handed out are copies; mutate the cluster only through its methods. Typical use::

    inventory = Inventory()
    cluster = MemoryCluster(inventory)
    runtime = memory_runtime(inventory, cluster)  # adapters/memory/runtime.py
    cluster.add_node("gpu-1", allocatable={"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8},
                     topology=discover_profile("dgx-h100", hostname="gpu-1"))
    cluster.create_pod(pod_manifest)
"""

from __future__ import annotations

import copy
import datetime
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from common import podkeys
from common.allocatable import KUBELET_MAX_PODS, allocatable_from_topology
from common.model import NodeTopology
from coordinator.adapters.memory.dra import MemoryDra
from coordinator.adapters.memory.volumes import MemoryVolumes
from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.queue import SchedulingQueue
from coordinator.core.snapshot.volumes import VolumeWrites
from coordinator.core.snapshot.workloads import KINDS, WorkloadSelectors
from coordinator.engine.claimstatus import extended_claim_status
from coordinator.engine.ports import (
    COMPONENT,
    CONDITION_REASON,
    REASON_SCHEDULED,
    BindConflict,
    PodRef,
)
from coordinator.inventory.store import Inventory, InventoryEvent
from coordinator.inventory.translate import bound_pod, kube_node, ran_to_end

__all__ = ["MemoryCluster"]

PodListener = Callable[[str, Mapping[str, Any]], None]  # (ADDED|MODIFIED|DELETED, pod)


def _stamp(now: float) -> str:
    return datetime.datetime.fromtimestamp(now, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MemoryCluster:
    def __init__(
        self,
        inventory: Inventory,
        *,
        scheduler_name: str = podkeys.SCHEDULER_NAME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inventory = inventory
        self.scheduler_name = scheduler_name
        self._clock = clock
        self._nodes: dict[str, dict[str, Any]] = {}
        self._pods: dict[str, dict[str, Any]] = {}
        self._events: list[dict[str, Any]] = []
        self._rv = itertools.count(1)
        self._listeners: list[PodListener] = []
        self.binds = 0
        #: pods/status writes (explanations, nominations) by pod ``namespace/name``
        self.status_writes: Counter[str] = Counter()
        #: ResourceSlices, DeviceClasses and ResourceClaims (the scheduler's view reads
        #: ``dra.store``).
        self.dra = MemoryDra(versions=self._rv)
        #: Services' and controllers' selectors (default topology spreading; the view reads it).
        self.workloads = WorkloadSelectors()
        #: PersistentVolumeClaims, PersistentVolumes, StorageClasses (the view reads
        #: ``volumes.store``; ``volumes.apply`` adds or changes one).
        self.volumes = MemoryVolumes(versions=self._rv)
        #: Job objects (``batch/v1``) by ``namespace/name``: defragmentation reads whether a
        #: Job's pods may move (``runtime.jobs``).
        self._jobs: dict[str, dict[str, Any]] = {}

    # --- feeds ---------------------------------------------------------------------------------

    def subscribe(self, listener: PodListener) -> Callable[[], None]:
        """Pod changes, as a watch would deliver them (copies)."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def attach(
        self, queue: SchedulingQueue, *, names: Collection[str] | None = None
    ) -> Callable[[], None]:
        """Feed ``queue`` with the pending pods naming one of ``names`` (none: the cluster's
        ``scheduler_name``), now and on every change (the pending watches)."""
        served = frozenset(names) if names is not None else frozenset((self.scheduler_name,))

        def on_pod(kind: str, obj: Mapping[str, Any]) -> None:
            if kind != "DELETED" and self._pending(obj, served):
                queue.add(obj)
            else:
                # Gone unless it left the pending set by being bound.
                queue.delete(
                    obj, gone=kind == "DELETED" or not (obj.get("spec") or {}).get("nodeName")
                )

        for obj in self._pods.values():
            if self._pending(obj, served):
                queue.add(copy.deepcopy(obj))
        return self.subscribe(on_pod)

    @staticmethod
    def _pending(obj: Mapping[str, Any], names: Collection[str]) -> bool:
        spec = obj.get("spec") or {}
        meta = obj.get("metadata") or {}
        return (
            spec.get("schedulerName") in names
            and not spec.get("nodeName")
            and not meta.get("deletionTimestamp")
            and (obj.get("status") or {}).get("phase", "Pending") == "Pending"
        )

    def _publish(self, kind: str, obj: dict[str, Any]) -> None:
        pod = bound_pod(obj)
        uid = str(obj["metadata"]["uid"])
        if kind == "DELETED" or pod is None:
            self.inventory.delete_pod(uid, ended=kind != "DELETED" and ran_to_end(obj))
            if kind == "DELETED" or obj["status"].get("phase") in ("Succeeded", "Failed"):
                self.dra.unreserve(uid)
        else:
            self.inventory.upsert_pod(pod)
        for listener in tuple(self._listeners):
            listener(kind, copy.deepcopy(obj))

    # --- nodes ---------------------------------------------------------------------------------

    def register_reported_nodes(self) -> Callable[[], None]:
        """Do the kubelet's part for ``topos coordinator --in-memory``, where agents are the only
        source of nodes: register a Ready Node for every node an agent reports, its allocatable
        following the agent's hardware. Returns a function that stops it."""

        def on_event(event: InventoryEvent) -> None:
            state = self.inventory.node(event.node)
            if event.node in self._nodes or state is None or state.agent_id is None:
                return
            node = self._nodes[event.node] = self._node_object(event.node, {}, (), False, True)
            self.inventory.upsert_node(kube_node(node))

        return self.inventory.subscribe(on_event)

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str | int] | None = None,
        taints: Iterable[Mapping[str, str]] = (),
        unschedulable: bool = False,
        ready: bool = True,
        topology: NodeTopology | None = None,
    ) -> dict[str, Any]:
        """A Node object; with ``topology``, also that node's agent hello (as if its agent had
        connected). Allocatable defaults to what the topology implies."""
        derived = (
            allocatable_from_topology(topology)
            if topology is not None
            else {"pods": KUBELET_MAX_PODS}
        )
        alloc = {k: f"{v}m" if k == "cpu" else str(v) for k, v in derived.items()}
        alloc.update({k: str(v) for k, v in (allocatable or {}).items()})
        obj = self._node_object(name, alloc, taints, unschedulable, ready, labels)
        self._nodes[name] = obj
        self.inventory.upsert_node(kube_node(obj))
        if topology is not None:
            self.inventory.apply_hello(
                name,
                agent_id=f"memory-{name}",
                agent_version="memory",
                seq=0,
                topology=topology,
                allocations=(),
            )
        return copy.deepcopy(obj)

    def _node_object(
        self,
        name: str,
        alloc: Mapping[str, str],
        taints: Iterable[Mapping[str, str]],
        unschedulable: bool,
        ready: bool,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": str(uuid.uuid4()),
                "labels": {"kubernetes.io/hostname": name, **dict(labels or {})},
                "resourceVersion": str(next(self._rv)),
                "creationTimestamp": _stamp(self._clock()),
            },
            "spec": {"unschedulable": unschedulable, "taints": [dict(t) for t in taints]},
            "status": {
                "capacity": dict(alloc),
                "allocatable": dict(alloc),
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    def update_node(
        self, name: str, *, ready: bool | None = None, unschedulable: bool | None = None
    ) -> None:
        obj = self._nodes[name]
        if ready is not None:
            obj["status"]["conditions"] = [
                {"type": "Ready", "status": "True" if ready else "False"}
            ]
        if unschedulable is not None:
            obj["spec"]["unschedulable"] = unschedulable
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self.inventory.upsert_node(kube_node(obj))

    def remove_node(self, name: str) -> None:
        if self._nodes.pop(name, None) is not None:
            self.inventory.delete_node(name)

    def node(self, name: str) -> dict[str, Any] | None:
        obj = self._nodes.get(name)
        return None if obj is None else copy.deepcopy(obj)

    def touch_agents(self) -> None:
        """Heartbeat every injected agent (keeps them from going stale under a sweeper)."""
        for name in self._nodes:
            self.inventory.touch(name)

    # --- pods ----------------------------------------------------------------------------------

    def create_pod(self, manifest: Mapping[str, Any], *, keep_uid: bool = False) -> dict[str, Any]:
        """Create a pod from a manifest (namespace ``default`` unless given). It gets a new
        ``uid``, as from the API server, unless ``keep_uid`` and the manifest has one (a copy of
        a cluster: its claims name their pods by UID, in ``reservedFor`` and owner
        references)."""
        obj = copy.deepcopy(dict(manifest))
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Pod")
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        if not meta.get("name"):
            raise ValueError("pod manifest needs metadata.name")
        key = f"{meta['namespace']}/{meta['name']}"
        if key in self._pods:
            raise ValueError(f"pod {key} already exists")
        meta["uid"] = (keep_uid and meta.get("uid")) or str(uuid.uuid4())
        meta["creationTimestamp"] = _stamp(self._clock())
        meta["resourceVersion"] = str(next(self._rv))
        spec = obj.setdefault("spec", {})
        spec.setdefault("schedulerName", "default-scheduler")
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        if spec.get("schedulingGates") and not status.get("conditions"):
            # The API server's pod strategy marks a pod created with gates.
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                    "lastTransitionTime": meta["creationTimestamp"],
                }
            ]
        self._pods[key] = obj
        self._publish("ADDED", obj)
        return copy.deepcopy(obj)

    def apply_workload(self, manifest: Mapping[str, Any]) -> None:
        """A Service, ReplicationController, ReplicaSet or StatefulSet (namespace ``default``
        unless given): only its selector is kept, for the default spreading of the pods it
        selects (pods are still created with :meth:`create_pod`)."""
        kind = str(manifest.get("kind") or "")
        if kind not in KINDS:
            raise ValueError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
        self.workloads.put(kind, manifest)

    def apply_job(self, manifest: Mapping[str, Any]) -> None:
        """A ``batch/v1`` Job (namespace ``default`` unless given), kept as given: the pods it
        owns name its ``metadata.uid`` (pods are still created with :meth:`create_pod`)."""
        if manifest.get("kind") != "Job":
            raise ValueError(f"kind: {manifest.get('kind')!r} is not Job")
        meta = manifest.get("metadata") or {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        self._jobs[key] = copy.deepcopy(dict(manifest))

    def jobs(self) -> list[dict[str, Any]]:
        return list(self._jobs.values())

    def delete_workload(self, kind: str, namespace: str, name: str) -> None:
        self.workloads.remove(kind, namespace, name)

    def update_pod_metadata(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> dict[str, Any]:
        """Merge labels/annotations into a pod (``None`` removes a key), as ``kubectl annotate``."""
        obj = self._pods[f"{namespace}/{name}"]
        for field, changes in (("labels", labels), ("annotations", annotations)):
            if changes:
                current = dict(obj["metadata"].get(field) or {})
                for k, v in changes.items():
                    if v is None:
                        current.pop(k, None)
                    else:
                        current[k] = v
                obj["metadata"][field] = current
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._publish("MODIFIED", obj)
        return copy.deepcopy(obj)

    def delete_pod(self, namespace: str, name: str) -> bool:
        obj = self._pods.pop(f"{namespace}/{name}", None)
        if obj is None:
            return False
        self._publish("DELETED", obj)
        return True

    def finish_pod(self, namespace: str, name: str, *, phase: str = "Succeeded") -> None:
        """The pod's containers ended: it stops holding capacity."""
        obj = self._pods[f"{namespace}/{name}"]
        obj["status"]["phase"] = phase
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._publish("MODIFIED", obj)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self._pods.get(f"{namespace}/{name}")
        return None if obj is None else copy.deepcopy(obj)

    def pods(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(p) for p in self._pods.values()]

    def events(self, namespace: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
        """Events, oldest first, optionally only those about one pod."""
        return [
            copy.deepcopy(e)
            for e in self._events
            if (namespace is None or e["involvedObject"]["namespace"] == namespace)
            and (name is None or e["involvedObject"]["name"] == name)
        ]

    # --- ClusterWriter -------------------------------------------------------------------------

    def _live(self, pod: PodRef) -> dict[str, Any]:
        obj = self._pods.get(pod.key)
        if obj is None:
            raise BindConflict(f"pod {pod.key} not found")
        if pod.uid and obj["metadata"].get("uid") != pod.uid:
            raise BindConflict(f"pod {pod.key} was recreated (uid {obj['metadata']['uid']})")
        return obj

    def _set_condition(self, obj: dict[str, Any], condition: dict[str, Any]) -> None:
        conditions = [
            c for c in obj["status"].get("conditions") or () if c.get("type") != condition["type"]
        ]
        conditions.append(condition)
        obj["status"]["conditions"] = conditions

    async def allocate_claims(
        self, pod: PodRef, claims: Sequence[ClaimAllocation]
    ) -> tuple[ClaimAllocation, ...]:
        obj = self._live(pod)
        written = self.dra.allocate(pod, claims)
        for claim in written:
            if claim.extended:
                obj["status"]["extendedResourceClaimStatus"] = extended_claim_status(claim)
                obj["metadata"]["resourceVersion"] = str(next(self._rv))
                self._publish("MODIFIED", obj)
        return written

    async def release_claims(self, pod: PodRef, claims: Sequence[ClaimAllocation]) -> None:
        self.dra.release(pod, claims)
        obj = self._pods.get(pod.key)
        if obj is not None and any(c.extended for c in claims):
            obj["status"].pop("extendedResourceClaimStatus", None)
            obj["metadata"]["resourceVersion"] = str(next(self._rv))
            self._publish("MODIFIED", obj)

    async def bind_volumes(self, pod: PodRef, writes: VolumeWrites) -> None:
        self._live(pod)
        self.volumes.bind(pod, writes)

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        obj = self._live(pod)
        if obj["spec"].get("nodeName"):
            raise BindConflict(f"pod {pod.key} is already assigned to {obj['spec']['nodeName']}")
        if node not in self._nodes:
            raise BindConflict(f"node {node} not found")
        obj["metadata"]["annotations"] = {
            **(obj["metadata"].get("annotations") or {}),
            **dict(annotations),
        }
        obj["spec"]["nodeName"] = node
        obj.setdefault("status", {})["startTime"] = _stamp(self._clock())  # no kubelet: starts now
        self._set_condition(
            obj,
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _stamp(self._clock())},
        )
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self.binds += 1
        self._publish("MODIFIED", obj)

    async def explain(self, pod: PodRef, message: str, *, nominated: str = "") -> bool:
        obj = self._pods.get(pod.key)
        if obj is None:
            return False
        self._set_condition(
            obj,
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": CONDITION_REASON,
                "message": message,
                "lastTransitionTime": _stamp(self._clock()),
            },
        )
        if nominated:
            obj["status"]["nominatedNodeName"] = nominated
        self._status_written(pod, obj)
        return True

    async def nominate(self, pod: PodRef, node: str) -> None:
        """A :data:`~coordinator.engine.ports.Nominate`: ``status.nominatedNodeName`` alone
        (``""`` clears it), as the API server keeps it."""
        obj = self._pods.get(pod.key)
        if obj is None or (pod.uid and obj["metadata"].get("uid") != pod.uid):
            return
        if node:
            obj["status"]["nominatedNodeName"] = node
        else:
            obj["status"].pop("nominatedNodeName", None)
        self._status_written(pod, obj)

    def _status_written(self, pod: PodRef, obj: dict[str, Any]) -> None:
        """A ``pods/status`` write applied: a new version, counted and told to the watchers."""
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self.status_writes[pod.key] += 1
        self._publish("MODIFIED", obj)

    async def record_scheduled(self, pod: PodRef, message: str) -> None:
        await self.event(pod, reason=REASON_SCHEDULED, message=message)

    async def event(
        self, pod: PodRef, *, reason: str, message: str, event_type: str = "Normal"
    ) -> None:
        self._events.append(
            {
                "involvedObject": {
                    "kind": "Pod",
                    "namespace": pod.namespace,
                    "name": pod.name,
                    "uid": pod.uid,
                },
                "reason": reason,
                "message": message[:1024],
                "type": event_type,
                "source": {"component": COMPONENT},
                "firstTimestamp": _stamp(self._clock()),
            }
        )

    async def evict(self, pod: PodRef, *, grace_period_s: int | None = None) -> None:
        current = self._pods.get(pod.key)
        if current is None or (pod.uid and current["metadata"].get("uid") != pod.uid):
            return  # gone, or re-created under its name since: not the pod decided on
        self.delete_pod(pod.namespace, pod.name)
