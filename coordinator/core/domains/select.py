"""Place a set of pods (a gang's members) on the nodes of the narrowest network domain that fits.

The rules (DESIGN.md §4), tried tier by tier, narrowest first, for ``consolidated`` and
``balanced`` placement:

1. **one node** when the whole set fits on a single node;
2. **one leaf**: two nodes, or a leaf's worth of nodes, land inside one leaf switch;
3. **the fewest leaves under one spine**: ``w`` = 2, 3, … leaves, adjacent leaves (neighbours in
   natural name order) first, any ``w`` leaves of the spine after that;
4. **one zone**, then **the cluster** — unless the job is latency-sensitive or asks for network
   bandwidth, which keeps it inside one spine when spines are labelled.

A preferred domain (leaf, spine or zone name) is tried first with the same rules; for a leaf that
is too small, its spine is tried next. ``distributed`` placement instead spreads members over
distinct nodes, round-robin across leaves.

Inside the chosen nodes members are packed first-fit in a strategy-specific node order:
``consolidated`` takes the nodes with the most free GPUs first (fewest nodes), ``balanced`` the
nodes with the fewest free GPUs that still fit (best fit, least fragmentation). Everything works
on copies of the free-capacity maps: the inputs are never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.core.domains.capacity import GPU, NodeState, Resources, fits, shortfall, subtract
from coordinator.core.domains.layout import (
    DomainKeys,
    Layout,
    adjacent_windows,
    build_layout,
    natural_key,
    sorted_names,
)
from coordinator.core.domains.strategy import PlacementIntent, Strategy
from coordinator.core.framework.status import SUCCESS, Code, Status, summarize

GANG_APART = "node(s) could not hold the pod group together with its siblings"


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
    tier: str  # "node" | "leaf" | "spine" | "zone" | "cluster" | "distributed"
    domain: str  # the node, leaf, spine or zone name; "cluster" for the widest tier
    nodes: tuple[str, ...]
    leaves: tuple[str, ...]
    spines: tuple[str, ...]
    adjacent: bool  # for several leaves: all neighbours in name order
    strategy: Strategy
    preferred_domain_used: bool = False
    notes: tuple[str, ...] = field(default=())

    def node_of(self, member: str) -> str | None:
        for name, node in self.assignments:
            if name == member:
                return node
        return None


class _Ctx:
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
        for node in nodes.values():
            if not node.schedulable:
                self.rejections[node.name] = Status.unschedulable(
                    "node(s) were unschedulable", detail=node.name
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
        return True

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
        any node with room, in the same order.
        """
        free: dict[str, dict[str, int]] = {}
        pointer: dict[str, int] = {}
        taken: set[str] = set()
        out: dict[str, str] = {}

        def room_of(node: str) -> dict[str, int]:
            room = free.get(node)
            if room is None:
                room = free[node] = dict(self.nodes[node].free)
            return room

        for member in self.order:
            shape = self.shape_of[member.name]
            ok = self.ok[shape]
            i = pointer.get(shape, 0)
            chosen: str | None = None
            # Capacity only shrinks during a fill, so a node that cannot take this shape now never
            # will: the per-shape pointer only moves forward (linear in nodes + members).
            while i < len(node_order):
                node = node_order[i]
                if node in ok and node not in taken and fits(room_of(node), member.requests):
                    chosen = node
                    break
                if node in ok and not spread and fits(room_of(node), member.requests):
                    chosen = node
                    break
                i += 1
            pointer[shape] = i
            if chosen is None and spread:
                for node in node_order:
                    if node in ok and fits(room_of(node), member.requests):
                        chosen = node
                        break
            if chosen is None:
                return None
            subtract(room_of(chosen), member.requests)
            out[member.name] = chosen
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


def _rank(ctx: _Ctx, names: Sequence[str], used: Mapping[str, str]) -> tuple[int, int]:
    nodes_used = len(set(used.values()))
    leftover = ctx.leftover_gpus(names, used)
    if ctx.intent.strategy is Strategy.CONSOLIDATED:
        return (nodes_used, leftover)
    return (leftover, nodes_used)


def _by_leaves(ctx: _Ctx, leaves: Sequence[str], scope: set[str]) -> list[str]:
    order: list[str] = []
    for leaf in leaves:
        order.extend(ctx.ordered(n for n in ctx.layout.leaves[leaf].nodes if n in scope))
    return order


def _narrowest(ctx: _Ctx, scope: set[str]) -> Placement | None:
    layout = ctx.layout
    if not scope or not ctx.could_fit(list(scope)):
        return None
    # 1. one node: the tightest node (fewest free GPUs) that holds everything
    singles = [n for n in scope if fits(ctx.nodes[n].free, ctx.demand)]
    if singles:
        first = min(singles, key=lambda n: (ctx.node_key(n), natural_key(n)))
        used = ctx.fill([first])
        if used is not None:
            return ctx.result("node", first, used)
        singles.sort(key=lambda n: (ctx.node_key(n), natural_key(n)))
    for name in singles:
        used = ctx.fill([name])
        if used is not None:
            return ctx.result("node", name, used)
    # 2. one leaf
    leaf_best: tuple[tuple[int, int], str, dict[str, str]] | None = None
    for leaf_name, leaf in layout.leaves.items():
        names = [n for n in leaf.nodes if n in scope]
        if not names or not ctx.could_fit(names):
            continue
        used = ctx.fill(ctx.ordered(names))
        if used is None:
            continue
        rank = _rank(ctx, names, used)
        if leaf_best is None or (rank, natural_key(leaf_name)) < (
            leaf_best[0],
            natural_key(leaf_best[1]),
        ):
            leaf_best = (rank, leaf_name, used)
    if leaf_best is not None:
        return ctx.result("leaf", leaf_best[1], leaf_best[2])
    # 3. the fewest leaves under one spine, adjacent first
    spine_leaves = {
        s: [leaf for leaf in sp.leaves if any(n in scope for n in layout.leaves[leaf].nodes)]
        for s, sp in layout.spines.items()
    }
    widest = max((len(v) for v in spine_leaves.values()), default=0)
    primary = ctx.slots[ctx.shape_of[ctx.order[0].name]]
    for width in range(2, widest + 1):
        win_best: tuple[tuple[int, int], str, tuple[str, ...], dict[str, str]] | None = None
        for spine, leaves in spine_leaves.items():
            for window in adjacent_windows(leaves, width):
                names = [n for leaf in window for n in layout.leaves[leaf].nodes if n in scope]
                if not ctx.could_fit(names):
                    continue
                used = ctx.fill(_by_leaves(ctx, window, scope))
                if used is None:
                    continue
                rank = _rank(ctx, names, used)
                cand_key = (rank, natural_key(spine), tuple(natural_key(w) for w in window))
                if win_best is None or cand_key < (
                    win_best[0],
                    natural_key(win_best[1]),
                    tuple(natural_key(w) for w in win_best[2]),
                ):
                    win_best = (rank, spine, window, used)
        if win_best is not None:
            return ctx.result("spine", win_best[1], win_best[3], adjacent=True)
        for spine, leaves in sorted(spine_leaves.items(), key=lambda kv: natural_key(kv[0])):
            if len(leaves) < width:
                continue
            roomiest = sorted(
                leaves,
                key=lambda lf: (
                    # room for the biggest members first, then free GPUs
                    -sum(primary.get(n, 0) for n in layout.leaves[lf].nodes if n in scope),
                    -ctx.free_sum(n for n in layout.leaves[lf].nodes if n in scope).get(GPU, 0),
                    natural_key(lf),
                ),
            )[:width]
            chosen = sorted_names(roomiest)
            used = ctx.fill(_by_leaves(ctx, chosen, scope))
            if used is not None:
                return ctx.result("spine", spine, used, adjacent=False)
    if ctx.intent.single_spine and layout.spines:
        return None
    # 4. one zone
    for zone in sorted_names(layout.zones):
        names = [n for n in layout.zones[zone] if n in scope]
        if not names or not ctx.could_fit(names):
            continue
        used = ctx.fill(_cluster_order(ctx, names))
        if used is not None:
            return ctx.result("zone", zone, used, adjacent=False)
    # 5. the cluster
    used = ctx.fill(_cluster_order(ctx, list(scope)))
    if used is not None:
        return ctx.result("cluster", "cluster", used, adjacent=False)
    return None


def _cluster_order(ctx: _Ctx, names: Sequence[str]) -> list[str]:
    """Roomiest spine first, roomiest leaf first inside it, unlabelled nodes last."""
    layout = ctx.layout
    groups: dict[tuple[str, str], list[str]] = {}
    loose: list[str] = []
    for n in names:
        leaf = layout.leaf_of.get(n)
        if leaf is None:
            loose.append(n)
        else:
            groups.setdefault((layout.leaves[leaf].spine or "", leaf), []).append(n)
    spine_free: dict[str, int] = {}
    leaf_free: dict[tuple[str, str], int] = {}
    for key, members in groups.items():
        leaf_free[key] = ctx.free_sum(members).get(GPU, 0)
        spine_free[key[0]] = spine_free.get(key[0], 0) + leaf_free[key]
    order: list[str] = []
    for key in sorted(
        groups,
        key=lambda k: (-spine_free[k[0]], natural_key(k[0]), -leaf_free[k], natural_key(k[1])),
    ):
        order.extend(ctx.ordered(groups[key]))
    order.extend(ctx.ordered(loose))
    return order


def _distributed(ctx: _Ctx, scope: set[str]) -> Placement | None:
    layout = ctx.layout
    if not scope or not ctx.could_fit(list(scope)):
        return None
    groups: dict[str, list[str]] = {}
    for n in scope:
        groups.setdefault(layout.leaf_of.get(n, "\0" + n), []).append(n)
    leaf_order = sorted(
        groups,
        key=lambda g: (-ctx.free_sum(groups[g]).get(GPU, 0), natural_key(g)),
    )
    columns = [
        sorted(groups[g], key=lambda n: (-ctx.node_key(n)[0], -ctx.node_key(n)[1], natural_key(n)))
        for g in leaf_order
    ]
    interleaved: list[str] = []
    depth = max((len(c) for c in columns), default=0)
    for i in range(depth):
        interleaved.extend(c[i] for c in columns if i < len(c))
    used = ctx.fill(interleaved, spread=True)
    if used is None:
        return None
    return ctx.result("distributed", "cluster", used, adjacent=False)


def _search(ctx: _Ctx, scope: set[str]) -> Placement | None:
    if ctx.intent.strategy is not Strategy.DISTRIBUTED:
        return _narrowest(ctx, scope)
    if ctx.intent.single_spine and ctx.layout.spines:
        spines = sorted(
            ctx.layout.spines,
            key=lambda s: (
                -ctx.free_sum(n for n in ctx.layout.nodes_in(s) if n in scope).get(GPU, 0),
                natural_key(s),
            ),
        )
        for spine in spines:
            found = _distributed(ctx, scope & set(ctx.layout.nodes_in(spine)))
            if found is not None:
                return found
        return None
    return _distributed(ctx, scope)


def place_members(
    members: Sequence[Member],
    nodes: Sequence[NodeState],
    *,
    intent: PlacementIntent | None = None,
    keys: DomainKeys | None = None,
    layout: Layout | None = None,
    eligible: EligibleFn | None = None,
    within: Iterable[str] | None = None,
) -> Placement | Status:
    """Place all ``members`` together on ``nodes`` by the network rules, or say why not.

    ``eligible`` is the per-pod core's capacity-independent filter; ``within`` restricts the
    candidate nodes (e.g. a recovering gang's current leaf). Returns a :class:`Placement`, or an
    Unschedulable ``Status`` whose message counts the nodes' reasons like kube-scheduler.
    """
    intent = intent or PlacementIntent()
    by_name = {n.name: n for n in nodes}
    layout = layout or build_layout(nodes, keys=keys)
    if not members:
        return Status.unresolvable("pod group has no members")
    names = [m.name for m in members]
    if len(set(names)) != len(names):
        return Status.error("members must have distinct names")
    ctx = _Ctx(members, by_name, layout, intent, eligible)
    scope = set(ctx.usable)
    if within is not None:
        scope &= set(within)
    notes: list[str] = []
    preferred = intent.preferred_domain
    if preferred is not None:
        kind = layout.kind_of(preferred)
        if kind is None:
            notes.append(f"preferred domain {preferred!r} is not a known leaf, spine or zone")
        else:
            tries = [preferred]
            if kind == "leaf" and layout.leaves[preferred].spine is not None:
                tries.append(layout.leaves[preferred].spine or "")
            for domain in tries:
                found = _search(ctx, scope & set(layout.nodes_in(domain)))
                if found is not None:
                    return _with(found, preferred_domain_used=True, notes=notes)
            notes.append(f"preferred domain {preferred!r} could not hold the whole group")
    found = _search(ctx, scope)
    if found is not None:
        return _with(found, preferred_domain_used=False, notes=notes)
    return _failure(ctx, scope, notes)


def _with(p: Placement, *, preferred_domain_used: bool, notes: list[str]) -> Placement:
    return Placement(
        assignments=p.assignments,
        tier=p.tier,
        domain=p.domain,
        nodes=p.nodes,
        leaves=p.leaves,
        spines=p.spines,
        adjacent=p.adjacent,
        strategy=p.strategy,
        preferred_domain_used=preferred_domain_used,
        notes=tuple(notes),
    )


def format_amount(resource: str, amount: int) -> str:
    """``cpu`` millicores as cores, ``memory`` bytes as Gi/Mi, devices as counts."""
    if resource == "cpu":
        text = f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    elif resource == "memory" or resource.startswith("hugepages-"):
        if amount % 2**30 == 0:
            text = f"{amount // 2**30}Gi"
        elif amount % 2**20 == 0:
            text = f"{amount // 2**20}Mi"
        else:
            text = str(amount)
    else:
        text = str(amount)
    return f"{text} {resource}"


def _failure(ctx: _Ctx, scope: set[str], notes: list[str]) -> Status:
    statuses: dict[str, Status] = dict(ctx.rejections)
    smallest = min(ctx.members, key=lambda m: (sum(m.requests.values()), m.name))
    for name in ctx.nodes:
        if name in statuses:
            continue
        if name not in scope:
            statuses[name] = Status.unschedulable("node(s) were not among the candidate nodes")
            continue
        short = shortfall(ctx.nodes[name].free, smallest.requests)
        if short:
            statuses[name] = Status.unschedulable(*(f"Insufficient {r}" for r in short))
        else:
            statuses[name] = Status.unschedulable(GANG_APART)
    free = ctx.free_sum(scope)
    names = sorted(ctx.demand, key=lambda k: (k != GPU, k))
    need = ", ".join(format_amount(k, ctx.demand[k]) for k in names)
    have = ", ".join(format_amount(k, free.get(k, 0)) for k in names)
    detail = f"{len(ctx.members)} pods need {need} together; eligible nodes have {have} free"
    if ctx.intent.single_spine and ctx.layout.spines:
        detail += "; a latency-sensitive or bandwidth-bound group must fit in one spine"
    if notes:
        detail += "; " + "; ".join(notes)
    every_unresolvable = (
        bool(ctx.rejections)
        and len(ctx.rejections) == len(ctx.nodes)
        and all(s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for s in ctx.rejections.values())
    )
    reasons = summarize(len(ctx.nodes), statuses).rstrip(".")
    if every_unresolvable:
        return Status.unresolvable(reasons, detail=detail)
    return Status.unschedulable(reasons, detail=detail)


__all__ = ["GANG_APART", "EligibleFn", "Member", "Placement", "place_members"]
