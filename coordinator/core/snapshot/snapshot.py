"""The :class:`Snapshot` one scheduling cycle uses: every node (in a stable order), namespace
labels, the workloads' selectors (default topology spreading), and the indexes the inter-pod
plugins query."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.dra.state import DraState
from coordinator.core.podspec.affinity import AffinityTerm
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.snapshot.capacity import CapacityIndex
from coordinator.core.snapshot.domainslots import DomainSlots
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.nodeorder import NodeOrder
from coordinator.core.snapshot.podcounts import (
    COUNTS_LIMIT,
    CountKey,
    DomainCounts,
    PodMatcher,
    ScoringTerms,
    TermIndex,
)
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.volumes import Volumes
from coordinator.core.snapshot.workloads import WorkloadSelectors

__all__ = ["PodChange", "Snapshot"]

_NO_DRA = DraState()  # no DRA objects (immutable; shared)
_LABELLED_LIMIT: Final = 1024
_RESOLVED_LIMIT: Final = 1024

#: The pods that left a node and those that came, between two versions of it.
PodChange = tuple[Sequence[PodInfo], Sequence[PodInfo]]


class Snapshot:
    """All nodes (in a stable order) and namespace labels, as of the start of a cycle.

    ``assume`` places a pod on a node of this snapshot before its bind is confirmed (so the next
    cycle sees the capacity taken); ``forget`` undoes it. Both replace the node's ``NodeInfo``;
    :meth:`copy` is cheap (shallow), for what-if runs.

    Indexes for the inter-pod plugins (pods by label, pods with affinity terms, nodes with
    ``PreferNoSchedule`` taints) and the device :class:`CapacityIndex` are built on first use and
    kept current by ``assume``/``forget``/``replace``/``remove``.
    """

    __slots__ = (
        "_assumed",
        "_capacity",
        "_claims",
        "_dra",
        "_dra_base",
        "_index",
        "_labelled",
        "_nodes",
        "_order",
        "_positions",
        "_resolved",
        "_slots",
        "namespaces",
        "volumes",
        "workloads",
    )

    def __init__(
        self,
        nodes: Iterable[NodeInfo],
        *,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        dra: DraState | None = None,
        workloads: WorkloadSelectors | None = None,
        volumes: Volumes | None = None,
    ) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        for n in nodes:
            if n.name in self._nodes:
                raise ValueError(f"node {n.name!r} appears twice in the snapshot")
            self._nodes[n.name] = n
        self.namespaces: Mapping[str, Mapping[str, str]] = dict(namespaces or {})
        # term → the term with the namespaces its namespaceSelector selects (shared by copies:
        # a snapshot's namespaces never change; new labels come with a new snapshot)
        self._resolved: dict[AffinityTerm, AffinityTerm] = {}
        #: Services and controllers by selector (shared with whoever keeps it current).
        self.workloads = workloads if workloads is not None else WorkloadSelectors()
        #: PersistentVolumeClaims, PersistentVolumes, StorageClasses (shared likewise).
        self.volumes = volumes if volumes is not None else Volumes()
        self._assumed: dict[str, str] = {}  # pod key → node name
        self._order: NodeOrder | None = None
        self._positions: dict[str, int] | None = None  # unchanged by assume/forget
        self._index: _PodIndex | None = None
        self._capacity: CapacityIndex | None = None
        self._slots: dict[str, DomainSlots] = {}  # label key → GPU slots per value
        self._labelled: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}
        self._claims: dict[str, tuple[ClaimAllocation, ...]] = {}  # pod key → assumed claims
        self._dra_base = self._dra = _NO_DRA
        if dra is not None:
            self.dra = dra

    # --- DRA --------------------------------------------------------------------------------
    @property
    def dra(self) -> DraState:
        """ResourceSlices, DeviceClasses and ResourceClaims as of this cycle, with the claims
        of assumed pods counted as allocated."""
        return self._dra

    @dra.setter
    def dra(self, state: DraState) -> None:
        self._dra_base = state
        self._refresh_dra()

    def _refresh_dra(self) -> None:
        assumed = [a for claims in self._claims.values() for a in claims]
        self._dra = self._dra_base.with_allocations(assumed)
        holding = self._dra.nodes_holding()
        for node in list(self._nodes.values()):
            if not node.dra_held and (
                node.topology is None or (holding is not None and node.name not in holding)
            ):
                continue  # held nothing and holds nothing now (no GPU to join: nothing ever)
            held = self._held(node)
            if held != node.dra_held:
                self._set(node.rebuild(node.pods, dra_held=held))
                if self._index is not None:
                    self._index.with_affinity_list = None

    def _held(self, node: NodeInfo) -> frozenset[str]:
        if node.topology is None or not node.topology.gpus or not self._dra.held:
            return frozenset()
        return self._dra.gpu_uuids_allocated(node.name, node.labels)

    def copy(self) -> Snapshot:
        other = Snapshot(
            (), namespaces=self.namespaces, workloads=self.workloads, volumes=self.volumes
        )
        other._dra_base, other._dra = self._dra_base, self._dra
        other._claims = dict(self._claims)
        other._nodes = dict(self._nodes)
        other._assumed = dict(self._assumed)
        other._order = self._order
        other._positions = self._positions
        other._labelled = self._labelled  # replaced, never changed, when labels change
        other._resolved = self._resolved
        other._index = self._index.copy() if self._index is not None else None
        other._capacity = self._capacity.copy() if self._capacity is not None else None
        other._slots = {k: v.copy() for k, v in self._slots.items()}
        return other

    def changed_since(self, order: Sequence[NodeInfo]) -> list[NodeInfo] | None:
        """The nodes replaced since :attr:`nodes` was ``order`` (``None``: nodes came, went
        or moved, or ``order`` is no earlier version of it)."""
        now = self.nodes
        return now.changed_since(order) if isinstance(now, NodeOrder) else None

    def rebased(self, base: Snapshot, nodes: Iterable[NodeInfo]) -> Snapshot:
        """A copy of this snapshot — a copy of ``base`` as it was (same nodes in the same
        order, same DRA state), some of its nodes replaced — with ``nodes`` put in and
        ``base``'s assumed pods: what ``base.copy()`` with the same nodes replaced is, when
        ``nodes`` holds every node that differs between the two."""
        out = self.copy()
        out._assumed = dict(base._assumed)
        out._claims = dict(base._claims)
        for node in nodes:
            out.replace(node)
        return out

    @property
    def nodes(self) -> Sequence[NodeInfo]:
        """Every node, in the snapshot's order (an immutable version: a later change makes a
        new one)."""
        if self._order is None:
            self._order = NodeOrder(self._nodes.values())
        return self._order

    def _reorder(self, node: NodeInfo) -> None:
        """The order after ``node`` replaced the node of its name (sharing all else)."""
        if self._order is not None:
            self._order = self._order.with_node(self.position(node.name), node)

    def __len__(self) -> int:
        return len(self._nodes)

    def get(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def labels_of(self, name: str) -> Mapping[str, str] | None:
        """The node's labels, or ``None`` when it is not in the snapshot."""
        node = self._nodes.get(name)
        return None if node is None else node.labels

    @property
    def by_name(self) -> Mapping[str, NodeInfo]:
        """Every node by name (read-only)."""
        return self._nodes

    def node_names(self) -> Sequence[str]:
        return tuple(self._nodes)

    def replace(self, node: NodeInfo, changed: PodChange | None = None) -> None:
        """Put a new or rebuilt node in (the inventory's incremental update path). The indexes
        are updated for that node only. ``changed``: the pods that left the node it replaces
        and those that came (new versions of pods it held among both), when the caller knows
        them — then the indexes look at those alone, not at every pod of the node."""
        old = self._nodes.get(node.name)
        held = self._held(node)
        if held != node.dra_held:
            node = node.rebuild(node.pods, dra_held=held)
        self._nodes[node.name] = node
        if old is None:
            self._order = None
            self._positions = None
        else:
            self._reorder(node)
        if old is None or old.labels != node.labels:
            self._labelled = {}
        if self._index is not None:
            self._index.swap_node(old, node, changed)
        if self._capacity is not None:
            if old is not None:
                self._capacity.discard(old)
            self._capacity.add(node)
        for slots in self._slots.values():
            slots.swap(old, node)

    def remove(self, name: str) -> None:
        old = self._nodes.pop(name, None)
        if old is not None:
            self._order = None
            self._positions = None
            self._labelled = {}
            if self._index is not None:
                self._index.swap_node(old, None)
            if self._capacity is not None:
                self._capacity.discard(old)
            for slots in self._slots.values():
                slots.swap(old, None)

    def is_assumed(self, pod_key: str) -> bool:
        return pod_key in self._assumed

    def assume(
        self,
        pod: PodRequest,
        node_name: str,
        placement: Placement,
        claims: Sequence[ClaimAllocation] = (),
    ) -> None:
        """Hold ``placement`` (and the DRA ``claims`` allocated for the pod) on the node."""
        node = self._nodes.get(node_name)
        if node is None:
            raise KeyError(f"node {node_name!r} is not in the snapshot")
        if pod.key in self._assumed:
            raise ValueError(f"pod {pod.key} is already assumed on {self._assumed[pod.key]}")
        info = PodInfo.from_request(pod, placement)
        self._set(node.adding((info,)))
        self._assumed[pod.key] = node_name
        if self._index is not None:
            self._index.add(node_name, info, node.labels)
        if claims:
            self._claims[pod.key] = tuple(claims)
            self._refresh_dra()

    def forget(self, pod_key: str) -> bool:
        """Undo :meth:`assume`; False when the pod was not assumed here."""
        node_name = self._assumed.pop(pod_key, None)
        if node_name is None:
            return False
        node = self._nodes.get(node_name)
        if node is not None:
            gone = [p for p in node.pods if p.key == pod_key]
            self._set(node.rebuild(p for p in node.pods if p.key != pod_key))
            if self._index is not None:
                for p in gone:
                    self._index.discard(node.name, p, node.labels)
        if self._claims.pop(pod_key, None) is not None:
            self._refresh_dra()
        return True

    def _set(self, node: NodeInfo) -> None:
        old = self._nodes[node.name]
        if self._capacity is not None:
            self._capacity.discard(old)
            self._capacity.add(node)
        for slots in self._slots.values():
            slots.swap(old, node)
        self._nodes[node.name] = node
        self._reorder(node)
        index = self._index
        listed = index.with_affinity_list if index is not None else None
        if index is not None and listed and any(n is old for n, _ in listed):
            index.with_affinity_list = None  # it holds the node's previous NodeInfo

    # --- indexes ----------------------------------------------------------------------------
    def capacity(self) -> CapacityIndex:
        """Nodes by free whole GPUs and free MIG profiles (built on first use)."""
        if self._capacity is None:
            self._capacity = CapacityIndex(self._nodes.values())
        return self._capacity

    def domain_slots(self, key: str) -> DomainSlots:
        """GPU slots and those in use per value of node label ``key`` (built on first use, then
        kept current; read-only to callers)."""
        found = self._slots.get(key)
        if found is None:
            found = self._slots[key] = DomainSlots(key, self._nodes.values())
        return found

    def nodes_labelled(self, key: str, values: tuple[str, ...]) -> tuple[str, ...]:
        """Names of the nodes whose label ``key`` has one of ``values``, in the snapshot's order
        (cached until a node's labels change: assume and forget keep it)."""
        cached = self._labelled.get((key, values))
        if cached is None:
            if len(self._labelled) >= _LABELLED_LIMIT:
                self._labelled = {}
            cached = tuple(
                name for name, node in self._nodes.items() if node.labels.get(key) in values
            )
            self._labelled[(key, values)] = cached
        return cached

    def position(self, name: str) -> int:
        """The node's place in the snapshot's order."""
        if self._positions is None:
            self._positions = {name: i for i, name in enumerate(self._nodes)}
        return self._positions[name]

    def in_order(self, names: Iterable[str]) -> list[NodeInfo]:
        """The nodes named (those in the snapshot), in the snapshot's order."""
        if self._positions is None:
            self._positions = {name: i for i, name in enumerate(self._nodes)}
        positions = self._positions
        found = sorted((positions[n], n) for n in names if n in positions)
        return [self._nodes[n] for _, n in found]

    def _pod_index(self) -> _PodIndex:
        if self._index is None:
            index = _PodIndex()
            for node in self._nodes.values():
                for p in node.pods:
                    index.add(node.name, p, node.labels)
                if any(t.effect == "PreferNoSchedule" for t in node.effective_taints):
                    index.prefer_no_schedule.add(node.name)
            self._index = index
        return self._index

    def pods_with_affinity(self) -> list[tuple[NodeInfo, PodInfo]]:
        """Pods carrying (anti-)affinity terms, with their nodes (cached until a change)."""
        index = self._pod_index()
        if index.with_affinity_list is None:
            index.with_affinity_list = [
                (self._nodes[n], p) for n, p in index.with_affinity.values() if n in self._nodes
            ]
        return index.with_affinity_list

    def pods_with_label(self, key: str, value: str) -> list[tuple[NodeInfo, PodInfo]]:
        return [
            (self._nodes[n], p)
            for n, p in self._pod_index().by_label.get((key, value), {}).values()
            if n in self._nodes
        ]

    def all_pods(self) -> list[tuple[NodeInfo, PodInfo]]:
        return [(node, p) for node in self.nodes for p in node.pods]

    def pods_selected_by(self, selector: LabelSelector | None) -> list[tuple[NodeInfo, PodInfo]]:
        """A superset of the pods ``selector`` matches (narrowed through the label index when
        the selector names a label value); callers still match each pod."""
        if selector is None:
            return []
        for key, value in selector.match_labels:
            return self.pods_with_label(key, value)
        for req in selector.match_expressions:
            if req.operator == "In":
                out: list[tuple[NodeInfo, PodInfo]] = []
                for value in req.values:
                    out.extend(self.pods_with_label(req.key, value))
                return out
        return self.all_pods()

    def domains(self, key: str) -> Mapping[str, str]:
        """Node name → value of label ``key``, for the nodes carrying it (cached per key)."""
        index = self._pod_index()
        cached = index.domains.get(key)
        if cached is None:
            cached = index.domains[key] = {
                n.name: n.labels[key] for n in self._nodes.values() if key in n.labels
            }
        return cached

    def domain_counts(
        self, matcher: PodMatcher, key: str, required: tuple[str, ...]
    ) -> DomainCounts:
        """Pods ``matcher`` matches per value of node label ``key``, over the nodes carrying
        every ``required`` key (each such domain present, zeros included). Built on first use,
        then kept current by assume/forget/replace/remove (read-only to callers)."""
        index = self._pod_index()
        ckey: CountKey = (matcher, key, required)
        found = index.counts.get(ckey)
        if found is None:
            if len(index.counts) >= COUNTS_LIMIT:
                index.counts, index.owned = {}, set()
            pods = ((n.labels, p) for n, p in self.pods_selected_by(matcher.selector))
            found = DomainCounts.build(ckey, (n.labels for n in self._nodes.values()), pods)
            index.counts[ckey] = found
            index.owned.add(ckey)
        return found

    def resolved(self, term: AffinityTerm) -> AffinityTerm:
        """``term`` with a ``namespaceSelector`` that names labels replaced by the namespaces it
        selects in this snapshot, added to those it lists — as kube-scheduler's InterPodAffinity
        merges them in PreFilter: the result matches a pod by its namespace's name alone, so
        :meth:`domain_counts` can count it. An empty selector (every namespace) or none is
        decided without labels already: ``term`` itself."""
        ns_selector = term.namespace_selector
        if ns_selector is None or ns_selector.is_empty:
            return term
        found = self._resolved.get(term)
        if found is None:
            if len(self._resolved) >= _RESOLVED_LIMIT:
                self._resolved.clear()
            selected = (n for n, labels in self.namespaces.items() if ns_selector.matches(labels))
            found = self._resolved[term] = AffinityTerm(
                term.selector, term.namespaces.union(selected), None, term.topology_key
            )
        return found

    def anti_affinity_terms(self) -> Mapping[AffinityTerm, Mapping[str, int]]:
        """Required anti-affinity terms of the pods on the nodes → topology value → how many
        pods carrying the term sit there (read-only)."""
        return self._pod_index().anti.terms

    def scoring_terms(self) -> ScoringTerms:
        """The terms of the pods on the nodes that weigh on another pod's score (required
        affinity, preferred either way) → topology value → pods carrying each (read-only)."""
        return self._pod_index().scoring_terms

    def has_prefer_no_schedule_taints(self) -> bool:
        return bool(self._pod_index().prefer_no_schedule)


class _PodIndex:
    __slots__ = (
        "anti",
        "by_label",
        "counts",
        "domains",
        "owned",
        "prefer_no_schedule",
        "scoring_terms",
        "with_affinity",
        "with_affinity_list",
    )

    def __init__(self) -> None:
        self.with_affinity_list: list[tuple[NodeInfo, PodInfo]] | None = None
        self.domains: dict[str, dict[str, str]] = {}  # label key → node → value
        self.by_label: dict[tuple[str, str], dict[str, tuple[str, PodInfo]]] = {}
        self.with_affinity: dict[str, tuple[str, PodInfo]] = {}
        self.prefer_no_schedule: set[str] = set()
        self.anti = TermIndex[AffinityTerm]()
        self.scoring_terms = ScoringTerms()
        self.counts: dict[CountKey, DomainCounts] = {}
        self.owned: set[CountKey] = set()  # counts this index may change (the others: copy first)

    def copy(self) -> _PodIndex:
        other = _PodIndex()
        other.by_label = {k: dict(v) for k, v in self.by_label.items()}
        other.with_affinity = dict(self.with_affinity)
        other.prefer_no_schedule = set(self.prefer_no_schedule)
        other.anti = self.anti.copy()
        other.scoring_terms = self.scoring_terms.copy()
        other.counts = dict(self.counts)  # shared until one side changes a count
        self.owned = set()
        other.domains = self.domains  # node labels do not change with assume/forget
        return other

    def swap_node(
        self, old: NodeInfo | None, new: NodeInfo | None, changed: PodChange | None = None
    ) -> None:
        self.with_affinity_list = None  # holds NodeInfo objects: rebuild after any swap
        # The same node with its pods changed (one assumed, or seen bound): only the pods that
        # differ are re-indexed (``PodInfo`` objects are kept while their pod is unchanged).
        same = old is not None and new is not None and old.labels == new.labels
        if same and changed is not None and old is not None and new is not None:
            left, came = changed
            for p in left:
                self.discard(new.name, p, new.labels)
            for p in came:
                self.add(new.name, p, new.labels)
        else:
            self._swap_pods(old, new, same)
        if old is not None:
            self.prefer_no_schedule.discard(old.name)
        if new is not None and any(t.effect == "PreferNoSchedule" for t in new.effective_taints):
            self.prefer_no_schedule.add(new.name)
        if not same:
            self.domains = {}  # a fresh dict: copies of the snapshot may share the old one
            self.counts, self.owned = {}, set()  # domains changed: count afresh when asked

    def _swap_pods(self, old: NodeInfo | None, new: NodeInfo | None, same: bool) -> None:
        if old is not None:
            staying = {id(p) for p in new.pods} if same and new is not None else set()
            for p in old.pods:
                if id(p) not in staying:
                    self.discard(old.name, p, old.labels)
        if new is not None:
            stayed = {id(p) for p in old.pods} if same and old is not None else set()
            for p in new.pods:
                if id(p) not in stayed:
                    self.add(new.name, p, new.labels)

    # By uid: a pod re-created under a name may sit beside its predecessor until the watch
    # catches up, and each must be found (and dropped) on its own.
    def add(self, node: str, pod: PodInfo, labels: Mapping[str, str]) -> None:
        ident = pod.uid or pod.key
        for pair in pod.labels.items():
            self.by_label.setdefault(pair, {})[ident] = (node, pod)
        if pod.has_affinity:
            self.with_affinity[ident] = (node, pod)
            self.with_affinity_list = None
            self.scoring_terms.bump(labels, pod, 1)
            self.anti.bump(labels, pod.anti_affinity, 1)
        self._count(labels, pod, 1)

    def discard(self, node: str, pod: PodInfo, labels: Mapping[str, str]) -> None:
        """``pod`` is no longer on ``node`` (whose labels are ``labels``). Its entries go only
        if they are ``node``'s: a pod that moved may be indexed on its new node first."""
        ident = pod.uid or pod.key
        if pod.has_affinity:
            if self.with_affinity.get(ident, ("",))[0] == node:
                del self.with_affinity[ident]
            self.with_affinity_list = None
            self.scoring_terms.bump(labels, pod, -1)
            self.anti.bump(labels, pod.anti_affinity, -1)
        for pair in pod.labels.items():
            bucket = self.by_label.get(pair)
            if bucket is not None and bucket.get(ident, ("",))[0] == node:
                del bucket[ident]
        self._count(labels, pod, -1)

    def _count(self, labels: Mapping[str, str], pod: PodInfo, by: int) -> None:
        carried = pod.labels
        for ckey, counts in self.counts.items():
            gate = counts.gate
            if gate is not None and carried.get(gate[0]) != gate[1]:
                continue  # the selector asks for a label this pod lacks
            value = counts.domain_of(labels, pod)
            if value is not None:
                if ckey not in self.owned:
                    counts = self.counts[ckey] = counts.copy()
                    self.owned.add(ckey)
                counts.shift(value, by)
