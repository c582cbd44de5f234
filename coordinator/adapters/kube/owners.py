"""Workload owners of pending pods: Jobs, ReplicaSets, Deployments and StatefulSets, watched, and
the keys their pods inherit from them written onto the pods before the queue sees them.

:class:`Owners` caches the four kinds (in the served namespace) and resolves a pod's controller
chain — a ReplicaSet's own controller (its Deployment) merged in behind it — into an
:class:`~coordinator.core.podspec.inherit.Owner`. :class:`InheritingPending` sits between the
pending-pod watch and :class:`~coordinator.adapters.kube.pending.PendingPods`: a pending pod that
lacks keys its owner carries (:func:`~coordinator.core.podspec.inherit.inheritance`) is held back
and patched; the watch then delivers it with the keys and it joins the queue. A pod whose
controller is a watched kind not cached yet waits for it. When an owner changes, its pods not yet
bound are patched again. Owners of other kinds pass nothing on (their pods are queued as written).

JobSets, LeaderWorkerSets and RayClusters are watched too (each only where the API server serves
its type: without the CRD the type reads as empty and is listed again every 15 s): their pods get
the labels of their workload's gang (:mod:`coordinator.core.podspec.workloadgangs`), whoever
created the pods, and the workload's keys behind their nearer owners'.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from common import podkeys
from common.kube import PODS, KubeClient, KubeError, KubeObject, NotFound, Resource
from common.kube.retry import RetryPolicy, call_with_retries
from coordinator.adapters.kube.objects import Key, ObjectCache
from coordinator.adapters.kube.pending import PendingPods, pending_selector, unbound
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.adapters.kube.watchdecode import pending_pod_event
from coordinator.core.podspec.inherit import Owner, inheritance
from coordinator.core.podspec.workloadgangs import (
    JOBSET_NAME,
    JOBSET_REPLICATED_JOB,
    JOBSET_RESTART_ATTEMPT,
    JOBSET_UID,
    LWS_NAME,
    LWS_WORKER_INDEX,
    RAY_CLUSTER,
    WorkloadGang,
    WorkloadGangError,
    jobset_gang,
    lws_gang,
    raycluster_gang,
    workload_digest,
)
from coordinator.core.queue import SchedulingQueue

log = logging.getLogger(__name__)

__all__ = [
    "OWNER_KINDS",
    "WORKLOAD_KINDS",
    "InheritingPending",
    "Owners",
    "inheriting_pending_watch",
    "owner_of",
]

OWNER_KINDS: Final[dict[str, Resource]] = {
    "Job": Resource("batch", "v1", "jobs", namespaced=True, kind="Job"),
    "ReplicaSet": Resource("apps", "v1", "replicasets", namespaced=True, kind="ReplicaSet"),
    "Deployment": Resource("apps", "v1", "deployments", namespaced=True, kind="Deployment"),
    "StatefulSet": Resource("apps", "v1", "statefulsets", namespaced=True, kind="StatefulSet"),
}


#: Workload controllers whose pods form a gang of the workload's shape (CRDs: may be absent).
WORKLOAD_KINDS: Final[dict[str, Resource]] = {
    "JobSet": Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", namespaced=True, kind="JobSet"),
    "LeaderWorkerSet": Resource(
        "leaderworkerset.x-k8s.io",
        "v1",
        "leaderworkersets",
        namespaced=True,
        kind="LeaderWorkerSet",
    ),
    "RayCluster": Resource("ray.io", "v1", "rayclusters", namespaced=True, kind="RayCluster"),
}

#: The pod label naming its workload of each kind.
_NAME_LABEL: Final = {"JobSet": JOBSET_NAME, "LeaderWorkerSet": LWS_NAME, "RayCluster": RAY_CLUSTER}

#: Retries of the patch that writes a pod's inherited keys (it is idempotent: see ``_patch``).
PATCH_RETRY: Final = RetryPolicy(attempts=8, initial_delay_s=0.1, max_delay_s=2.0)

WorkloadGangOf = tuple[bool, WorkloadGang | WorkloadGangError | None]


def _controller(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = [r for r in meta.get("ownerReferences") or () if isinstance(r, Mapping)]
    chosen = [r for r in refs if r.get("controller") is True] or refs
    return chosen[0] if chosen else None


def _pods(kind: str, spec: Mapping[str, Any]) -> int:
    """How many pods of the workload must be placed together (the group's minimum).

    A Job's parallel pods start together: all of them. Replicas of a Deployment or StatefulSet
    come one at a time — a rolling update surges one new pod while the old ones run, a
    StatefulSet starts its pods in order, a scale-up adds a few — so each is placed as it comes
    (minimum 1) and the strategy applies among the replicas pending together and those placed;
    waiting for all replicas of a revision would stall every rollout."""
    if kind != "Job":
        return 1
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    n = parallelism if completions is None else min(parallelism, completions)
    return n if isinstance(n, int) and n > 0 else 1


def _most(kind: str, spec: Mapping[str, Any]) -> int:
    """How many pods of the workload run at once: a Job's :func:`_pods`, the replicas of a
    Deployment, ReplicaSet or StatefulSet (the largest group minimum it can meet)."""
    if kind == "Job":
        return _pods(kind, spec)
    replicas = spec.get("replicas", 1)
    return replicas if isinstance(replicas, int) and replicas > 0 else 1


class Owners:
    """Event-loop only. The four owner kinds, cached; ``on_change(kind, key)`` after a change."""

    def __init__(self, client: KubeClient, *, namespace: str | None = None) -> None:
        self.listeners: list[Any] = []
        #: ``watcher(kind, key, obj_or_None)`` after every change, status updates included
        #: (the workloads' selectors, :mod:`.workloads`, read these caches too).
        self.watchers: list[Any] = []
        self._digests: dict[tuple[str, Key], object] = {}
        self.caches = {
            kind: ObjectCache(client, resource, namespace=namespace, on_change=self._changed(kind))
            for kind, resource in OWNER_KINDS.items()
        }
        self.workloads = {
            kind: ObjectCache(client, resource, namespace=namespace, on_change=self._changed(kind))
            for kind, resource in WORKLOAD_KINDS.items()
        }
        every = [*self.caches.values(), *self.workloads.values()]
        self.feeds = [cache.run for cache in every]
        self.synced = [cache.synced for cache in every]

    def _changed(self, kind: str) -> Any:
        def changed(key: Key, obj: KubeObject | None) -> None:
            for watcher in self.watchers:
                watcher(kind, key, obj)
            # Status updates (a ReplicaSet's readyReplicas, a Job's active count) change nothing a
            # pod inherits: only its labels and annotations, its size and its identity are.
            digest = None
            if obj is not None:
                meta = obj.get("metadata") or {}
                annotations = tuple(sorted((meta.get("annotations") or {}).items()))
                labels = tuple(sorted((meta.get("labels") or {}).items()))
                spec = obj.get("spec") or {}
                shape = (
                    workload_digest(obj)
                    if kind in WORKLOAD_KINDS
                    else (_pods(kind, spec), _most(kind, spec))
                )
                digest = (meta.get("uid"), annotations, labels, shape)
            if self._digests.get((kind, key)) == digest:
                return
            if digest is None:
                self._digests.pop((kind, key), None)
            else:
                self._digests[(kind, key)] = digest
            for listener in self.listeners:
                listener(kind, key)

        return changed

    def resolve(self, pod: Mapping[str, Any]) -> Owner | bool | None:
        """The pod's workload owner; ``None``: it has none we watch; ``False``: its owner is a
        watched kind not in the cache (yet)."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        ref = _controller(meta)
        chain: list[tuple[str, Mapping[str, Any]]] = []
        while ref is not None and (not chain or chain[-1][0] == "ReplicaSet"):
            kind = str(ref.get("kind"))
            cache = self.caches.get(kind)
            if cache is None:
                break
            obj = cache.objects.get((namespace, str(ref.get("name"))))
            if obj is None or (obj.get("metadata") or {}).get("uid") != ref.get("uid"):
                return False if not chain else owner_of(chain)
            chain.append((kind, obj))
            ref = _controller(obj.get("metadata") or {})
        found = owner_of(chain) if chain else None
        workload = self._workload_of(meta)
        if workload is None:
            return found
        # A JobSet, LeaderWorkerSet or RayCluster passes its keys on behind its nearer owners
        # (a JobSet's Job, an LWS's StatefulSet): a key written on the workload reaches its pods.
        kind, top = workload
        top_meta = top.get("metadata") or {}
        annotations = {
            **(top_meta.get("annotations") or {}),
            **(found.annotations if found is not None else {}),
        }
        if found is not None:
            return replace(found, annotations=annotations)
        return Owner(kind=kind, name=str(top_meta.get("name") or ""), annotations=annotations)

    def controller(
        self, kind: str, namespace: str, name: str, uid: str
    ) -> Mapping[str, Any] | bool | None:
        """The cached object of a kind watched here (Job, Deployment, StatefulSet, JobSet,
        LeaderWorkerSet, RayCluster…) with that name and UID; ``None``: a kind not watched, or
        not served; ``False``: not in the cache (yet), or another object of that name."""
        cache = self.caches.get(kind) or self.workloads.get(kind)
        if cache is None or not cache.reflector.installed:
            return None
        obj = cache.objects.get((namespace, name))
        if obj is None or (obj.get("metadata") or {}).get("uid") != uid:
            return False
        return obj

    def _workload_of(self, meta: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
        """The cached JobSet, LeaderWorkerSet or RayCluster a pod's labels name, if any."""
        labels = meta.get("labels") or {}
        namespace = str(meta.get("namespace") or "default")
        for kind, label in _NAME_LABEL.items():
            name = labels.get(label)
            if name:
                obj = self.workloads[kind].objects.get((namespace, str(name)))
                return None if obj is None else (kind, obj)
        return None

    def workload_gang(self, pod: Mapping[str, Any]) -> WorkloadGangOf | bool:
        """``(is a JobSet's, LWS's or RayCluster's pod, its gang)``; ``False``: its workload is
        served but not in the cache (yet), or an LWS worker's StatefulSet is not."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        labels = meta.get("labels") or {}
        for kind, label in _NAME_LABEL.items():
            name = labels.get(label)
            if not name:
                continue
            cache = self.workloads[kind]
            if not cache.reflector.installed:
                return (False, None)  # the type is not served: no such workload
            obj = cache.objects.get((namespace, str(name)))
            if obj is None:
                return False
            uid = (obj.get("metadata") or {}).get("uid")
            if kind == "JobSet":
                if labels.get(JOBSET_UID) != uid:
                    return False
                return (True, self._jobset(obj, pod, labels))
            if kind == "LeaderWorkerSet":
                leader = self._leader_uid(pod, namespace)
                if leader is None:
                    return False
                return (True, lws_gang(obj, pod, leader_uid=leader))
            ref = _controller(meta)
            if ref is not None and ref.get("kind") == "RayCluster" and ref.get("uid") != uid:
                return False
            return (True, raycluster_gang(obj, pod))
        return (False, None)

    @staticmethod
    def _jobset(
        obj: Mapping[str, Any], pod: Mapping[str, Any], labels: Mapping[str, Any]
    ) -> WorkloadGang | WorkloadGangError | None:
        return jobset_gang(
            obj,
            pod,
            replicated_job=str(labels.get(JOBSET_REPLICATED_JOB) or ""),
            restart_attempt=str(labels.get(JOBSET_RESTART_ATTEMPT) or ""),
        )

    def _leader_uid(self, pod: Mapping[str, Any], namespace: str) -> str | None:
        """The UID of an LWS pod's group leader: its own for the leader, else the owner of the
        worker StatefulSet that owns it (the controller recreates a group by deleting its
        leader: a new leader, a new run); ``None`` while that StatefulSet is not cached."""
        meta = pod.get("metadata") or {}
        ref = _controller(meta)
        if ref is None or ref.get("kind") != "StatefulSet":
            return ""  # not made by LWS's StatefulSets: the group is known by its name alone
        if str((meta.get("labels") or {}).get(LWS_WORKER_INDEX, "0")) == "0":
            return str(meta.get("uid") or "")
        sts = self.caches["StatefulSet"].objects.get((namespace, str(ref.get("name"))))
        if sts is None or (sts.get("metadata") or {}).get("uid") != ref.get("uid"):
            return None
        leader = _controller(sts.get("metadata") or {})
        return str((leader or {}).get("uid") or "")


def owner_of(chain: Sequence[tuple[str, Mapping[str, Any]]]) -> Owner:
    """The workload of a controller chain (kind, object), nearest first: the farthest names it
    and says how many pods run; the nearest owner's annotations win, and its pod template's
    labels are the ones its pods were made with."""
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    for _, obj in reversed(chain):
        annotations.update((obj.get("metadata") or {}).get("annotations") or {})
        # A label the owner carries as its pod template does is the template's (the API server
        # gives a Job without labels its template's; a ReplicaSet carries its template's): its
        # pods carry it themselves, as the user's.
        own = _template_labels(obj)
        found = (obj.get("metadata") or {}).get("labels") or {}
        labels.update({k: v for k, v in found.items() if own.get(k) != v})
    kind, top = chain[-1]
    meta = top.get("metadata") or {}
    return Owner(
        kind=kind,
        name=str(meta.get("name") or ""),
        annotations=annotations,
        pods=_pods(kind, top.get("spec") or {}),
        template_labels=_template_labels(chain[0][1]),
        labels=labels,
        namespace=str(meta.get("namespace") or "default"),
        most=_most(kind, top.get("spec") or {}),
    )


def _template_labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    template = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return template.get("labels") or {}


class InheritingPending:
    """The pending-pod watch's handler: pods get their owner's keys before they are queued."""

    def __init__(
        self,
        client: KubeClient,
        queue: SchedulingQueue,
        owners: Owners,
        scheduler_name: str | None = None,
    ) -> None:
        self._client = client
        self._queue = PendingPods(queue, scheduler_name)
        self._owners = owners
        self._held: dict[str, KubeObject] = {}  # uid → pod waiting for its owner or its patch
        self._pending: dict[str, KubeObject] = {}  # uid → every pending pod seen
        self._patching: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        owners.listeners.append(self._owner_changed)

    def replace(self, items: list[KubeObject]) -> None:
        self._pending = {}
        self._held = {}
        self._queue.replace([obj for obj in unbound(items) if self._admit(obj)])

    def apply(self, kind: Change, obj: KubeObject) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            self._pending.pop(uid, None)
            self._held.pop(uid, None)
            self._queue.apply(kind, obj)
        elif self._admit(obj):
            self._queue.apply(kind, obj)

    def _admit(self, obj: KubeObject) -> bool:
        """Whether ``obj`` may be queued as it is (else it is held, and patched if need be)."""
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        self._pending[uid] = obj
        if meta.get("deletionTimestamp"):
            return True
        owner = self._owners.resolve(obj)
        workload = self._owners.workload_gang(obj)
        if isinstance(owner, bool) or isinstance(workload, bool):
            self._held[uid] = obj  # its owner's (or workload's) watch event has not come yet
            return False
        if owner is None and not workload[0]:
            self._held.pop(uid, None)
            return True
        change = inheritance(
            meta.get("annotations") or {},
            meta.get("labels") or {},
            owner,
            has_scheduling_group=bool((obj.get("spec") or {}).get("schedulingGroup")),
            workload_pod=workload[0],
            workload_gang=workload[1],
        )
        if change is None:
            self._held.pop(uid, None)
            return True
        self._held[uid] = obj
        if uid not in self._patching:
            self._patching.add(uid)
            task = asyncio.get_running_loop().create_task(self._patch(obj, change.patch()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return False

    async def _patch(self, obj: KubeObject, patch: dict[str, object]) -> None:
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        # The patch is for this pod, not one recreated under its name.
        body = {"metadata": {**patch["metadata"], "uid": uid}}  # type: ignore[dict-item]
        try:
            # The patch writes the same keys however often it is sent (and only onto this pod):
            # a connection lost or a server busy is retried, never read as a refusal — a gang's
            # member queued without its gang's labels would be placed alone.
            await call_with_retries(
                PATCH_RETRY,
                "PUT",  # retried as an idempotent verb is
                lambda: self._client.patch(PODS, name, body, namespace=namespace),
            )
        except NotFound:
            self._held.pop(uid, None)
        except KubeError as exc:
            log.warning(
                "pod %s/%s: cannot write its owner's keys (%s); queued as is", namespace, name, exc
            )
            if self._held.pop(uid, None) is not None:
                self._queue.apply("MODIFIED", obj)
        finally:
            self._patching.discard(uid)

    def _owner_changed(self, kind: str, key: Key) -> None:
        """Pods not bound yet whose owner (or owner's owner) is ``key`` are looked at again."""
        for uid, obj in list(self._pending.items()):
            meta = obj.get("metadata") or {}
            if meta.get("namespace", "default") != key[0]:
                continue
            ours = uid in self._held or _owned_by(self._owners, obj, kind, key[1])
            if ours and self._admit(obj):
                self._queue.apply("MODIFIED", obj)


def _owned_by(owners: Owners, pod: Mapping[str, Any], kind: str, name: str) -> bool:
    if kind in _NAME_LABEL:
        return ((pod.get("metadata") or {}).get("labels") or {}).get(_NAME_LABEL[kind]) == name
    ref = _controller(pod.get("metadata") or {})
    if ref is None:
        return False
    if ref.get("kind") == kind and ref.get("name") == name:
        return True
    if ref.get("kind") != "ReplicaSet" or kind != "Deployment":
        return False
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    rs = owners.caches["ReplicaSet"].objects.get((namespace, str(ref.get("name"))))
    top = _controller((rs or {}).get("metadata") or {})
    return top is not None and top.get("kind") == kind and top.get("name") == name


def inheriting_pending_watch(
    client: KubeClient,
    queue: SchedulingQueue,
    owners: Owners,
    *,
    scheduler_name: str = podkeys.SCHEDULER_NAME,
    namespace: str | None = None,
) -> Reflector:
    """:func:`~coordinator.adapters.kube.pending.pending_watch`, with the owners' keys inherited."""
    return Reflector(
        client,
        PODS,
        InheritingPending(client, queue, owners, scheduler_name),
        namespace=namespace,
        field_selector=pending_selector(scheduler_name),
        what="pending pods",
        decode=pending_pod_event,
    )
