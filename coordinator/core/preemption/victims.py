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
* A pod in no gang (``recheck`` given: its topology spread and inter-pod (anti-)affinity with
  pods gone, :mod:`.interpod`) gets its victims as kube-scheduler's DefaultPreemption picks them,
  node by node: every lower-priority candidate on the node is removed, the pod must fit and pass
  those filters there (evicting pods changes their verdicts), then candidates are reprieved one
  by one, highest priority first, each kept running if the pod still passes. The node whose
  victims cost least wins (lowest highest priority, then fewest gangs, pods, GPU-seconds; then
  the node order); the search stops after max(10 % of the nodes, 100) nodes that can be made to
  fit. (One pod lands on one node: this is also far cheaper than the search over every
  candidate in the cluster that gangs need.)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

from common.podkeys import MIG_RESOURCE_PREFIX
from coordinator.core.domains.capacity import GPU, NodeState, add
from coordinator.core.domains.capacity import fits as room_for
from coordinator.core.domains.countbound import may_fit
from coordinator.core.domains.layout import DomainKeys, build_layout
from coordinator.core.domains.packing import EligibleFn, Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.podspec.sharing import GpuShare, HeldShare
from coordinator.core.preemption.capacity import CapacityRoom
from coordinator.core.preemption.claims import ClaimHold, ClaimRoom
from coordinator.core.preemption.interpod import Recheck, passes
from coordinator.core.preemption.model import DisruptionBudget, RunningPod
from coordinator.core.preemption.protections import (
    ZERO_COST,
    Evictable,
    EvictionCost,
    EvictionUnit,
    Protections,
    UnitCache,
    evictable_on,
    evictable_units,
    within_budgets,
)
from coordinator.core.preemption.shares import (
    SHARE_MILLI,
    GpuHolders,
    ShareRoom,
    places_resource,
)
from coordinator.core.status import Status

_NO_ROOM = "node(s) had no GPU with room for the share"


@dataclass(frozen=True, slots=True, kw_only=True)
class Victim:
    """One unit evicted together: a single pod, or every running pod of a gang."""

    unit: str  # the pod key, or "gang:<namespace/name>"
    pods: tuple[str, ...]
    priority: int
    nodes: tuple[str, ...]
    gang: bool = False  # a gang, evicted whole


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


def _gpus_freed(pods: Sequence[RunningPod], room: ClaimRoom, shared: ShareRoom) -> dict[str, int]:
    """Whole GPUs freed per node once ``pods`` are gone: what :func:`_freed` adds to each node's
    ``nvidia.com/gpu``, without building the nodes."""
    out: dict[str, int] = {}
    for pod in pods:
        if pod.share is None and pod.requests.get(GPU):
            out[pod.node] = out.get(pod.node, 0) + pod.requests[GPU]
    victims = {p.key for p in pods}
    for freed in (room.freed_gpus(victims), shared.freed_gpus(victims)):
        for name, gpus in freed.items():
            out[name] = out.get(name, 0) + gpus
    return out


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
    running: Sequence[RunningPod] | Callable[[], Sequence[RunningPod]],
    budgets: Sequence[DisruptionBudget] = (),
    preemption_policy: str = "PreemptLowerPriority",
    intent: PlacementIntent | None = None,
    keys: DomainKeys | None = None,
    eligible: EligibleFn | None = None,
    claims: Sequence[ClaimHold] = (),
    shares: Mapping[str, GpuShare] | None = None,
    gpus: Sequence[GpuHolders] = (),
    capacity: CapacityRoom | None = None,
    now: float | None = None,
    protections: Protections | None = None,
    recheck: Recheck | None = None,
    units: UnitCache | None = None,
    on_node: Callable[[str], Sequence[RunningPod]] | None = None,
) -> PreemptionPlan | Status:
    """Victims whose eviction lets every member of ``preemptor`` fit, or why none exist.
    ``claims``: the allocated DRA claims holding GPUs, with the pods reserving them;
    ``shares``: member → the part of one GPU it asks for; ``gpus``: who holds the nodes' GPUs
    (the shared ones, and every one when a member asks for a share); ``capacity``: the parts of
    shareable DRA GPUs members' claims ask for; ``now`` (seconds since the epoch) and
    ``protections``: the minimum runtimes that protect running pods (:mod:`.protections`);
    ``recheck``: for a pod in no gang, its inter-pod filters with pods gone (:mod:`.interpod`):
    victims are then chosen node by node. ``units``: the eviction units kept between calls
    (:class:`~.protections.UnitCache`). ``on_node``: the pods of ``running`` on one node (in
    its order), none of them in a gang: victims chosen node by node are then read from the
    nodes visited alone, and ``running`` (which may then be a function giving them) only when
    no node can be made to fit (to say why); not used with ``budgets`` (they are spent over all
    candidates in order)."""
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

    by_name = {n.name: n for n in nodes}
    lone = preemptor[0] if len(preemptor) == 1 else None
    node_by_node = recheck is not None and lone is not None
    # Evictions change what is free, never the nodes' labels: one layout for every attempt over
    # all nodes (an attempt on one node builds its own; node by node, none is over all nodes).
    layout = None if node_by_node else build_layout(nodes, keys=keys)
    # Whole-GPU asks only (shares and DRA capacity are counted otherwise): counts first.
    counted = not asks and capacity is None
    gpu_asks = [m.requests.get(GPU, 0) for m in preemptor]

    def attempt(victims: Sequence[list[RunningPod]], on: str | None = None) -> Placement | Status:
        """Place the preemptor with ``victims`` gone (``on``: on that node alone)."""
        pods = [p for unit in victims for p in unit]
        scope = nodes if on is None else [by_name[on]]
        after = _freed(scope, pods, room, shared, milli=milli, asks=placed)
        if on is not None and lone is not None and not room_for(after[0].free, lone.requests):
            # The placement would consume these from the node's free room: a cheap necessary
            # condition, checked before the placement search (the node-by-node search tries
            # several victim sets on every candidate node; most leave too little room).
            return Status.unschedulable("not enough room once the victims are gone")
        if (
            counted
            and on is None
            and layout is not None
            and not may_fit(gpu_asks, after, intent=intent, layout=layout)
        ):
            return Status.unschedulable("not enough free GPUs, counted alone")
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

        if on is not None and recheck is not None:
            local = check

            def check(member: Member, node: NodeState) -> Status:
                status = Status() if local is None else local(member, node)
                return recheck(node.name, pods) if status.is_success else status

        return place_members(
            preemptor,
            after,
            intent=intent,
            keys=keys,
            layout=layout if on is None else None,
            eligible=check,
        )

    def evictable() -> tuple[Evictable, list[EvictionUnit], dict[str, str]]:
        pods = running() if callable(running) else running
        found = evictable_units(pods, below=priority, now=now, protections=protections, cache=units)
        return (found, *within_budgets(found.units, budgets))

    # Node by node with no budget to spend in order: the candidates of each node visited, alone.
    lazy = node_by_node and on_node is not None and not budgets
    if lazy:
        assert on_node is not None

        def units_on(name: str) -> Sequence[EvictionUnit]:
            pods = on_node(name)
            if not pods:
                return ()
            return evictable_on(
                name, pods, below=priority, now=now, protections=protections, cache=units
            )

        everywhere: Callable[[str], Sequence[EvictionUnit]] = units_on
    else:
        found, usable, blocked = evictable()
        by_node = _by_node(usable)

        def everywhere(name: str) -> Sequence[EvictionUnit]:
            return by_node.get(name, ())

    def pods_of(units: Sequence[EvictionUnit]) -> list[list[RunningPod]]:
        return [list(u.pods) for u in units]

    placements: dict[tuple[str, ...], Placement] = {}  # by the units evicted: the last one kept

    # A pod in no gang asking no GPU (whole, MIG or shared, counted or by DRA) fits on one node
    # exactly where the node takes pods and has the room, as kube-scheduler's
    # SelectVictimsOnNode checks it with the filter plugins: the placement search (GPU
    # packing, domains) has nothing to decide there, and the victim search asks it hundreds of
    # times per preemptor.
    plain = (
        lone is not None and not asks and capacity is None and not milli and _plain(lone, intent)
    )

    # Room alone decides (no inter-pod filter can change): a node's answer is kept between
    # calls while the node, its candidates (the same objects) and the pod's requests are.
    visits = units.visits if units is not None and plain and recheck in (None, passes) else None
    asked = tuple(sorted(lone.requests.items())) if lone is not None else ()

    def visit(here: Sequence[EvictionUnit], node: str) -> tuple[bool, object]:
        """Whether the pod has room on ``node`` with ``here`` gone, and :func:`_floor`."""
        assert lone is not None
        state = by_name[node]
        if visits is not None:
            hit = visits.get(node)
            if hit is not None and hit[0] is state and hit[1] is here and hit[2] == asked:
                return bool(hit[3]), hit[4]
        room = _room_on(state, here, lone)
        least = _floor(state, here, lone) if room else None
        if visits is not None and isinstance(here, tuple):  # (not a trial of fewer victims)
            visits[node] = (state, here, asked, room, least)
        return room, least

    def fits_on(units: Sequence[EvictionUnit], node: str) -> bool:
        if plain:
            assert lone is not None
            if recheck is None or recheck is passes:
                return visit(units, node)[0]
            return _room_on(by_name[node], units, lone) and (
                recheck(node, [p for u in units for p in u.pods]).is_success
            )
        return isinstance(attempt(pods_of(units), node), Placement)

    def floor_on(units: Sequence[EvictionUnit], node: str) -> tuple[int, EvictionCost] | None:
        assert lone is not None
        if recheck is None or recheck is passes:
            return cast(tuple[int, EvictionCost] | None, visit(units, node)[1])
        return _floor(by_name[node], units, lone)

    def fits(units: Sequence[EvictionUnit]) -> bool:
        if node_by_node:  # the units on some node make room there
            on = _by_node(units)
            return any(fits_on(on[n.name], n.name) for n in nodes if n.name in on)
        found = attempt(pods_of(units))
        if isinstance(found, Placement):
            placements.clear()
            placements[tuple(u.unit for u in units)] = found
            return True
        return False

    def counts_allow(units: Sequence[EvictionUnit]) -> bool:
        """Whether evicting ``units`` may make room, by free-GPU counts alone."""
        if not counted or layout is None:
            return True
        pods = [p for unit in pods_of(units) for p in unit]
        return may_fit(
            gpu_asks, nodes, intent=intent, layout=layout, gained=_gpus_freed(pods, room, shared)
        )

    floor = floor_on if plain and lone else None
    best = (
        _cheapest_node(preemptor[0], nodes, everywhere, eligible, fits_on, floor)
        if node_by_node
        else None
    )
    if best is None and lazy:
        found, usable, blocked = evictable()
    if best is None and (node_by_node or not fits(usable)):
        detail = "evicting every lower-priority pod would not make room"
        if node_by_node:
            detail = "evicting every lower-priority pod on any one node would not make room"
        if blocked and fits(found.units):
            names = sorted(set(blocked.values()))
            detail = "only evictions the PodDisruptionBudget(s) " + ", ".join(names)
            detail += " forbid would make room"
        elif found.protected and fits([*usable, *found.protected_units]):
            detail = "only evicting pods under their minimum runtime would make room: " + (
                "; ".join(found.protected[u.unit] for u in found.protected_units)
            )
        return Status.unschedulable("preemption cannot make room", detail=detail)

    on: str | None = None
    if best is not None:
        chosen, on = best
        final = attempt(pods_of(chosen), on)
    else:
        chosen = _fewest(usable, fits, counts_allow)
        final = placements.get(tuple(u.unit for u in chosen)) or attempt(pods_of(chosen))
    assert isinstance(final, Placement)
    victims = tuple(
        Victim(unit=u.unit, pods=u.keys, priority=u.priority, nodes=u.nodes, gang=u.cost.gangs > 0)
        for u in sorted(chosen, key=lambda u: (u.priority, u.unit))
    )
    evicted = {p for v in victims for p in v.pods}
    freed = sorted({h.key for h in room.freed_claims(evicted)})
    return PreemptionPlan(
        placement=final,
        nominated=final.assignments,
        victims=victims,
        claims=tuple(freed),
        share_gpus=_share_gpus(
            final, asks, nodes, [p for u in chosen for p in u.pods], room, shared
        ),
    )


def _plain(member: Member, intent: PlacementIntent | None) -> bool:
    """Whether placing ``member`` alone on a node is only the node's room: no GPU-like
    resource to pack, no intent that can refuse a node (one node's worth of any other)."""
    if any(
        k in (GPU, SHARE_MILLI) or k.startswith(MIG_RESOURCE_PREFIX)
        for k, v in member.requests.items()
        if v
    ):
        return False
    if intent is None:
        return True
    limits = intent.leaf_limits
    return (
        intent.gpu_count is None
        and intent.network_bandwidth_gbps is None
        and intent.slices is None
        and (limits is None or limits.max_nodes_per_leaf != 0)
    )


def _room_on(node: NodeState, units: Sequence[EvictionUnit], member: Member) -> bool:
    """Whether ``member`` has room on ``node`` once the pods of ``units`` there are gone."""
    if not node.schedulable:
        return False
    free = dict(node.free)
    for unit in units:
        for pod in unit.pods:
            if pod.node == node.name:
                add(free, pod.requests)
    return room_for(free, member.requests)


def _floor(
    node: NodeState, units: Sequence[EvictionUnit], member: Member
) -> tuple[int, EvictionCost] | None:
    """The least :func:`_cost` of victims among ``units`` that give ``member`` room on
    ``node`` (room alone, :func:`_room_on`'s rule): their highest priority is at least the
    lowest there, and they are at least as many units as the largest ones needed to cover
    each resource's shortfall. ``None`` when the member fits with no victim."""
    short = {
        k: v - node.free.get(k, 0) for k, v in member.requests.items() if v > node.free.get(k, 0)
    }
    if not short:
        return None
    count = 1
    for resource, missing in short.items():
        given = sorted(
            (
                sum(p.requests.get(resource, 0) for p in u.pods if p.node == node.name)
                for u in units
            ),
            reverse=True,
        )
        covered, needed = 0, 0
        for amount in given:
            if covered >= missing:
                break
            covered += amount
            needed += 1
        count = max(count, needed)
    return (min(u.priority for u in units), EvictionCost(0, count, 0.0))


FitFn = Callable[[Sequence[EvictionUnit]], bool]
#: Beyond this many candidates up to the deciding priority, only the shortest prefix is refined.
_POOL_LIMIT = 64


def _cost(units: Sequence[EvictionUnit]) -> tuple[int, EvictionCost]:
    total = ZERO_COST
    for u in units:
        total = total + u.cost
    return (max((u.priority for u in units), default=0), total)


def _cheapest_node(
    member: Member,
    nodes: Sequence[NodeState],
    units_on: Callable[[str], Sequence[EvictionUnit]],
    eligible: EligibleFn | None,
    fits_on: Callable[[Sequence[EvictionUnit], str], bool],
    floor: Callable[[Sequence[EvictionUnit], str], tuple[int, EvictionCost] | None] | None = None,
) -> tuple[list[EvictionUnit], str] | None:
    """kube-scheduler's DefaultPreemption, node by node: on each node the pod may use, every
    candidate there is removed and the pod must fit; then each is reprieved (highest priority
    first) if the pod still fits without evicting it. The node whose victims cost least, with
    them; None when no node can be made to fit. Nodes without a candidate are not tried: the
    pod failed there as things are. As kube, the search stops once it has found
    max(10 % of the nodes, 100) nodes that can be made to fit. ``units_on``: the usable
    candidates with a pod on a node, in preference order. ``floor``: the least the victims
    on a node could cost (``None``: unknown); a node whose floor is no cheaper than the best so
    far counts as found, and its victims are not worked out (it would lose, being later)."""
    enough = max(len(nodes) // 10, 100)
    found = 0
    best: tuple[tuple[int, EvictionCost], int, list[EvictionUnit], str] | None = None
    for position, node in enumerate(nodes):
        if found >= enough:
            break
        if eligible is not None and not eligible(member, node).is_success:
            continue
        here = units_on(node.name)
        if not here:
            continue
        name = node.name

        def fits(units: Sequence[EvictionUnit], name: str = name) -> bool:
            return fits_on(units, name)

        if not fits(here):
            continue
        found += 1
        least = floor(here, name) if floor is not None and best is not None else None
        if least is not None and best is not None and least >= best[0]:
            continue
        kept = _spare(here, sorted(here, key=lambda u: (-u.priority, -u.cost.pods, u.unit)), fits)
        cost = _cost(kept)
        if best is None or (cost, position) < (best[0], best[1]):
            best = (cost, position, kept, name)
    return None if best is None else (best[2], best[3])


def _by_node(units: Sequence[EvictionUnit]) -> dict[str, list[EvictionUnit]]:
    """Node → the units with a pod there (in ``units``' order)."""
    on: dict[str, list[EvictionUnit]] = {}
    for unit in units:
        for name in unit.nodes:
            on.setdefault(name, []).append(unit)
    return on


def _spare(
    units: Sequence[EvictionUnit], order: Sequence[EvictionUnit], fits: FitFn
) -> list[EvictionUnit]:
    """``units`` less every one (tried in ``order``) the others make room without."""
    chosen = list(units)
    for unit in order:
        trial = [u for u in chosen if u is not unit]
        if fits(trial):
            chosen = trial
    return chosen


def _fewest(
    usable: Sequence[EvictionUnit], fits: FitFn, counts_allow: FitFn | None = None
) -> list[EvictionUnit]:
    """The cheapest set of ``usable`` (lowest priority first, cheapest first; they all fit
    together) found: lowest highest priority, then fewest gangs, pods and GPU-seconds lost.
    ``counts_allow``: a cheap necessary condition of ``fits`` (free-GPU counts)."""
    # Shortest prefix that fits (fitting is monotone in the freed capacity).
    lo, hi = 0, len(usable)
    if counts_allow is not None:
        # No prefix shorter than the shortest the counts allow fits: search from there,
        # widening the step (the shortest that fits is mostly at or just past it).
        c_hi = hi
        while lo < c_hi:
            mid = (lo + c_hi) // 2
            if counts_allow(usable[:mid]):
                c_hi = mid
            else:
                lo = mid + 1
        step = 1
        while lo < hi:
            # (evicting nobody is tried last: the preemptor did not fit without evictions)
            probe = min(max(lo + step - 1, 1), hi - 1)
            if fits(usable[:probe]):
                hi = probe
                break
            lo = probe + 1
            step *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(usable[:mid]):
            hi = mid
        else:
            lo = mid + 1
    prefix = list(usable[:lo])
    if not prefix:
        return []

    def worth(units: Sequence[EvictionUnit]) -> bool:
        """``fits``, the counts asked first: sparing is tried once per unit, and the counts rule
        most trials out at a fraction of a placement's cost (a 500-member gang over 500 victim
        units: 500 placements of the gang otherwise)."""
        return (counts_allow is None or counts_allow(units)) and fits(units)

    tries = [
        _spare(prefix, sorted(prefix, key=lambda u: (-u.priority, -u.cost.pods, u.unit)), worth)
    ]
    # Every candidate at or below the priority the prefix needed may do instead of its cheap
    # ones (one large gang rather than two small ones): tried while they are few.
    level = prefix[-1].priority
    pool = [u for u in usable if u.priority <= level]
    if len(pool) <= _POOL_LIMIT:
        costly_first = sorted(
            pool,
            key=lambda u: (-u.priority, -u.cost.gangs, -u.cost.pods, -u.cost.gpu_seconds, u.unit),
        )
        small_first = sorted(pool, key=lambda u: (-u.priority, u.cost.pods, u.cost, u.unit))
        tries += [_spare(pool, costly_first, worth), _spare(pool, small_first, worth)]
    return min(tries, key=lambda t: (_cost(t), sorted(u.unit for u in t)))


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


__all__ = [
    "DisruptionBudget",
    "PreemptionPlan",
    "RunningPod",
    "Victim",
    "select_victims",
]
