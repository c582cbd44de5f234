"""Pick victims so that a higher-priority pod or gang fits: fewest, lowest priority, whole gangs.

Inputs are plain data — the nodes' free capacity, the running pods (with their gang, if any) and
the PodDisruptionBudgets with their current health — and the answer is a value: the nominated
node of every preemptor member and the pods to evict, or a ``Status`` saying why preemption cannot
help. Nothing is evicted here; the glue evicts through the Eviction API, records
``status.nominatedNodeName`` and emits the Events.

Rules:

* A preemptor with ``preemptionPolicy: Never`` never preempts.
* Only pods of strictly lower priority are candidates. A gang is one candidate: all of its running
  pods go together (a victim gang is never left half running); its priority is its highest
  member's.
* PodDisruptionBudgets are honoured strictly: a candidate whose eviction would take a budget below
  its minimum is not used. When only such candidates would help, the answer names the budget.
* Fewest victims: candidates are taken lowest priority first (then smallest, then holding the
  most of GPUs — a whole GPU 1000 thousandths, a share its part), the shortest prefix
  that makes the preemptor fit is found, and then every victim that is not needed after all is
  spared, highest priority first. The preemptor is placed with the same network rules as always.
* DRA claims: evicting a pod frees the GPUs of the claims that only victims reserve
  (:mod:`.claims`); a claim another remaining pod reserves stays taken.
* Shares of a GPU (:mod:`.shares`): a shared GPU is freed only when every holder is a victim;
  a pod asking for a share fits where, once the victims are gone, one GPU has room for it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from coordinator.core.domains.capacity import GPU, NodeState, Resources, add
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.packing import EligibleFn, Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.podspec.sharing import GpuShare, HeldShare
from coordinator.core.preemption.capacity import CapacityRoom
from coordinator.core.preemption.claims import ClaimHold, ClaimRoom
from coordinator.core.preemption.shares import (
    SHARE_MILLI,
    GpuHolders,
    ShareRoom,
    places_resource,
)
from coordinator.core.status import Status

_NO_ROOM = "node(s) had no GPU with room for the share"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningPod:
    """A pod that holds capacity on a node."""

    key: str  # "namespace/name"
    node: str
    requests: Resources
    uid: str = ""  # which pod of that name (an eviction is for this one only)
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    gang: str | None = None  # "namespace/name" of its gang
    gpus: tuple[str, ...] = ()
    share: HeldShare | None = None  # part of one GPU (its nvidia.com/gpu, if any, a replica)

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class DisruptionBudget:
    """A PodDisruptionBudget as plain data (spec + the status fields the controller keeps)."""

    namespace: str
    name: str
    selector: LabelSelector
    healthy: int  # status.currentHealthy
    expected: int  # status.expectedPods
    min_available: int | str | None = None  # 3 or "50%"
    max_unavailable: int | str | None = None
    disruptions_allowed: int | None = None  # status.disruptionsAllowed when known

    def allowed(self) -> int:
        """How many matching pods may be evicted now."""
        if self.disruptions_allowed is not None:
            return max(0, self.disruptions_allowed)
        if self.min_available is not None:
            need = _scaled(self.min_available, self.expected, up=True)
            return max(0, self.healthy - need)
        if self.max_unavailable is not None:
            may = _scaled(self.max_unavailable, self.expected, up=False)
            return max(0, self.healthy - (self.expected - may))
        return max(0, self.healthy)

    def covers(self, pod: RunningPod) -> bool:
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


def _scaled(value: int | str, total: int, *, up: bool) -> int:
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.endswith("%") and text[:-1].isdigit():
        share = int(text[:-1]) * total / 100
        return math.ceil(share) if up else math.floor(share)
    if text.isdigit():
        return int(text)
    raise ValueError(f"PodDisruptionBudget value {value!r} is neither a count nor a percentage")


@dataclass(frozen=True, slots=True, kw_only=True)
class Victim:
    """One unit evicted together: a single pod, or every running pod of a gang."""

    unit: str  # the pod key, or "gang:<namespace/name>"
    pods: tuple[str, ...]
    priority: int
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PreemptionPlan:
    placement: Placement
    nominated: tuple[tuple[str, str], ...]  # (preemptor member, node)
    victims: tuple[Victim, ...]
    claims: tuple[str, ...] = ()  # the ResourceClaims ("namespace/name") the victims free
    #: (preemptor member, GPU uuid): the GPU each member asking a share holds room on while the
    #: victims terminate (a GPU they free room on)
    share_gpus: tuple[tuple[str, str], ...] = ()

    @property
    def victim_pods(self) -> tuple[str, ...]:
        return tuple(sorted(p for v in self.victims for p in v.pods))

    def describe(self, preemptor: str) -> str:
        """One line for the Events: who preempts whom, where."""
        units = ", ".join(
            f"{v.unit} (priority {v.priority}, {len(v.pods)} pod{'s' if len(v.pods) != 1 else ''})"
            for v in self.victims
        )
        nodes = ", ".join(sorted({n for _, n in self.nominated}))
        text = f"{preemptor} preempts {units} to run on {nodes}"
        if self.claims:
            text += f", freeing ResourceClaim(s) {', '.join(self.claims)}"
        return text


def _units(candidates: Sequence[RunningPod]) -> dict[str, list[RunningPod]]:
    units: dict[str, list[RunningPod]] = {}
    for pod in candidates:
        unit = f"gang:{pod.gang}" if pod.gang else pod.key
        units.setdefault(unit, []).append(pod)
    return units


def _gpu_milli(pod: RunningPod) -> int:
    """Thousandths of GPUs a pod holds: a share its part, a whole GPU 1000."""
    return pod.share.milli if pod.share is not None else 1000 * pod.requests.get(GPU, 0)


def _freed(
    nodes: Sequence[NodeState],
    pods: Sequence[RunningPod],
    room: ClaimRoom,
    shared: ShareRoom,
    *,
    milli: bool,
    asks: Collection[GpuShare] = (),
) -> list[NodeState]:
    """``nodes`` once ``pods`` are gone; with ``milli``, each with its :data:`SHARE_MILLI` and,
    for each of ``asks`` (several members asking shares), its places for that share."""
    give: dict[str, dict[str, int]] = {}
    for pod in pods:
        requests = pod.requests
        if pod.share is not None and requests.get(GPU):
            requests = {k: v for k, v in requests.items() if k != GPU}  # a replica, not a GPU
        add(give.setdefault(pod.node, {}), requests)
    victims = {p.key for p in pods}
    unclaimed = {gpu for _, gpu in room.freed_gpu_ids(victims, extended=True)} if asks else set()
    for name, gpus in room.freed_gpus(victims).items():
        add(give.setdefault(name, {}), {GPU: gpus})
    for name, gpus in shared.freed_gpus(victims).items():
        add(give.setdefault(name, {}), {GPU: gpus})
    out = []
    for node in nodes:
        extra = give.get(node.name)
        if not extra and not milli:
            out.append(node)
            continue
        free = dict(node.free)
        add(free, extra or {})
        if milli:
            whole = max(0, free.get(GPU, 0))
            free[SHARE_MILLI] = shared.milli(node.name, victims, whole)
            for ask in asks:
                free[places_resource(ask)] = shared.places(
                    node.name, ask, victims, whole_free=whole, unclaimed=unclaimed
                )
        out.append(replace(node, free=free))
    return out


def select_victims(
    preemptor: Sequence[Member],
    *,
    priority: int,
    nodes: Sequence[NodeState],
    running: Sequence[RunningPod],
    budgets: Sequence[DisruptionBudget] = (),
    preemption_policy: str = "PreemptLowerPriority",
    intent: PlacementIntent | None = None,
    keys: DomainKeys | None = None,
    eligible: EligibleFn | None = None,
    claims: Sequence[ClaimHold] = (),
    shares: Mapping[str, GpuShare] | None = None,
    gpus: Sequence[GpuHolders] = (),
    capacity: CapacityRoom | None = None,
) -> PreemptionPlan | Status:
    """Victims whose eviction lets every member of ``preemptor`` fit, or why none exist.
    ``claims``: the allocated DRA claims holding GPUs, with the pods reserving them;
    ``shares``: member → the part of one GPU it asks for; ``gpus``: who holds the nodes' GPUs
    (the shared ones, and every one when a member asks for a share); ``capacity``: the parts of
    shareable DRA GPUs members' claims ask for."""
    if preemption_policy == "Never":
        return Status.unresolvable(
            "preemption is not allowed", detail="the pod's preemptionPolicy is Never"
        )
    if not preemptor:
        return Status.unresolvable("pod group has no members")

    room = ClaimRoom(claims)
    shared = ShareRoom(gpus)
    asks = dict(shares or {})
    milli = any(m.requests.get(SHARE_MILLI) for m in preemptor)
    # Several members asking shares also count each share's places GPU by GPU (as gangs do).
    placed = set(asks.values()) if milli and len(asks) > 1 else set()
    if asks:  # a share is part of one GPU: its nvidia.com/gpu (a replica) is no whole GPU
        preemptor = [
            replace(
                m,
                requests={
                    **{k: v for k, v in m.requests.items() if k != GPU},
                    **({places_resource(asks[m.name]): 1} if placed else {}),
                },
            )
            if m.name in asks
            else m
            for m in preemptor
        ]

    def attempt(victims: Sequence[list[RunningPod]]) -> Placement | Status:
        pods = [p for unit in victims for p in unit]
        after = _freed(nodes, pods, room, shared, milli=milli, asks=placed)
        check = eligible
        if asks or capacity is not None:
            gone = {p.key for p in pods}
            unclaimed = {gpu for _, gpu in room.freed_gpu_ids(gone, extended=True)}
            freed = {h.key for h in room.freed_claims(gone)}
            fresh = {n.name for n in after if n.free.get(GPU, 0) > 0}

            def check(member: Member, node: NodeState) -> Status:
                ask = asks.get(member.name)
                if ask is not None and not shared.fits(
                    node.name, ask, gone, fresh=node.name in fresh, unclaimed=unclaimed
                ):
                    return Status.unschedulable(_NO_ROOM)
                if capacity is not None and not capacity.fits(member.name, node.name, freed):
                    return Status.unschedulable(_NO_ROOM)
                return Status() if eligible is None else eligible(member, node)

        return place_members(preemptor, after, intent=intent, keys=keys, eligible=check)

    groups = _units(running)
    # A gang's priority is its highest member's; a gang is a candidate only as a whole.
    unit_priority = {u: max(p.priority for p in pods) for u, pods in groups.items()}
    candidates = [u for u in groups if unit_priority[u] < priority]
    candidates.sort(
        key=lambda u: (
            unit_priority[u],
            len(groups[u]),
            -sum(_gpu_milli(p) for p in groups[u]),
            u,
        )
    )
    # Honour disruption budgets: walk the candidates in order, skipping any that would exceed one.
    allowance = {(b.namespace, b.name): b.allowed() for b in budgets}
    usable: list[str] = []
    blocked: dict[str, str] = {}
    for unit in candidates:
        hits: dict[tuple[str, str], int] = {}
        for b in budgets:
            n = sum(1 for p in groups[unit] if b.covers(p))
            if n:
                hits[(b.namespace, b.name)] = n
        over = [k for k, n in hits.items() if n > allowance[k]]
        if over:
            blocked[unit] = ", ".join(f"{ns}/{name}" for ns, name in over)
            continue
        for k, n in hits.items():
            allowance[k] -= n
        usable.append(unit)

    everything = attempt([groups[u] for u in usable])
    if not isinstance(everything, Placement):
        detail = "evicting every lower-priority pod would not make room"
        if blocked:
            unblocked_all = attempt([groups[u] for u in candidates])
            if isinstance(unblocked_all, Placement):
                names = sorted(set(blocked.values()))
                detail = "only evictions the PodDisruptionBudget(s) " + ", ".join(names)
                detail += " forbid would make room"
        return Status.unschedulable("preemption cannot make room", detail=detail)

    # Shortest prefix that fits (fitting is monotone in the freed capacity), then spare victims.
    lo, hi = 0, len(usable)
    while lo < hi:
        mid = (lo + hi) // 2
        if isinstance(attempt([groups[u] for u in usable[:mid]]), Placement):
            hi = mid
        else:
            lo = mid + 1
    chosen = list(usable[:lo])
    for unit in sorted(chosen, key=lambda u: (-unit_priority[u], -len(groups[u]), u)):
        trial = [u for u in chosen if u != unit]
        if isinstance(attempt([groups[u] for u in trial]), Placement):
            chosen = trial
    final = attempt([groups[u] for u in chosen])
    assert isinstance(final, Placement)
    victims = tuple(
        Victim(
            unit=u,
            pods=tuple(sorted(p.key for p in groups[u])),
            priority=unit_priority[u],
            nodes=tuple(sorted({p.node for p in groups[u]})),
        )
        for u in sorted(chosen, key=lambda u: (unit_priority[u], u))
    )
    evicted = {p for v in victims for p in v.pods}
    freed = sorted({h.key for h in room.freed_claims(evicted)})
    return PreemptionPlan(
        placement=final,
        nominated=final.assignments,
        victims=victims,
        claims=tuple(freed),
        share_gpus=_share_gpus(
            final, asks, nodes, [p for u in chosen for p in groups[u]], room, shared
        ),
    )


def _share_gpus(
    final: Placement,
    asks: Mapping[str, GpuShare],
    nodes: Sequence[NodeState],
    pods: Sequence[RunningPod],
    room: ClaimRoom,
    shared: ShareRoom,
) -> tuple[tuple[str, str], ...]:
    """The GPU each member asking a share holds room on (:attr:`PreemptionPlan.share_gpus`)."""
    if not asks:
        return ()
    gone = {p.key for p in pods}
    after = {n.name: n for n in _freed(nodes, pods, room, shared, milli=False)}
    unclaimed = {gpu for _, gpu in room.freed_gpu_ids(gone, extended=True)}
    taken: dict[str, list[HeldShare]] = {}
    out = []
    for member, node in final.assignments:
        ask = asks.get(member)
        state = after.get(node)
        if ask is None or state is None:
            continue
        gpu = shared.gpu_for(
            node,
            ask,
            gone,
            fresh=state.free.get(GPU, 0) > 0,
            unclaimed=unclaimed,
            taken=taken,
        )
        if gpu is None:
            continue
        memory = next((g.memory_mib for g in shared.by_node[node] if g.gpu == gpu), None)
        held = ask.on_gpu(memory)
        if held is not None:
            taken.setdefault(gpu, []).append(held)
        out.append((member, gpu))
    return tuple(out)


__all__ = ["DisruptionBudget", "PreemptionPlan", "RunningPod", "Victim", "select_victims"]
