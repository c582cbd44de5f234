"""Which waiting pods a change of the cluster sends back to the queue (:class:`PendingChanges`).

Changes are noted as they arrive (watch callbacks) and applied once, before the loop's next pop.
A pod only goes back for a change that may help it (``QueuedPod.waits_for``, set from its last
failure): a failed retry doubles its backoff, so waking pods for nothing makes them miss the
change that frees their room. Pods waiting for DRA devices or claims have no backoff at all
(they are woken only by DRA changes; kube-scheduler likewise pops a backing-off pod at once when
nothing else is ready). Kinds of change:

- **everything** — a node's labels, taints or readiness changed, room held for a pod was given
  back, or DRA devices were freed (a claim deallocated or deleted, a slice or class changed):
  every unschedulable pod goes back;
- **capacity** — pods ended: every pod but those only DRA devices hold back (their GPUs are
  released with their claims, by kube-controller-manager, a moment later);
- **claims** — any other DRA change (a claim created or allocated): pods whose claims were
  refused before any node was looked at (waiting for a claim to exist, or to be fixed);
- **pods** — a pod appeared or changed somewhere: pods with affinity or spread terms;
- **volumes** — a PersistentVolumeClaim, PersistentVolume or StorageClass changed: pods whose
  volumes name a claim.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.core.podspec.parse import PodRequest
from coordinator.core.queue import QueuedPod, SchedulingQueue

__all__ = ["PendingChanges"]


def _affinity_sensitive(pod: QueuedPod) -> bool:
    req = pod.request
    return isinstance(req, PodRequest) and bool(req.has_affinity_terms or req.spread)


def _has_volume_claims(pod: QueuedPod) -> bool:
    req = pod.request
    return isinstance(req, PodRequest) and bool(req.volume_claims)


def _waits_for_any(pod: QueuedPod) -> bool:
    return pod.waits_for == "any"


def _waits_for_claim(pod: QueuedPod) -> bool:
    return pod.waits_for == "claim"


class PendingChanges:
    """Changes noted since the last :meth:`apply`; ``wake`` is called on every note."""

    def __init__(self, queue: SchedulingQueue, wake: Callable[[], None]) -> None:
        self.queue = queue
        self._wake = wake
        self._everything = self._capacity = self._claims = self._pods = False
        self._volumes = False

    def everything(self) -> None:
        self._everything = True
        self._wake()

    def capacity(self) -> None:
        self._capacity = True
        self._wake()

    def dra(self, frees: bool) -> None:
        if frees:
            self._everything = True
        else:
            self._claims = True
        self._wake()

    def pods(self) -> None:
        self._pods = True
        self._wake()

    def volumes(self) -> None:
        self._volumes = True
        self._wake()

    def apply(self) -> None:
        everything, capacity, claims, pods = (
            self._everything,
            self._capacity,
            self._claims,
            self._pods,
        )
        self._everything = self._capacity = self._claims = self._pods = False
        volumes, self._volumes = self._volumes, False
        if volumes and not everything:
            self.queue.cluster_changed(_has_volume_claims, counts=True)
        if everything or capacity:
            self.queue.cluster_changed(None if everything else _waits_for_any, counts=True)
        elif pods:
            self.queue.cluster_changed(_affinity_sensitive)
        if claims and not everything:
            self.queue.cluster_changed(_waits_for_claim)
