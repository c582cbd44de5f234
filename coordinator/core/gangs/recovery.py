"""Recovery planning: after GPUs or nodes fail, re-place every affected gang as a whole unit, with
the fewest moves.

Input is plain data: the nodes' capacity (the failed GPUs already excluded from ``free`` when they
were idle), the running pods with the GPUs they hold and their gang, and what failed — nodes
(NotReady, or their agent stale past its TTL) and GPUs (XID / lost, per node). For each affected
unit (a gang with all its running members, or a lone pod), in priority order:

1. **Fewest moves**: the healthy members stay; only the members on failed hardware move, into the
   gang's current domain: its NVLink clique (``nvidia.com/gpu.clique``, as the layout trusts it:
   :mod:`coordinator.core.domains.cliques`) when every member that stays is in one, then the
   leaves it already occupies, then their spine. The message names where each mover goes and in
   which of these domains.
2. Otherwise **the whole gang moves**: every member is re-placed by the usual network rules, as
   if newly submitted (capacity held by the gang itself counts as free).
3. Otherwise the gang cannot run now: every member is evicted so none is left half running, and
   the gang waits whole in the queue.

Each decision is applied to the capacity before the next unit is planned, so two affected gangs
never get the same room. Nothing is evicted here: the glue evicts (Eviction API) what ``evict``
lists and reserves the new places for the replacement pods in the gang manager.

A pod holding a **share** of a GPU moves as a share, as gangs are planned
(:mod:`coordinator.core.gangs.cycle`): its ``nvidia.com/gpu: 1`` (a time-slicing replica) is no
whole GPU it needs or gives back; when the nodes carry :data:`SHARE_MILLI` every member takes
its thousandths of GPUs (a share its part, a whole GPU 1000) and gives them back when it moves;
:func:`share_room` keeps a share to nodes with one GPU that has room for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from coordinator.core.domains.capacity import GPU, NodeState, add, subtract
from coordinator.core.domains.layout import DomainKeys, build_layout
from coordinator.core.domains.packing import EligibleFn, Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.podspec.sharing import WHOLE, GpuShare, HeldShare
from coordinator.core.preemption.shares import SHARE_MILLI, ShareRoom, gpu_holders
from coordinator.core.preemption.victims import RunningPod
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitRecovery:
    unit: str  # "gang:<namespace/name>" or the pod key
    affected: tuple[str, ...]  # pods on failed hardware
    kept: tuple[str, ...]  # members that stay where they are
    moves: tuple[tuple[str, str], ...]  # (pod, new node) — the pod is evicted and replaced there
    evict: tuple[str, ...]  # every pod the glue evicts (moves and, when waiting, all members)
    mode: str  # "partial" | "whole" | "wait"
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryPlan:
    units: tuple[UnitRecovery, ...]

    @property
    def moves(self) -> int:
        return sum(len(u.moves) for u in self.units)

    @property
    def evictions(self) -> tuple[str, ...]:
        return tuple(sorted(p for u in self.units for p in u.evict))


def affected_pods(
    running: Iterable[RunningPod],
    *,
    failed_nodes: Iterable[str] = (),
    failed_gpus: Mapping[str, Iterable[str]] | None = None,
) -> list[RunningPod]:
    """Pods on a failed node, or holding a failed GPU."""
    down = set(failed_nodes)
    bad = {node: set(ids) for node, ids in (failed_gpus or {}).items()}
    return [p for p in running if p.node in down or (bad.get(p.node, set()) & set(p.gpus))]


def share_room(snapshot: Snapshot, shares: Mapping[str, HeldShare]) -> EligibleFn:
    """Eligibility for :func:`plan_recovery`: a member holding a share (``shares``: pod key →
    its share) goes only to a node of ``snapshot`` with one GPU that has room for it."""
    room = ShareRoom(gpu_holders(snapshot, every_gpu=True))

    def eligible(member: Member, node: NodeState) -> Status:
        held = shares.get(member.name)
        if held is None:
            return Status()
        ask = GpuShare(milli=held.milli, memory_mib=held.memory_mib or None)
        if not room.fits(node.name, ask, frozenset(), fresh=node.gpus_free > 0):
            return Status.unschedulable("node(s) had no GPU with room for the share")
        return Status()

    return eligible


def _needs(pod: RunningPod, milli: bool) -> dict[str, int]:
    """What ``pod`` needs where it goes: a share's replica is no GPU; with ``milli``, its
    :data:`SHARE_MILLI` too."""
    requests = dict(pod.requests)
    if pod.share is not None:
        requests.pop(GPU, None)
    if milli:
        gpus = pod.share.milli if pod.share is not None else WHOLE * requests.get(GPU, 0)
        if gpus:
            requests[SHARE_MILLI] = gpus
    return requests


def plan_recovery(
    nodes: Sequence[NodeState],
    running: Sequence[RunningPod],
    *,
    failed_nodes: Iterable[str] = (),
    failed_gpus: Mapping[str, Iterable[str]] | None = None,
    intents: Mapping[str, PlacementIntent] | None = None,
    keys: DomainKeys | None = None,
    eligible: EligibleFn | None = None,
) -> RecoveryPlan:
    """Re-placement of every unit touched by the failures (see the module docstring)."""
    down = set(failed_nodes)
    bad = {node: set(ids) for node, ids in (failed_gpus or {}).items()}
    hit = affected_pods(running, failed_nodes=down, failed_gpus=bad)
    if not hit:
        return RecoveryPlan(units=())
    layout = build_layout(nodes, keys=keys)
    state: dict[str, NodeState] = {
        n.name: (replace(n, schedulable=False) if n.name in down else n) for n in nodes
    }
    units: dict[str, list[RunningPod]] = {}
    for pod in running:
        units.setdefault(f"gang:{pod.gang}" if pod.gang else pod.key, []).append(pod)
    milli = any(SHARE_MILLI in n.free for n in nodes)
    hit_keys = {p.key for p in hit}
    touched = sorted(
        {u for u, pods in units.items() if any(p.key in hit_keys for p in pods)},
        key=lambda u: (-max(p.priority for p in units[u]), u),
    )

    def give_back(pods: Iterable[RunningPod]) -> None:
        for pod in pods:
            if pod.node in down or pod.node not in state:
                continue
            node = state[pod.node]
            free = dict(node.free)
            back = _needs(pod, False)
            lost = len(bad.get(pod.node, set()) & set(pod.gpus))
            if lost:
                back[GPU] = max(0, back.get(GPU, 0) - lost)
            if milli and not (lost and pod.share is not None):  # a share dies with its GPU
                back[SHARE_MILLI] = pod.share.milli if pod.share else WHOLE * back.get(GPU, 0)
            add(free, back)
            state[pod.node] = replace(node, free=free)

    def take(placement: Placement, members: Sequence[Member]) -> None:
        by_name = {m.name: m for m in members}
        for name, node_name in placement.assignments:
            node = state[node_name]
            free = dict(node.free)
            subtract(free, by_name[name].requests)
            state[node_name] = replace(node, free=free)

    out: list[UnitRecovery] = []
    for unit in touched:
        pods = sorted(units[unit], key=lambda p: p.key)
        movers = [p for p in pods if p.key in hit_keys]
        stay = [p for p in pods if p.key not in hit_keys]
        intent = (intents or {}).get(unit)
        # Capacity the movers held on healthy nodes (minus dead GPUs) is free again.
        give_back(movers)
        mover_members = [Member(name=p.key, requests=_needs(p, milli)) for p in movers]
        found: Placement | Status = Status.unschedulable("no healthy member to anchor to")
        where = ""
        if stay:
            leaves = {layout.leaf_of[p.node] for p in stay if p.node in layout.leaf_of}
            spines = {layout.spine_of[p.node] for p in stay if p.node in layout.spine_of}
            scopes: list[set[str]] = []
            names: list[str] = []  # what each scope is, in the Event's words
            # The gang's NVLink clique first (multi-node NVLink: GB200 NVL72), when every member
            # that stays is in one: a replacement outside it would cross the slower network.
            # Trusted cliques only, as the layout reads them (core/domains/cliques.py).
            cliques = {layout.clique_of.get(p.node) for p in stay}
            clique = cliques.pop() if len(cliques) == 1 else None
            if clique is not None:
                scopes.append(set(layout.cliques[clique].nodes))
                names.append(f"NVLink clique {clique}")
            if leaves:
                scopes.append({n for leaf in leaves for n in layout.leaves[leaf].nodes})
                names.append(f"leaf {', '.join(sorted(leaves))}")
            if spines:
                scopes.append({n for s in spines for n in layout.nodes_in(s)})
                names.append(f"spine {', '.join(sorted(spines))}")
            if not leaves and not spines:
                scopes.append(set(state))
                names.append("the cluster")
            # gpu-count counts the workload: the members staying as well as those moving.
            kept = tuple(_needs(p, False).get(GPU, 0) for p in stay)
            partial = None if intent is None else replace(intent, placed_gpus=kept)
            for scope, name in zip(scopes, names, strict=True):
                where = name
                found = place_members(
                    mover_members,
                    list(state.values()),
                    intent=partial,
                    layout=layout,
                    eligible=eligible,
                    within=scope,
                )
                if isinstance(found, Placement):
                    break
        if isinstance(found, Placement):
            take(found, mover_members)
            out.append(
                UnitRecovery(
                    unit=unit,
                    affected=tuple(p.key for p in movers),
                    kept=tuple(p.key for p in stay),
                    moves=found.assignments,
                    evict=tuple(p.key for p in movers),
                    mode="partial",
                    message=f"{unit}: {len(movers)} of {len(pods)} members move; "
                    f"the rest stay ({found.tier} {found.domain}); "
                    + ", ".join(f"{m} goes to {n}" for m, n in found.assignments)
                    + f", inside the gang's own {where}",
                )
            )
            continue
        # The whole unit moves: what the healthy members hold is free for the re-placement.
        give_back(stay)
        everyone = [Member(name=p.key, requests=_needs(p, milli)) for p in pods]
        whole = place_members(
            everyone, list(state.values()), intent=intent, layout=layout, eligible=eligible
        )
        if isinstance(whole, Placement):
            take(whole, everyone)
            moved = tuple((m, n) for m, n in whole.assignments)
            out.append(
                UnitRecovery(
                    unit=unit,
                    affected=tuple(p.key for p in movers),
                    kept=(),
                    moves=moved,
                    evict=tuple(p.key for p in pods),
                    mode="whole",
                    message=f"{unit}: all {len(pods)} members move together to "
                    f"{whole.tier} {whole.domain}",
                )
            )
            continue
        out.append(
            UnitRecovery(
                unit=unit,
                affected=tuple(p.key for p in movers),
                kept=(),
                moves=(),
                evict=tuple(p.key for p in pods),
                mode="wait",
                message=f"{unit}: cannot be re-placed now ({whole.message}); "
                "all members are released and the group waits whole",
            )
        )
    return RecoveryPlan(units=tuple(out))


__all__ = ["RecoveryPlan", "UnitRecovery", "affected_pods", "plan_recovery", "share_room"]
