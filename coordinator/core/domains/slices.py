"""Multi-level slices and exclusive domains: slices of k members, each packed inside one domain of
one level (a node label's value: a node, an NVLink domain, a leaf, a block), the whole group inside
one domain of another.

A :class:`SliceSpec` rides on the placement intent (``PlacementIntent.slices``; the gang planner,
:mod:`coordinator.core.gangs.slices`, builds it from the pods' keys). The network rules of
:mod:`.select` are unchanged — node, leaf, fewest leaves of one spine, zone, cluster — but every
tier's packing goes through :func:`fill_slices`: each slice (biggest first) takes the first
domain, in the tier's node order, that holds all of it (and the room of its members not created
yet); an exclusive slice takes a domain no other workload uses and no other slice took. Members
in no slice, and the room of a group whose pods are not all created yet, are packed after the
slices on what is left. When a slice fits nowhere the miss is kept (:class:`SliceMiss`) and the
refusal names the slice and the nearest room.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.layout import natural_key

if TYPE_CHECKING:
    from coordinator.core.domains.packing import Member, Packing

__all__ = [
    "HOSTNAME",
    "SliceMiss",
    "SliceNeed",
    "SliceSpec",
    "could_hold",
    "domain_of",
    "fill_slices",
    "phantoms",
    "slice_needs",
]

HOSTNAME: Final = "kubernetes.io/hostname"


def domain_of(node: NodeState, level: str) -> str | None:
    """The node's domain at ``level`` (a label key): the label's value; a node's hostname is its
    name when the label is missing."""
    value = node.labels.get(level)
    if value is None and level == HOSTNAME:
        return node.name
    return value or None


@dataclass(frozen=True, slots=True, kw_only=True)
class SliceSpec:
    """How a group's members fall into slices and where slices and group may go."""

    level: str | None = None  # label key each slice stays inside; None: no slices
    exclusive: bool = False  # a slice's domain is its own
    slice_of: Mapping[str, str] = field(default_factory=dict)  # member → slice id
    room: Mapping[str, int] = field(default_factory=dict)  # slice id → pods it will have
    # Domains of ``level`` a slice may not take: value → the slice of this group holding it, or
    # "" for other workloads' pods (exclusive slices only).
    blocked: Mapping[str, str] = field(default_factory=dict)
    # slice id → the domain its running members are in: its new members go there too
    pinned: Mapping[str, str] = field(default_factory=dict)
    gang_level: str | None = None  # label key the whole group stays inside
    gang_required: bool = True
    gang_exclusive: bool = False
    gang_blocked: frozenset[str] = frozenset()  # domains of gang_level other workloads use
    gang_room: int = 0  # pods the whole group will have (0: those being placed)
    shown: str = ""  # the keys as the pods wrote them, for explanations

    @property
    def sliced(self) -> bool:
        return self.level is not None and bool(self.slice_of)


@dataclass(frozen=True, slots=True)
class SliceMiss:
    """A slice that fit in no domain of its level, and the domain that came nearest."""

    slice: str
    pods: int
    level: str
    nearest: str | None  # the domain holding the most of its pods
    fitted: int  # how many of its pods the nearest domain holds
    domains: int  # domains tried

    @property
    def message(self) -> str:
        head = f"slice {self.slice} ({self.pods} pods) fits in no {self.level} domain"
        if self.nearest is None:
            return f"{head}: no free domain of that level among the {self.domains} candidates"
        return (
            f"{head}: the nearest room, {self.level}={self.nearest}, holds {self.fitted} of "
            f"its {self.pods} pods ({self.domains} domains tried)"
        )


def phantoms(like: Member, count: int, tag: str) -> list[Member]:
    """Room for ``count`` members not created yet, shaped like ``like`` (never assigned)."""
    return [replace(like, name=f"\0{tag}-{i}", shape=like.shape_key) for i in range(count)]


def fill_slices(
    ctx: Packing, node_order: Sequence[str], *, spread: bool = False
) -> dict[str, str] | None:
    """Pack the members onto ``node_order`` slice by slice (see the module's doc); ``None`` when
    a slice or the rest does not fit. Phantom room is checked, never returned."""
    spec = ctx.intent.slices
    assert spec is not None
    free: dict[str, dict[str, int]] = {}
    out: dict[str, str] = {}
    taken: set[str] = set()
    if spec.sliced and spec.level is not None:
        level = spec.level
        domains: dict[str, list[str]] = {}
        for n in node_order:
            value = domain_of(ctx.nodes[n], level)
            if value is not None:
                domains.setdefault(value, []).append(n)
        groups: dict[str, list[Member]] = {}
        for m in ctx.order:
            sid = spec.slice_of.get(m.name)
            if sid is not None:
                groups.setdefault(sid, []).append(m)
        # Room only shrinks during a fill: a domain that could not hold a slice cannot hold an
        # equal one later (same shapes), so it is not tried again.
        failed: dict[tuple[str, ...], set[str]] = {}
        for sid in sorted(groups, key=lambda s: (-_room(spec, s, groups[s]), natural_key(s))):
            members = groups[sid]
            want = members + phantoms(members[0], _room(spec, sid, members) - len(members), sid)
            signature = tuple(sorted(m.shape_key for m in want))
            tried = failed.setdefault(signature, set())
            nearest: tuple[int, str | None] = (-1, None)
            placed = False
            need = sum(m.requests.get(GPU, 0) for m in want)
            each = max(1, max(m.requests.get(GPU, 0) for m in want))
            for value, names in domains.items():
                if value in taken or value in tried or spec.pinned.get(sid, value) != value:
                    continue
                holder = spec.blocked.get(value)
                if spec.exclusive and holder is not None and holder != sid:
                    continue
                have = sum(max(0, (free.get(n) or ctx.nodes[n].free).get(GPU, 0)) for n in names)
                if have < need:  # too few GPUs: how many of its pods they could hold, at most
                    tried.add(value)
                    if min(len(want) - 1, have // each) > nearest[0]:
                        nearest = (min(len(want) - 1, have // each), value)
                    continue
                trial: dict[str, dict[str, int]] = {}
                used = ctx.fill_members(want, names, spread=spread, free=trial, base=free)
                if len(used) == len(want):
                    free.update(trial)
                    out.update((k, v) for k, v in used.items() if not k.startswith("\0"))
                    if spec.exclusive:
                        taken.add(value)
                    placed = True
                    break
                tried.add(value)
                if len(used) > nearest[0]:
                    nearest = (len(used), value)
            if not placed:
                ctx.slice_miss = SliceMiss(
                    sid, len(want), level, nearest[1], max(0, nearest[0]), len(domains)
                )
                return None
    rest = [m for m in ctx.order if m.name not in out]
    if spec.gang_room > len(ctx.members) and ctx.order:
        rest += phantoms(ctx.order[0], spec.gang_room - len(ctx.members), "group")
    if not rest:
        return out
    order = node_order
    if taken and spec.level is not None:
        level = spec.level
        order = [n for n in node_order if domain_of(ctx.nodes[n], level) not in taken]
    used = ctx.fill_members(rest, order, spread=spread, free=free)
    if len(used) < len(rest):
        return None
    out.update((k, v) for k, v in used.items() if not k.startswith("\0"))
    return out


@dataclass(frozen=True, slots=True, order=True)
class SliceNeed:
    """What one slice needs: its GPUs (room included), its id, its pods, GPUs per pod."""

    gpus: int
    slice: str
    pods: int
    each: int


def slice_needs(members: Sequence[Member], spec: SliceSpec) -> list[SliceNeed]:
    """The slices' needs, the smallest first."""
    groups: dict[str, list[Member]] = {}
    for m in members:
        sid = spec.slice_of.get(m.name)
        if sid is not None:
            groups.setdefault(sid, []).append(m)
    out = []
    for sid, group in groups.items():
        pods = _room(spec, sid, group)
        each = max(m.requests.get(GPU, 0) for m in group)
        gpus = sum(m.requests.get(GPU, 0) for m in group) + (pods - len(group)) * each
        out.append(SliceNeed(gpus, sid, pods, each))
    return sorted(out, key=lambda n: (n.gpus, natural_key(n.slice)))


def could_hold(ctx: Packing, names: Sequence[str]) -> bool:
    """A cheap necessary condition: enough domains of the slices' level among ``names`` have the
    GPUs a slice needs (each a slice of its own when exclusive). When they do not, the miss is
    kept for the refusal, as :func:`fill_slices` keeps one."""
    spec = ctx.intent.slices
    needs = ctx.slice_needs
    if spec is None or spec.level is None or not needs or needs[0].gpus <= 0:
        return True
    level, smallest = spec.level, needs[0].gpus
    # An exclusive slice cannot take a domain another workload or another slice holds; one its
    # own running members hold (a JobSet Job's leader, placed before its followers) it can.
    ours = {need.slice for need in needs}
    room: dict[str, int] = {}
    for n in names:
        value = domain_of(ctx.nodes[n], level)
        holder = spec.blocked.get(value) if spec.exclusive and value is not None else None
        if value is not None and (holder is None or holder in ours):
            room[value] = room.get(value, 0) + max(0, ctx.nodes[n].free.get(GPU, 0))
    if spec.exclusive:
        held = sum(1 for r in room.values() if r >= smallest)
    else:
        held = sum(r // smallest for r in room.values())
    if held >= len(needs):
        return True
    short = needs[held]
    nearest = min(
        (v for v in room if room[v] < short.gpus),
        key=lambda v: (-room[v], natural_key(v)),
        default=None,
    )
    fitted = 0 if nearest is None else min(short.pods - 1, room[nearest] // max(1, short.each))
    ctx.slice_miss = SliceMiss(short.slice, short.pods, level, nearest, fitted, len(room))
    return False


def _room(spec: SliceSpec, sid: str, members: Sequence[Member]) -> int:
    return max(len(members), spec.room.get(sid, 0))


def slice_note(
    spec: SliceSpec, assignments: Sequence[tuple[str, str]], nodes: Mapping[str, NodeState]
) -> str:
    """One line for the explanation: how many slices, inside what, exclusive or not."""
    parts: list[str] = []
    if spec.sliced and spec.level is not None:
        level = spec.level
        used = {
            spec.slice_of[name]: domain_of(nodes[node], level)
            for name, node in assignments
            if name in spec.slice_of
        }
        kind = "its own" if spec.exclusive else "one"
        parts.append(
            f"{len(used)} slice{'s' * (len(used) != 1)}, each inside {kind} {level} domain"
            f" ({len(set(used.values()))} domains)"
        )
    if spec.gang_level is not None:
        values = {domain_of(nodes[node], spec.gang_level) for _, node in assignments}
        where = ", ".join(sorted(str(v) for v in values))
        parts.append(f"group inside {spec.gang_level}={where}")
    if spec.shown:
        parts.append(f"from {spec.shown}")
    return "; ".join(parts)


def gang_domains(ctx: Packing, scope: set[str], spec: SliceSpec) -> list[tuple[str, set[str]]]:
    """The domains of the group's level inside ``scope``, in the strategy's order (best fit
    first for ``balanced``, roomiest first otherwise), without those other workloads use when
    the group's domain is to be its own."""
    level = spec.gang_level
    assert level is not None
    groups: dict[str, set[str]] = {}
    # NVLink cliques: only the trusted ones (a malformed or degraded tray is in none)
    trusted = ctx.layout.clique_of if level == ctx.layout.keys.clique else None
    for n in scope:
        value = domain_of(ctx.nodes[n], level) if trusted is None else trusted.get(n)
        if value is not None and not (spec.gang_exclusive and value in spec.gang_blocked):
            groups.setdefault(value, set()).add(n)
    sign = 1 if ctx.intent.strategy.value == "balanced" else -1
    return sorted(
        groups.items(),
        key=lambda kv: (sign * ctx.free_sum(kv[1]).get(GPU, 0), natural_key(kv[0])),
    )
