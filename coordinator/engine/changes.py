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
- **pods** — a pod left, or changed its labels: pods with affinity or spread terms;
- **a pod came** — a pod was bound somewhere: the pods it may let in, those with a required
  pod affinity term or a ``DoNotSchedule`` spread constraint that selects it (kube-scheduler's
  queueing hints for InterPodAffinity and PodTopologySpread on a pod's arrival); a pod only its
  own anti-affinity or another pod's holds back is not woken by an arrival, which can only
  tighten those. A pod that changed in place with its labels kept (it started) wakes no one;
- **volumes** — a PersistentVolumeClaim, PersistentVolume or StorageClass changed: pods whose
  volumes name a claim.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from coordinator.core.podspec.affinity import AffinityTerm
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.queue import QueuedPod, SchedulingQueue

__all__ = ["PendingChanges"]

#: arrivals kept between two applies; beyond them every affinity-sensitive pod goes back
_ARRIVALS_KEPT: Final = 64

Arrival = tuple[str, Mapping[str, str]]  # (namespace, labels) of a pod that was bound


def _affinity_sensitive(pod: QueuedPod) -> bool:
    req = pod.request
    return isinstance(req, PodRequest) and bool(req.has_affinity_terms or req.spread)


def _term_may_select(term: AffinityTerm, namespace: str, labels: Mapping[str, str]) -> bool:
    selector = term.namespace_selector
    if selector is not None and not selector.is_empty:  # namespace labels not known here: may
        return term.selector is not None and term.selector.matches(labels)
    return term.matches_pod(namespace, labels, None)


def _let_in_by(arrivals: Sequence[Arrival]) -> Callable[[QueuedPod], bool]:
    """The waiting pods one of ``arrivals`` may let in."""

    def let_in(pod: QueuedPod) -> bool:
        req = pod.request
        if not _affinity_sensitive(pod) or not isinstance(req, PodRequest):
            return False
        if req.gang is not None:
            return True  # its siblings' placement is planned with it: as any change
        for namespace, labels in arrivals:
            if any(_term_may_select(t, namespace, labels) for t in req.pod_affinity):
                return True
            if namespace == req.namespace and any(
                c.when_unsatisfiable == "DoNotSchedule"
                and c.selector is not None
                and c.selector.matches(labels)
                for c in req.spread
            ):
                return True
        return False

    return let_in


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
        self._arrivals: list[Arrival] = []

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

    def pod_came(self, namespace: str, labels: Mapping[str, str]) -> None:
        """A pod was bound (or moved) in ``namespace`` with ``labels``."""
        if len(self._arrivals) < _ARRIVALS_KEPT:
            self._arrivals.append((namespace, labels))
        else:
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
        arrivals, self._arrivals = self._arrivals, []
        if volumes and not everything:
            self.queue.cluster_changed(_has_volume_claims, counts=True)
        if everything or capacity:
            self.queue.cluster_changed(None if everything else _waits_for_any, counts=True)
        elif pods:
            self.queue.cluster_changed(_affinity_sensitive)
        elif arrivals:
            self.queue.cluster_changed(_let_in_by(arrivals))
        if claims and not everything:
            self.queue.cluster_changed(_waits_for_claim)
