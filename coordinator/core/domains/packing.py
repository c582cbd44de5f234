"""Members of a gang, a placement, and first-fit packing of the members onto an ordered set of
nodes — the scratch state one :func:`~.select.place_members` call shares between its tiers.

Members with equal shape are interchangeable for the per-pod filters; eligibility and per-node
slots are computed once per shape. Packing works on copies of the free-capacity maps: the inputs
are never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.core.domains.capacity import GPU, NodeState, Resources, fits, subtract
from coordinator.core.domains.layout import Layout, natural_key, sorted_names
from coordinator.core.domains.slices import SliceMiss, could_hold, fill_slices, slice_needs
from coordinator.core.domains.strategy import PlacementIntent, Strategy, node_bandwidth_gbps
from coordinator.core.status import SUCCESS, Status

__all__ = ["EligibleFn", "Member", "Packing", "Placement"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """One pod to place: its name (``namespace/name`` or an ordinal) and what it requests.

    Members with equal ``shape`` are interchangeable for the per-pod filters (same template); the
    default shape is the request itself.
    """

    name: str
    requests: Resources
    shape: str | None = None

    @property
    def shape_key(self) -> str:
        if self.shape is not None:
            return self.shape
        return ",".join(f"{k}={v}" for k, v in sorted(self.requests.items()) if v)


# The per-pod core's capacity-independent filters for one member on one node (selectors,
# affinity, taints, NUMA feasibility…): SUCCESS, or a rejection Status with kube-style reasons.
EligibleFn = Callable[[Member, NodeState], Status]


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Where every member goes, and which network domain that is."""

    assignments: tuple[tuple[str, str], ...]  # (member name, node name), in input order
    tier: str  # "node" | "clique" | "leaf" | "spine" | "zone" | "cluster" | "distributed"
    domain: str  # the node, clique, leaf, spine or zone name; "cluster" for the widest tier
    nodes: tuple[str, ...]
    leaves: tuple[str, ...]
    spines: tuple[str, ...]
    adjacent: bool  # for several leaves: all neighbours in name order
    strategy: Strategy
    preferred_domain_used: bool = False
    unknown_domain: str | None = None  # the preferred domain, when the cluster has none so named
    notes: tuple[str, ...] = field(default=())
    link: str | None = None  # the worst GPU link class among the chosen nodes, when known
    # (slice id, its domain) for a group with slices (docs/gangs.md, "Slices and exclusive
    # topology"), in slice order
    slices: tuple[tuple[str, str], ...] = field(default=())

    @property
    def explanation(self) -> str:
        """Why here, in one line: the link class, the domain, the strategy and any notes."""
        where = self.domain if self.tier in ("node", "cluster") else f"{self.tier} {self.domain}"
        nodes = f"{len(self.nodes)} node{'s' * (len(self.nodes) != 1)}"
        parts = [f"{where} ({nodes}, {self.strategy.value})", *self.notes]
        return "; ".join(parts)

    def node_of(self, member: str) -> str | None:
        for name, node in self.assignments:
            if name == member:
                return node
        return None


class Packing:
    """Scratch state of one placement: eligibility per shape, node order keys, member order."""

    def __init__(
        self,
        members: Sequence[Member],
        nodes: Mapping[str, NodeState],
        layout: Layout,
        intent: PlacementIntent,
        eligible: EligibleFn | None,
    ) -> None:
        self.members = members
        self.nodes = nodes
        self.layout = layout
        self.intent = intent
        self.slice_miss: SliceMiss | None = None  # the last slice that fit nowhere (refusal)
        self.order = sorted(
            members,
            key=lambda m: (-m.requests.get(GPU, 0), -sum(m.requests.values()), m.name),
        )
        self.shapes: dict[str, Member] = {}
        self.shape_of: dict[str, str] = {}
        for m in members:
            key = m.shape_key
            self.shape_of[m.name] = key
            self.shapes.setdefault(key, m)
        self.ok: dict[str, set[str]] = {s: set() for s in self.shapes}
        self.rejections: dict[str, Status] = {}
        want_bw = intent.network_bandwidth_gbps
        for node in nodes.values():
            if not node.schedulable:
                self.rejections[node.name] = Status.unschedulable(
                    "node(s) were unschedulable", detail=node.name
                )
                continue
            has_bw = node_bandwidth_gbps(node.labels)
            if want_bw is not None and has_bw is not None and has_bw < want_bw:
                self.rejections[node.name] = Status.unschedulable(
                    "node(s) had less network bandwidth than the pods ask", detail=node.name
                )
                continue
            first_failure: Status | None = None
            for key, rep in self.shapes.items():
                status = SUCCESS if eligible is None else eligible(rep, node)
                if status.is_success:
                    self.ok[key].add(node.name)
                elif first_failure is None:
                    first_failure = status
            if first_failure is not None and not any(node.name in s for s in self.ok.values()):
                self.rejections[node.name] = first_failure
        self.usable = [n for n in nodes if n not in self.rejections]
        self.counts: dict[str, int] = {}
        for m in members:
            self.counts[self.shape_of[m.name]] = self.counts.get(self.shape_of[m.name], 0) + 1
        self.slots = {shape: self._slots(shape) for shape in self.shapes}
        slices = intent.slices
        self.slice_needs = [] if slices is None else slice_needs(self.order, slices)
        self.demand: dict[str, int] = {}
        for m in members:
            for k, v in m.requests.items():
                if v:
                    self.demand[k] = self.demand.get(k, 0) + v

    def free_sum(self, names: Iterable[str]) -> dict[str, int]:
        frees = [self.nodes[n].free for n in names]
        return {k: sum(max(0, f.get(k, 0)) for f in frees) for k in self.demand}

    def could_fit(self, names: Sequence[str]) -> bool:
        """A cheap necessary condition: total capacity, and per shape enough whole slots."""
        if not fits(self.free_sum(names), self.demand):
            return False
        for shape, count in self.counts.items():
            cap = self.slots[shape]
            if sum(cap.get(n, 0) for n in names) < count:
                return False
        return could_hold(self, names)

    def _slots(self, shape: str) -> dict[str, int]:
        """How many members of ``shape`` each eligible node could hold on its own."""
        request = {k: v for k, v in self.shapes[shape].requests.items() if v > 0}
        out: dict[str, int] = {}
        for name in self.ok[shape]:
            free = self.nodes[name].free
            if not request:
                out[name] = len(self.members)
                continue
            out[name] = min(max(0, free.get(k, 0)) // v for k, v in request.items())
        return out

    def node_key(self, name: str) -> tuple[int, int]:
        free = self.nodes[name].free
        return (free.get(GPU, 0), free.get("cpu", 0))

    def ordered(self, names: Iterable[str]) -> list[str]:
        """Nodes of one leaf (or group) in the strategy's packing order."""
        names = list(names)
        if self.intent.strategy is Strategy.BALANCED:
            return sorted(names, key=lambda n: (self.node_key(n), natural_key(n)))
        neg = {n: tuple(-x for x in self.node_key(n)) for n in names}
        return sorted(names, key=lambda n: (neg[n], natural_key(n)))

    def fill(self, node_order: Sequence[str], *, spread: bool = False) -> dict[str, str] | None:
        """First-fit the members onto ``node_order``; None when some member does not fit.

        With ``spread`` a first pass puts at most one member on a node; members left over take
        any node with room, in the same order. A group with slices is packed slice by slice
        (:func:`~coordinator.core.domains.slices.fill_slices`).
        """
        if self.intent.slices is not None:
            return fill_slices(self, node_order, spread=spread)
        out = self.fill_members(self.order, node_order, spread=spread)
        return out if len(out) == len(self.order) else None

    def fill_members(
        self,
        members: Sequence[Member],
        node_order: Sequence[str],
        *,
        spread: bool = False,
        free: dict[str, dict[str, int]] | None = None,
        base: Mapping[str, Mapping[str, int]] | None = None,
    ) -> dict[str, str]:
        """First-fit ``members`` (in that order) onto ``node_order``, consuming room in ``free``
        (node → what is left; a node not in it starts from ``base``, then from its free
        capacity); stops at the first member that does not fit, so fewer assignments than
        members means no fit."""
        free = {} if free is None else free
        pointer: dict[str, int] = {}
        taken: set[str] = set()
        out: dict[str, str] = {}
        limits = self.intent.leaf_limits
        leaf_nodes: dict[str, set[str]] = {}
        leaf_gpus: dict[str, int] = {}

        def within_limits(node: str, member: Member) -> bool:
            """``topologyConstraints``: the most nodes and GPUs of one leaf this set may take."""
            leaf = self.layout.leaf_of.get(node) if limits is not None else None
            if leaf is None or limits is None:
                return True
            held = leaf_nodes.get(leaf, set())
            cap = limits.max_nodes_per_leaf
            if cap is not None and node not in held and len(held) >= cap:
                return False
            gpus = limits.max_gpus_per_leaf
            want = member.requests.get(GPU, 0)
            return gpus is None or leaf_gpus.get(leaf, 0) + want <= gpus

        def room_of(node: str) -> dict[str, int]:
            room = free.get(node)
            if room is None:
                start = base.get(node) if base is not None else None
                room = free[node] = dict(start if start is not None else self.nodes[node].free)
            return room

        for member in members:
            shape = self.shape_of.get(member.name) or member.shape_key
            ok = self.ok[shape]
            i = pointer.get(shape, 0)
            chosen: str | None = None
            # Capacity only shrinks during a fill, so a node that cannot take this shape now never
            # will: the per-shape pointer only moves forward (linear in nodes + members).
            # A leaf at its limit stays at it: the pointer may still only move forward.
            while i < len(node_order):
                node = node_order[i]
                if (
                    node in ok
                    and (spread is False or node not in taken)
                    and fits(room_of(node), member.requests)
                    and within_limits(node, member)
                ):
                    chosen = node
                    break
                i += 1
            pointer[shape] = i
            if chosen is None and spread:
                for node in node_order:
                    if (
                        node in ok
                        and fits(room_of(node), member.requests)
                        and within_limits(node, member)
                    ):
                        chosen = node
                        break
            if chosen is None:
                return out
            subtract(room_of(chosen), member.requests)
            out[member.name] = chosen
            leaf = self.layout.leaf_of.get(chosen)
            if leaf is not None:
                leaf_nodes.setdefault(leaf, set()).add(chosen)
                leaf_gpus[leaf] = leaf_gpus.get(leaf, 0) + member.requests.get(GPU, 0)
            if spread:
                taken.add(chosen)
        return out

    def leftover_gpus(self, names: Iterable[str], used: Mapping[str, str]) -> int:
        demand_on: dict[str, int] = {}
        by_name = {m.name: m for m in self.members}
        for member, node in used.items():
            demand_on[node] = demand_on.get(node, 0) + by_name[member].requests.get(GPU, 0)
        return sum(self.nodes[n].free.get(GPU, 0) - demand_on.get(n, 0) for n in names)

    def result(
        self, tier: str, domain: str, used: Mapping[str, str], *, adjacent: bool = True
    ) -> Placement:
        nodes = sorted_names(set(used.values()))
        leaves = sorted_names({self.layout.leaf_of[n] for n in nodes if n in self.layout.leaf_of})
        spines = sorted_names({self.layout.spine_of[n] for n in nodes if n in self.layout.spine_of})
        return Placement(
            assignments=tuple((m.name, used[m.name]) for m in self.members),
            tier=tier,
            domain=domain,
            nodes=tuple(nodes),
            leaves=tuple(leaves),
            spines=tuple(spines),
            adjacent=adjacent,
            strategy=self.intent.strategy,
        )
