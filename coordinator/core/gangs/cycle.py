"""Deciding a whole gang on the scheduling core's snapshot: plan by network rules, confirm every
member with the per-pod framework, assume on a copy.

:func:`schedule_gang` is what the coordinator's loop calls when a gang has min members:

1. the snapshot's nodes become :class:`~coordinator.core.domains.capacity.NodeState` capacity views
   (``domains.capacity.node_states``, as preemption's and the domain summary's);
2. :func:`~coordinator.core.gangs.plan.plan_gang` picks a node for every member (narrowest domain,
   strategy order);
3. each member is run through ``schedule_one`` restricted to its planned node, on a *copy* of the
   snapshot where the members before it are already assumed — so GPU choice, NUMA policy,
   affinity, taints and spread constraints all hold for the gang as a whole;
4. if the core refuses a member on its planned node, that node is excluded for members of that
   shape and the gang is planned again (a few rounds at most).

The result carries one core ``Decision`` per member (GPUs, NUMA, score, annotations) — the glue
assumes them on the real snapshot, reserves them in the gang manager, and binds when allowed.
Nothing here mutates the snapshot passed in.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from coordinator.core.domains.capacity import GPU, NodeState, node_states
from coordinator.core.domains.layout import DomainKeys, build_layout
from coordinator.core.domains.packing import Member
from coordinator.core.domains.slices import SliceSpec
from coordinator.core.domains.strategy import PlacementIntent, Strategy
from coordinator.core.dra.demand import GpuDemand
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.gangs.computedomain import compute_domain_pin
from coordinator.core.gangs.manager import Reservation
from coordinator.core.gangs.plan import GangPlan, plan_gang
from coordinator.core.gangs.slices import HELD_ELSEWHERE, held_domains, slice_spec
from coordinator.core.plugins.groupspread import group_of
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import WHOLE, GpuShare
from coordinator.core.preemption.shares import (
    SHARE_MILLI,
    ShareRoom,
    gpu_holders,
    places_resource,
)
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status


def member_of(pod: PodRequest, *, claim_gpus: int = 0, milli: int = 0) -> Member:
    """A planning member for a pod: pods equal but for name, uid, labels and controller share
    a shape.
    ``claim_gpus``: GPUs its ResourceClaims ask for, planned as ``nvidia.com/gpu``; ``milli``:
    the :data:`SHARE_MILLI` it takes (planning with shares). A share's ``nvidia.com/gpu`` (a
    replica of the shared GPU) is no whole GPU."""
    # Its controller is no part of its shape: a JobSet's pods each have their own Job, and a
    # shape per member would probe every node once per member (the confirm step still runs
    # each member's own cycle, default spreading by controller included).
    shape = repr(replace(pod, name="", uid="", labels={}, controller=None))
    requests = dict(pod.requests)
    if pod.share is not None:
        requests.pop(GPU, None)
    if claim_gpus:
        requests[GPU] = requests.get(GPU, 0) + claim_gpus
        shape += f" + {claim_gpus} claimed GPUs"  # members sharing a claim differ here
    if milli:
        requests[SHARE_MILLI] = milli
    return Member(name=pod.key, requests=requests, shape=shape)


def members_of(pods: Sequence[PodRequest], snapshot: Snapshot) -> list[Member]:
    """Planning members for ``pods``, the GPUs their unallocated claims ask for counted (a
    claim several members share, once). When one of them asks for a share, every member
    asking for GPUs also takes :data:`SHARE_MILLI`: 1000 per whole GPU, a share its part (of
    the cluster's largest GPU, for an ask by memory)."""
    demand: dict[str, int] = {}
    if not snapshot.dra.empty and any(p.claims for p in pods):
        uuids = {g.uuid for n in snapshot.nodes if n.topology for g in n.topology.gpus}
        demand = GpuDemand(snapshot.dra, uuids).pods(pods)
    if not any(p.share is not None for p in pods):
        return [member_of(p, claim_gpus=demand.get(p.key, 0)) for p in pods]
    largest = max(
        (g.memory_total_mib or 0 for n in snapshot.nodes if n.topology for g in n.topology.gpus),
        default=0,
    )
    out = []
    for p in pods:
        gpus = demand.get(p.key, 0)
        if p.share is not None:
            held = p.share.on_gpu(largest or None)
            milli = held.milli if held is not None else p.share.milli or 1
        else:
            milli = WHOLE * (p.requests.get(GPU, 0) + gpus)
        out.append(member_of(p, claim_gpus=gpus, milli=milli))
    return out


def with_share_milli(
    nodes: Sequence[NodeState],
    snapshot: Snapshot,
    asks: Iterable[GpuShare] = (),
    *,
    room: ShareRoom | None = None,
) -> list[NodeState]:
    """``nodes`` with the :data:`SHARE_MILLI` each offers (planning members that take it) and,
    for each of ``asks``, its places for that share (:meth:`ShareRoom.places`): the
    :class:`ShareRoom` of ``snapshot`` (``room``, when the caller has it) with no victims."""
    wanted = {places_resource(ask): ask for ask in asks}
    if room is None:
        room = ShareRoom(gpu_holders(snapshot, every_gpu=True))
    none: frozenset[str] = frozenset()
    out = []
    for state in nodes:
        free = dict(state.free)
        free[SHARE_MILLI] = room.milli(state.name, none, state.gpus_free)
        for name, ask in wanted.items():
            free[name] = room.places(state.name, ask, none, whole_free=state.gpus_free)
        out.append(replace(state, free=free))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class GangDecision:
    plan: GangPlan
    decisions: tuple[Decision, ...]  # one per planned member, in plan order
    rounds: int

    def reservations(self) -> list[Reservation]:
        by_key = {d.pod_key: d for d in self.decisions}
        out = []
        for name, node in self.plan.placement.assignments:
            d = by_key[name]
            out.append(Reservation(pod=name, node=node, gpus=d.device_ids))
        return out


_GATES: weakref.WeakKeyDictionary[Framework, Framework] = weakref.WeakKeyDictionary()


def node_gate(framework: Framework) -> Framework:
    """The framework's node-level filters alone, those that declare
    :attr:`~coordinator.core.framework.interfaces.Plugin.node_gate` (same config, no scoring)."""
    gate = _GATES.get(framework)
    if gate is None:
        gates = [p for p in framework.filter if isinstance(p, Plugin) and p.node_gate]
        gate = _GATES[framework] = Framework(framework.config, gates)
    return gate


def _occupied(pods: Sequence[PodRequest], snapshot: Snapshot) -> frozenset[str]:
    """Nodes holding placed pods of the group ``pods`` belong to (same namespace and name)."""
    first = pods[0] if pods else None
    if first is None or first.gang is None:
        return frozenset()
    namespace, name, keys = first.namespace, first.gang.name, {p.key for p in pods}
    return frozenset(
        node.name
        for node in snapshot.nodes
        if any(
            p.namespace == namespace and p.key not in keys and group_of(p.labels) == name
            for p in node.pods
        )
    )


class GangPlanner(Protocol):
    """What decides a gang's members: :func:`schedule_gang`, or a baseline's member-by-member
    rule (``coordinator.sim.baselines``)."""

    def __call__(
        self,
        pods: Sequence[PodRequest],
        snapshot: Snapshot,
        framework: Framework,
        *,
        min_member: int | None = None,
        intent: PlacementIntent | None = None,
        keys: DomainKeys | None = None,
        within: Iterable[str] | None = None,
    ) -> GangDecision | Status: ...


def schedule_gang(
    pods: Sequence[PodRequest],
    snapshot: Snapshot,
    framework: Framework,
    *,
    min_member: int | None = None,
    intent: PlacementIntent | None = None,
    keys: DomainKeys | None = None,
    within: Iterable[str] | None = None,
    max_rounds: int = 8,
) -> GangDecision | Status:
    """Decide every member of a gang at once, or say why the gang does not fit now.

    ``within`` restricts the nodes (a recovering gang's replacements: the nodes its recovery plan
    chose, or the leaves its surviving members occupy).
    """
    by_key = {p.key: p for p in pods}
    refused: dict[tuple[str, str], Status] = {}
    # topologyConstraints bound every placement of the gang (core/domains/packing.py).
    intent = replace(intent or PlacementIntent(), leaf_limits=framework.config.topology_constraints)
    if intent.strategy is Strategy.DISTRIBUTED:
        intent = replace(intent, occupied=_occupied(pods, snapshot))
    members = members_of(pods, snapshot)
    shapes = {m.name: m.shape_key for m in members}
    nodes = node_states(snapshot)
    asks: dict[str, GpuShare] = {shapes[p.key]: p.share for p in pods if p.share is not None}
    if asks:
        # Thousandths per node, and per share asked the places its GPUs have for it: room
        # spread over GPUs each too small for a share is no place for it.
        room = ShareRoom(gpu_holders(snapshot, every_gpu=True))
        nodes = with_share_milli(nodes, snapshot, asks.values(), room=room)
        members = [
            replace(m, requests={**m.requests, places_resource(asks[m.shape_key]): 1})
            if m.shape_key in asks
            else m
            for m in members
        ]
        # A share goes only where one GPU has room for it (shared, or free while the node
        # still has a whole GPU to give).
        for state in nodes:
            for shape, ask in asks.items():
                if not room.fits(state.name, ask, frozenset(), fresh=state.gpus_free > 0):
                    refused[(shape, state.name)] = Status.unschedulable(
                        "node(s) had no GPU with room for the share", detail=state.name
                    )
    layout = build_layout(nodes, keys=keys)
    scope = None if within is None else list(within)
    # Slices and exclusive domains (docs/gangs.md, "Slices and exclusive topology").
    slices = slice_spec(pods, snapshot, nodes, keys=layout.keys)
    if isinstance(slices, Status):
        return slices
    if slices is not None:
        intent = replace(intent, slices=slices)
    # NVIDIA ComputeDomains: the pods of one in one NVLink clique (docs/topology.md).
    pin = compute_domain_pin(pods, snapshot, layout)
    if isinstance(pin, Status):
        return pin
    if pin is not None and pin.clique is not None:
        inside = set(layout.cliques[pin.clique].nodes)
        scope = [n for n in (scope if scope is not None else inside) if n in inside]
    elif pin is not None and (slices is None or slices.gang_level is None):
        spec = slices or SliceSpec()
        intent = replace(
            intent, slices=replace(spec, gang_level=layout.keys.clique, gang_required=True)
        )
    held = held_domains(pods, snapshot, nodes, layout.keys)
    if held:
        keep_out = Status.unschedulable(HELD_ELSEWHERE)
        for shape in set(shapes.values()):
            for node_name in held:
                refused[(shape, node_name)] = keep_out

    def eligible(member: Member, node: NodeState) -> Status:
        return refused.get((member.shape_key, node.name), Status())

    # Where may each shape go at all? The core's node-level filters (health, unschedulable,
    # taints, node selector and affinity — a GPU model, a pool) once per shape, so the plan
    # never has to learn them one refused node per round.
    gate = node_gate(framework)
    for probe_pod in {shapes[p.key]: p for p in pods}.values():
        probe = schedule_one(probe_pod, snapshot, gate)
        if isinstance(probe, Failure) and probe.pod_status is not None:
            return probe.pod_status  # the pod itself is invalid: no node helps
        for node_name, verdict in probe.verdicts.items():
            if not verdict.status.is_success:
                refused[(shapes[probe_pod.key], node_name)] = verdict.status

    last: Status = Status.unschedulable("pod group does not fit")
    for round_no in range(1, max_rounds + 1):
        plan = plan_gang(
            members,
            nodes,
            min_member=min_member,
            intent=intent,
            layout=layout,
            eligible=eligible if refused else None,
            within=scope,
        )
        if isinstance(plan, Status):
            return plan
        trial = snapshot.copy()
        decisions: list[Decision] = []
        failed = False
        for name, node in plan.placement.assignments:
            pod = by_key[name]
            result = schedule_one(pod, trial, framework, candidate_nodes=(node,))
            if not isinstance(result, Decision):
                status = (
                    result.statuses.get(node)
                    or result.pod_status
                    or Status.unschedulable("refused by the scheduling core")
                )
                if result.pod_status is not None:
                    return result.pod_status  # the pod itself is invalid: no node helps
                refused[(shapes[name], node)] = status
                last = Status(status.code, status.reasons, status.plugin, result.message)
                failed = True
                break
            trial.assume(pod, node, result.placement, result.claims)
            decisions.append(result)
        if not failed:
            if pin is not None:
                placed = plan.placement
                plan = replace(plan, placement=replace(placed, notes=(*placed.notes, pin.note)))
            return GangDecision(plan=plan, decisions=tuple(decisions), rounds=round_no)
    return last


__all__ = [
    "GangDecision",
    "GangPlanner",
    "member_of",
    "members_of",
    "node_gate",
    "schedule_gang",
    "with_share_milli",
]
