"""Place a set of pods (a gang's members) on the nodes of the narrowest network domain that fits.

The rules (docs/design.md §4), tried tier by tier, narrowest first, for ``consolidated`` and
``balanced`` placement:

1. **one node** when the whole set fits on a single node; then **one NVLink clique** (an NVL72
   rack, ``nvidia.com/gpu.clique``), then **the fewest cliques of one leaf** (:mod:`.cliqueplace`);
2. **one leaf**: two nodes, or a leaf's worth of nodes, land inside one leaf switch;
3. **the fewest leaves under one spine**: ``w`` = 2, 3, … leaves, adjacent leaves (neighbours in
   natural name order) first, any ``w`` leaves of the spine after that;
4. **one zone**, then **the cluster** — unless the job is latency-sensitive or asks for network
   bandwidth, which keeps it inside one spine when spines are labelled.

A preferred domain (leaf, spine or zone name) is tried first with the same rules; for a leaf that
is too small, its spine is tried next; a name the cluster does not have is noted
(``Placement.unknown_domain``, a Warning Event on the pods). A ``gpu-count`` that contradicts the
members' GPU limits refuses the group; latency-sensitive groups use MIG-sharing nodes last.
``distributed`` placement instead spreads members over distinct nodes, round-robin across leaves.

Before any of this, a gang that asks for GPUs is searched on the nodes with the best GPU link
class first (NVSwitch, then NVLink, then PCIe; :mod:`.links`). Inside the chosen nodes members are
packed first-fit in a strategy-specific node order:
``consolidated`` takes the nodes with the most free GPUs first (fewest nodes), ``balanced`` the
nodes with the fewest free GPUs that still fit (best fit, least fragmentation); the packing
itself is :mod:`.packing`, the explanation of a refusal :mod:`.refusal`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from common.podkeys import MIG_RESOURCE_PREFIX
from coordinator.core.domains.capacity import GPU, NodeState, fits
from coordinator.core.domains.cliqueplace import clique_order, fewest_cliques, one_clique
from coordinator.core.domains.layout import (
    DomainKeys,
    Layout,
    adjacent_windows,
    build_layout,
    natural_key,
    sorted_names,
)
from coordinator.core.domains.links import best_link_first
from coordinator.core.domains.packing import EligibleFn, Member, Packing, Placement
from coordinator.core.domains.refusal import refusal
from coordinator.core.domains.slices import SliceSpec, domain_of, gang_domains, slice_note
from coordinator.core.domains.strategy import (
    PlacementIntent,
    Strategy,
    gpu_count_disagreement,
)
from coordinator.core.status import Status

__all__ = ["place_members"]


def _rank(ctx: Packing, names: Sequence[str], used: Mapping[str, str]) -> tuple[int, int]:
    nodes_used = len(set(used.values()))
    leftover = ctx.leftover_gpus(names, used)
    if ctx.intent.strategy is Strategy.CONSOLIDATED:
        return (nodes_used, leftover)
    return (leftover, nodes_used)


def _by_leaves(ctx: Packing, leaves: Sequence[str], scope: set[str]) -> list[str]:
    order: list[str] = []
    for leaf in leaves:
        order.extend(clique_order(ctx, [n for n in ctx.layout.leaves[leaf].nodes if n in scope]))
    return order


def _narrowest(ctx: Packing, scope: set[str]) -> Placement | None:
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
    # 1b. one NVLink clique; 1c. the fewest cliques of one leaf
    if layout.cliques:
        found = one_clique(ctx, scope) or fewest_cliques(ctx, scope)
        if found is not None:
            return found
    # 2. one leaf
    leaf_best: tuple[tuple[int, int], str, dict[str, str]] | None = None
    for leaf_name, leaf in layout.leaves.items():
        names = [n for n in leaf.nodes if n in scope]
        if not names or not ctx.could_fit(names):
            continue
        used = ctx.fill(clique_order(ctx, names))
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
    # A spine that cannot hold the group as a whole holds it in no window of its leaves (could_fit
    # is necessary for a fill): skip it for every width instead of trying each of its windows.
    spine_leaves = {
        s: leaves
        for s, leaves in spine_leaves.items()
        if ctx.could_fit([n for leaf in leaves for n in layout.leaves[leaf].nodes if n in scope])
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
            order = _by_leaves(ctx, chosen, scope)
            if not ctx.could_fit(order):
                continue
            used = ctx.fill(order)
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


def _cluster_order(ctx: Packing, names: Sequence[str]) -> list[str]:
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
        order.extend(clique_order(ctx, groups[key]))
    order.extend(clique_order(ctx, loose))
    return order


def _distributed(ctx: Packing, scope: set[str]) -> Placement | None:
    layout = ctx.layout
    if not scope or not ctx.could_fit(list(scope)):
        return None
    groups: dict[str, list[str]] = {}
    for n in scope:
        groups.setdefault(layout.leaf_of.get(n, "\0" + n), []).append(n)
    occupied = ctx.intent.occupied
    # leaves and nodes already holding members of the group (placed earlier) come last
    leaf_order = sorted(
        groups,
        key=lambda g: (
            sum(1 for n in groups[g] if n in occupied),
            -ctx.free_sum(groups[g]).get(GPU, 0),
            natural_key(g),
        ),
    )
    columns = [
        sorted(
            groups[g],
            key=lambda n: (
                n in occupied,
                -ctx.node_key(n)[0],
                -ctx.node_key(n)[1],
                natural_key(n),
            ),
        )
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


def _search(ctx: Packing, scope: set[str]) -> Placement | None:
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
    disagreement = gpu_count_disagreement(intent, [m.requests.get(GPU, 0) for m in members])
    if disagreement is not None:
        return Status.unresolvable(disagreement)
    ctx = Packing(members, by_name, layout, intent, eligible)
    scope = set(ctx.usable)
    if within is not None:
        scope &= set(within)
    notes: list[str] = []
    unknown: str | None = None
    # Latency-sensitive jobs take nodes that share GPUs out as MIG instances only as a last resort.
    quiet = {n for n in scope if not _shares_mig(by_name[n])} if intent.latency_sensitive else scope
    scopes = [quiet, scope] if quiet != scope else [scope]
    preferred = intent.preferred_domain
    if preferred is not None:
        kind = layout.kind_of(preferred)
        if kind is None:
            unknown = preferred
            notes.append(f"preferred domain {preferred!r} is not a known leaf, spine or zone")
        else:
            tries = [preferred]
            if kind == "leaf" and layout.leaves[preferred].spine is not None:
                tries.append(layout.leaves[preferred].spine or "")
            for part in scopes:
                for domain in tries:
                    found = best_link_first(ctx, part & set(layout.nodes_in(domain)), _search)
                    if found is not None:
                        return _with(found, True, unknown, notes, ctx)
            notes.append(f"preferred domain {preferred!r} could not hold the whole group")
    spec = intent.slices
    if spec is not None and spec.gang_level is not None:
        # The whole group inside one domain of its level: each domain by the same rules.
        for part in scopes:
            for _, inside in gang_domains(ctx, part, spec):
                found = best_link_first(ctx, inside, _search)
                if found is not None:
                    return _with(found, False, unknown, notes, ctx)
        miss = _gang_miss(ctx, scope, spec)
        if spec.gang_required:
            return refusal(ctx, scope, [*notes, miss])
        notes.append(f"{miss}; placed across domains ({spec.gang_level} is only preferred)")
    for part in scopes:
        found = best_link_first(ctx, part, _search)
        if found is not None:
            return _with(found, False, unknown, notes, ctx)
    limits = intent.leaf_limits
    if limits is not None and (limits.max_nodes_per_leaf or limits.max_gpus_per_leaf):
        caps = [
            f"{n} {what}"
            for n, what in (
                (limits.max_nodes_per_leaf, "nodes"),
                (limits.max_gpus_per_leaf, "GPUs"),
            )
            if n
        ]
        notes.append(f"topologyConstraints allow at most {' and '.join(caps)} per leaf")
    return refusal(ctx, scope, notes)


def _shares_mig(node: NodeState) -> bool:
    return any(k.startswith(MIG_RESOURCE_PREFIX) and v > 0 for k, v in node.allocatable.items())


def _with(
    p: Placement, used: bool, unknown: str | None, notes: list[str], ctx: Packing
) -> Placement:
    spec = ctx.intent.slices
    if spec is not None:
        note = slice_note(spec, p.assignments, ctx.nodes)
        notes = [*notes, note] if note else notes
        level = spec.level
        if spec.sliced and level is not None:
            where = {
                spec.slice_of[m]: domain_of(ctx.nodes[n], level)
                for m, n in p.assignments
                if m in spec.slice_of
            }
            p = replace(
                p,
                slices=tuple((sid, where[sid] or "") for sid in sorted(where, key=natural_key)),
            )
    return replace(p, preferred_domain_used=used, unknown_domain=unknown, notes=(*notes, *p.notes))


def _gang_miss(ctx: Packing, scope: set[str], spec: SliceSpec) -> str:
    """Why no domain of the group's level held it, and where the nearest room was (among the
    domains :func:`gang_domains` tried)."""
    level = spec.gang_level
    room = {
        value: sum(max(0, ctx.nodes[n].free.get(GPU, 0)) for n in inside)
        for value, inside in gang_domains(ctx, scope, spec)
    }
    blocked = spec.gang_blocked if spec.gang_exclusive else frozenset()
    pods = max(len(ctx.members), spec.gang_room)
    gpus = ctx.demand.get(GPU, 0) * pods // max(1, len(ctx.members))
    head = f"no {level} domain holds the whole group ({pods} pods, {gpus} {GPU})"
    if blocked:
        head += f"; {len(blocked)} domains are in use by other workloads"
    if ctx.slice_miss is not None:
        head += f"; {ctx.slice_miss.message}"
    if not room:
        return f"{head}: no free domain of that level"
    best = min(room, key=lambda v: (-room[v], natural_key(v)))
    return f"{head}: the roomiest, {level}={best}, has {room[best]} {GPU} free"
