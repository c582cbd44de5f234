"""Which waiting pods a change of the cluster sends back to the queue (:class:`PendingChanges`).

Changes are noted as they arrive (watch callbacks) and applied once, before the loop's next pop.
A pod only goes back for a change that may help it (``QueuedPod.waits_for``, set from its last
failure): a failed retry doubles its backoff, so waking pods for nothing makes them miss the
change that frees their room. Pods waiting for DRA devices or claims have no backoff at all
(they are woken only by DRA changes; kube-scheduler likewise pops a backing-off pod at once when
nothing else is ready). Kinds of change:

- **everything** — DRA devices were freed (a claim deallocated or deleted, a slice or class
  changed, or held for a pod and given back), bound assumptions expired, or this replica leads
  again: every unschedulable pod goes back;
- **nodes** — nodes came, or their labels, taints, readiness or hardware changed: the pods one of
  them could now hold by its labels, taints and free resources (kube-scheduler's queueing hints
  for NodeAffinity, TaintToleration, NodeUnschedulable and NodeResourcesFit on a Node's add or
  update), and every pod whose fit depends on more than that node — required pod (anti-)
  affinity or spread (a node's labels move domains), a gang, DRA claims, volumes, a GPU share or
  MIG instances — or that waits for something else than nodes;
- **capacity** — room gained otherwise (a pod shrank in place; more departures than are kept
  between two applies): every pod but those only DRA devices hold back (their GPUs are
  released with their claims, by kube-controller-manager, a moment later);
- **a pod left** — a bound pod was deleted, ended or moved away, or the room assumed for a pod
  was given back (its bind failed, or it was deleted before its bind was seen): the pods one of
  the plugins that refused them may be helped by it (:mod:`.departures`: kube-scheduler's
  queueing hints on a Pod delete — the room, host ports, volumes, claims, (anti-)affinity or
  spread it held). A pending pod deleted wakes no one;
- **claims** — any other DRA change (a claim created or allocated): pods whose claims were
  refused before any node was looked at (waiting for a claim to exist, or to be fixed);
- **pods** — a pod changed its labels: pods with affinity or spread terms;
- **a pod came** — a pod was bound somewhere: the pods it may let in, those with a required
  pod affinity term or a ``DoNotSchedule`` spread constraint that selects it (kube-scheduler's
  queueing hints for InterPodAffinity and PodTopologySpread on a pod's arrival); a pod only its
  own anti-affinity or another pod's holds back is not woken by an arrival, which can only
  tighten those. A pod that changed in place with its labels kept (it started) wakes no one;
- **volumes** — a PersistentVolumeClaim, PersistentVolume, StorageClass or CSINode changed
  (kube-scheduler's queueing hints of VolumeBinding, VolumeRestrictions and NodeVolumeLimits):
  a claim, the pods whose volumes name it; a PV or StorageClass, the pods with claims that
  VolumeBinding refused; a CSINode, the pods with claims or in-tree volumes that VolumeBinding
  or NodeVolumeLimits refused. A pod whose refusers are not known (a gang member) goes back on
  any of these if it has volumes; so does every pod with volumes after a fresh list;
- **a volume detached** — a VolumeAttachment was deleted (a node's attach slot freed): pods with
  a ``persistentVolumeClaim`` volume, or an inline in-tree volume of that attacher's driver
  (kube-scheduler's NodeVolumeLimits hint ``isSchedulableAfterVolumeAttachmentDeleted``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.selectors import match_node_terms
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.queue import QueuedPod, SchedulingQueue
from coordinator.engine.departures import Departure, Left, helped_by_departures, term_may_select
from coordinator.inventory.state import NodeState

__all__ = ["PendingChanges"]

#: arrivals kept between two applies; beyond them every affinity-sensitive pod goes back
_ARRIVALS_KEPT: Final = 64
#: departures kept between two applies; beyond them every pod any room may help goes back
_DEPARTURES_KEPT: Final = 64

Arrival = tuple[str, Mapping[str, str]]  # (namespace, labels) of a pod that was bound


def _affinity_sensitive(pod: QueuedPod) -> bool:
    req = pod.request
    return isinstance(req, PodRequest) and bool(req.has_affinity_terms or req.spread)


def _let_in_by(arrivals: Sequence[Arrival]) -> Callable[[QueuedPod], bool]:
    """The waiting pods one of ``arrivals`` may let in."""

    def let_in(pod: QueuedPod) -> bool:
        req = pod.request
        if not _affinity_sensitive(pod) or not isinstance(req, PodRequest):
            return False
        if req.gang is not None:
            return True  # its siblings' placement is planned with it: as any change
        for namespace, labels in arrivals:
            if any(term_may_select(t, namespace, labels) for t in req.pod_affinity):
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


#: The plugins a change of a PV, StorageClass or CSINode may help (kube-scheduler's events
#: registered by VolumeBinding and NodeVolumeLimits); a claim's helps the pods that name it.
_VOLUME_PLUGINS: Final[Mapping[str, frozenset[str]]] = {
    "PersistentVolume": frozenset({"VolumeBinding"}),
    "StorageClass": frozenset({"VolumeBinding"}),
    "CSINode": frozenset({"VolumeBinding", "NodeVolumeLimits"}),
}


def _volumes_help(claims: frozenset[str], kinds: frozenset[str]) -> Callable[[QueuedPod], bool]:
    """The waiting pods a change of the claims ``claims`` (``namespace/name``) or of some
    object of each of ``kinds`` may help (see the module)."""

    def helped(pod: QueuedPod) -> bool:
        req = pod.request
        if not isinstance(req, PodRequest) or not (req.volume_claims or req.inline_volumes):
            return False
        if claims and any(f"{req.namespace}/{c.name}" in claims for c in req.volume_claims):
            return True
        refusers = pod.refused_by
        for kind in kinds:
            plugins = _VOLUME_PLUGINS.get(kind)
            if plugins is None or refusers is None or not refusers.isdisjoint(plugins):
                return True
        return False

    return helped


def _detach_helps(attachers: frozenset[str]) -> Callable[[QueuedPod], bool]:
    """The waiting pods a VolumeAttachment of one of ``attachers`` deleted may let in."""

    def helped(pod: QueuedPod) -> bool:
        req = pod.request
        if not isinstance(req, PodRequest):
            return False
        return any(not c.ephemeral for c in req.volume_claims) or any(
            v.error or v.driver in attachers for v in req.inline_volumes
        )

    return helped


_CORDONED: Final = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_NOT_READY: Final = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")


def _could_hold(req: PodRequest, node: NodeState) -> bool:
    """Whether ``node`` may hold ``req`` by what it alone decides: its labels (node selector,
    required node affinity), its taints (cordoned, NotReady as kube's taints for them) and its
    free resources. No: no change of that node lets the pod in."""
    if any(node.labels.get(k) != v for k, v in req.node_selector):
        return False
    required = req.node_affinity.required if req.node_affinity is not None else None
    if required is not None and not match_node_terms(required, node.name, node.labels):
        return False
    taints = [Taint(t.key, t.value or "", t.effect) for t in node.taints]
    taints += [_CORDONED] if node.unschedulable else []
    taints += [_NOT_READY] if node.ready is not True else []
    for taint in taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(
            t.tolerates(taint) for t in req.tolerations
        ):
            return False
    return all(node.free.get(r, 0) >= n for r, n in req.requests.items() if n > 0)


def _helped_by(nodes: Sequence[NodeState]) -> Callable[[QueuedPod], bool]:
    """The waiting pods a change of ``nodes`` may let in (see the module docstring)."""

    def helped(pod: QueuedPod) -> bool:
        req = pod.request
        if not isinstance(req, PodRequest) or pod.waits_for != "any":
            return True
        if _affinity_sensitive(pod) or req.gang is not None or req.claims or req.volume_claims:
            return True
        if req.share is not None or req.mig:
            return True
        return any(_could_hold(req, node) for node in nodes)

    return helped


def _waits_for_any(pod: QueuedPod) -> bool:
    return pod.waits_for == "any"


def _waits_for_claim(pod: QueuedPod) -> bool:
    return pod.waits_for == "claim"


class PendingChanges:
    """Changes noted since the last :meth:`apply`; ``wake`` is called on every note."""

    def __init__(
        self,
        queue: SchedulingQueue,
        wake: Callable[[], None],
        node: Callable[[str], NodeState | None] = lambda _: None,
    ) -> None:
        self.queue = queue
        self._wake = wake
        self._node = node  # a node's state now (None: gone)
        self._everything = self._capacity = self._claims = self._pods = False
        self._volume_claims: set[str] = set()  # claims changed (namespace/name)
        self._volume_kinds: set[str] = set()  # kinds of other volume objects changed
        self._detached: set[str] = set()  # attachers of VolumeAttachments deleted
        self._arrivals: list[Arrival] = []
        self._departures: list[Departure] = []
        self._nodes: set[str] = set()

    def everything(self) -> None:
        self._everything = True
        self._wake()

    def capacity(self) -> None:
        self._capacity = True
        self._wake()

    def nodes(self, names: Iterable[str]) -> None:
        """Nodes came, or their labels, taints, readiness or hardware changed."""
        self._nodes.update(names)
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

    def pod_left(self, pod: Left, *, gained: bool) -> None:
        """A bound pod left its node (deleted, ended, moved away), or an assumed one's room was
        given back; ``gained``: that node can take more than before."""
        if len(self._departures) < _DEPARTURES_KEPT:
            self._departures.append(Departure(pod, gained))
        else:
            self._capacity = self._capacity or gained
            self._pods = True
        self._wake()

    def pod_came(self, namespace: str, labels: Mapping[str, str]) -> None:
        """A pod was bound (or moved) in ``namespace`` with ``labels``."""
        if len(self._arrivals) < _ARRIVALS_KEPT:
            self._arrivals.append((namespace, labels))
        else:
            self._pods = True
        self._wake()

    def volumes(self, kind: str, key: str) -> None:
        """A volume object of ``kind`` changed (``key``: its key; ``""``: any of the kind)."""
        if kind == "PersistentVolumeClaim" and key:
            self._volume_claims.add(key)
        else:
            self._volume_kinds.add(kind)  # a claim's kind: every pod with claims may be helped
        self._wake()

    def volume_detached(self, attacher: str) -> None:
        """A VolumeAttachment of ``attacher`` was deleted."""
        self._detached.add(attacher)
        self._wake()

    def apply(self) -> None:
        everything, capacity, claims, pods = (
            self._everything,
            self._capacity,
            self._claims,
            self._pods,
        )
        self._everything = self._capacity = self._claims = self._pods = False
        claimed, self._volume_claims = frozenset(self._volume_claims), set()
        volume_kinds, self._volume_kinds = frozenset(self._volume_kinds), set()
        detached, self._detached = frozenset(self._detached), set()
        arrivals, self._arrivals = self._arrivals, []
        departures, self._departures = self._departures, []
        names, self._nodes = self._nodes, set()
        if (claimed or volume_kinds) and not everything:
            self.queue.cluster_changed(_volumes_help(claimed, volume_kinds), counts=True)
        if detached and not everything:
            self.queue.cluster_changed(_detach_helps(detached), counts=True)
        if names and not everything:
            states = [s for s in map(self._node, sorted(names)) if s is not None]
            self.queue.cluster_changed(_helped_by(states), counts=True)
        if everything or capacity:
            self.queue.cluster_changed(None if everything else _waits_for_any, counts=True)
        else:
            if departures:
                self.queue.cluster_changed(helped_by_departures(departures), counts=True)
            if pods:
                self.queue.cluster_changed(_affinity_sensitive)
            elif arrivals:
                self.queue.cluster_changed(_let_in_by(arrivals))
        if claims and not everything:
            self.queue.cluster_changed(_waits_for_claim)
