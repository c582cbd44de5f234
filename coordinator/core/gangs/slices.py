"""A gang's slices, from its members' slice keys and labels, for the planner
(:class:`~coordinator.core.domains.slices.SliceSpec`); and the domains other workloads hold
exclusively, which a gang must keep out of.

Which slice a member is in:

- JobSet exclusive topology: its child Job (``jobset.sigs.k8s.io/replicatedjob-name`` and
  ``…/job-index``, else ``…/job-key``); ``topos.io/slice-size`` on such pods is the room each Job
  needs (JobSet creates a Job's followers only once its leader is scheduled);
- LWS subgroup exclusive topology: its subgroup (``leaderworkerset.sigs.k8s.io/subgroup-index``;
  a leader excluded from the subgroups is in none);
- a slice size (Topos, Kueue): its rank divided by the size, the rank read from
  ``batch.kubernetes.io/job-completion-index`` or ``leaderworkerset.sigs.k8s.io/worker-index``
  (within its JobSet child Job, as Kueue slices a JobSet), else its place in name order.

A Workload-API PodGroup's topology constraint (``spec.schedulingConstraints.topology[0].key``)
becomes its members' group level (:func:`with_gang_topology`) where they write none of their own.

A slice size that does not divide the group, a level no node carries, and members that disagree
are refused with the key and the value named; the other gangs are planned as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Final, cast

from common import podkeys
from coordinator.core.domains.capacity import NodeState
from coordinator.core.domains.layout import DomainKeys, natural_key
from coordinator.core.domains.slices import HOSTNAME, SliceSpec, domain_of
from coordinator.core.plugins.groupspread import group_of
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.slicekeys import SliceAsk
from coordinator.core.podspec.workloadgangs import (
    JOB_COMPLETION_INDEX,
    JOBSET_REPLICATED_JOB,
    JOBSET_UID,
    LWS_WORKER_INDEX,
)
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status

__all__ = [
    "HELD_ELSEWHERE",
    "group_domain",
    "held_domains",
    "resolve_level",
    "slice_spec",
    "with_gang_topology",
]

JOB_KEY: Final = "jobset.sigs.k8s.io/job-key"
JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
LWS_GROUP_KEY: Final = "leaderworkerset.sigs.k8s.io/group-key"
LWS_SUBGROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/subgroup-index"
HELD_ELSEWHERE: Final = "node(s) were in a topology domain another workload holds exclusively"

_WORKLOAD_LABELS: Final = (JOBSET_UID, LWS_GROUP_KEY)


def resolve_level(level: str, keys: DomainKeys) -> str:
    """A level name (``hostname``, ``node``, ``leaf``, ``spine``, ``zone``) as its node label
    key; a label key as itself."""
    return {
        "hostname": HOSTNAME,
        "node": HOSTNAME,
        "leaf": keys.leaf,
        "spine": keys.spine,
        "zone": keys.zone,
    }.get(level, level)


def with_gang_topology(
    pods: Sequence[PodRequest], level: str | None, written: str
) -> list[PodRequest]:
    """``pods`` with ``level`` (a node label key the group asks for, e.g. its PodGroup's topology
    constraint, named ``written`` in messages) as their required group level; a pod that writes
    a group level of its own (``topos.io/gang-topology`` and its aliases) keeps its own."""
    if level is None:
        return list(pods)
    return [
        p
        if p.slices is not None and p.slices.gang_level is not None
        else replace(
            p,
            slices=replace(
                p.slices or SliceAsk(), gang_level=level, gang_level_key=written, gang_required=True
            ),
        )
        for p in pods
    ]


def group_domain(
    pod: PodRequest,
    topology: str | None,
    topology_written: str,
    keys: DomainKeys,
    placed: Iterable[Mapping[str, str]],
) -> tuple[str, str, str] | None:
    """Where a member of a group already placed must go: ``(label, value, written)`` when the
    group asks to stay in one domain — ``pod``'s required group level, else ``topology`` (its
    PodGroup's constraint, named ``topology_written``) — and its placed members' nodes
    (``placed``: their labels) are all in one domain of that level, as kube-scheduler's
    TopologyPlacement keeps them; ``None`` when nothing narrows it (no level, a preferred one,
    no member placed, members in several domains or on nodes without the label)."""
    ask = pod.slices
    if ask is not None and ask.gang_level is not None:
        if not ask.gang_required:
            return None
        label, written = resolve_level(ask.gang_level, keys), _written(ask.gang_level_key)
    elif topology is not None:
        label, written = topology, topology_written
    else:
        return None
    values = {labels.get(label) for labels in placed}
    if len(values) != 1:
        return None
    (value,) = values
    return None if value is None else (label, value, written)


def _written(key: str) -> str:
    """How a message names where a level was written: an annotation key, or an object's field
    (a phrase with spaces, e.g. a PodGroup's topology constraint)."""
    return key if " " in key else f"annotation {key}"


def _marks(namespace: str, labels: Mapping[str, str]) -> set[tuple[str, str, str]]:
    """What ties a pod to its workload: its gang name, its JobSet, its LWS group."""
    out = {(namespace, k, labels[k]) for k in _WORKLOAD_LABELS if k in labels}
    group = group_of(labels)
    if group is not None:
        out.add((namespace, "gang", group))
    return out


def _job(labels: Mapping[str, str]) -> str | None:
    rj, idx = labels.get(JOBSET_REPLICATED_JOB), labels.get(JOB_INDEX)
    if rj is not None and idx is not None:
        return f"{rj}-{idx}"
    key = labels.get(JOB_KEY)
    return key[:12] if key else None


def _rank(labels: Mapping[str, str]) -> int | None:
    for key in (JOB_COMPLETION_INDEX, LWS_WORKER_INDEX):
        text = labels.get(key, "")
        if text.isdigit():
            return int(text)
    return None


def _slice_id(ask: SliceAsk, labels: Mapping[str, str]) -> str | None:
    """The slice a pod is in by its labels alone (``None``: in none, or only by position)."""
    if ask.unit == "job":
        return _job(labels)
    if ask.unit == "subgroup":
        idx = labels.get(LWS_SUBGROUP_INDEX)
        return None if idx is None else f"subgroup-{idx}"
    rank = _rank(labels)
    if rank is None or ask.size is None:
        return None
    job = _job(labels)
    return f"{job}/{rank // ask.size}" if job else str(rank // ask.size)


def _describe(ask: SliceAsk) -> str:
    parts = []
    if ask.size is not None:
        parts.append(f"{ask.size_key}={ask.size}")
    if ask.level is not None:
        parts.append(f"{ask.level_key}={ask.level}")
    if ask.gang_level is not None:
        parts.append(f"{ask.gang_level_key}={ask.gang_level}")
    return ", ".join(parts) or "none"


def _same(a: SliceAsk, b: SliceAsk) -> bool:
    return (a.size, a.level, a.unit, a.exclusive, a.gang_level, a.gang_exclusive) == (
        b.size,
        b.level,
        b.unit,
        b.exclusive,
        b.gang_level,
        b.gang_exclusive,
    )


def slice_spec(
    pods: Sequence[PodRequest],
    snapshot: Snapshot,
    nodes: Sequence[NodeState],
    *,
    keys: DomainKeys,
) -> SliceSpec | Status | None:
    """The slices of the gang ``pods`` are (those being placed), or a Status naming the key and
    the value that cannot be used; ``None`` when no member writes slice keys."""
    asked = [(p, p.slices) for p in pods if p.slices is not None]
    if not asked:
        return None
    first, ask = asked[0]
    for pod, other in asked[1:]:
        if not _same(other, ask):
            return Status.unresolvable(
                f"members of the pod group disagree on slice keys: {first.name} has "
                f"{_describe(ask)}, {pod.name} has {_describe(other)}"
            )
    level = None if ask.level is None else resolve_level(ask.level, keys)
    gang_level = None if ask.gang_level is None else resolve_level(ask.gang_level, keys)
    for written, value, label in (
        (ask.level_key, ask.level, level),
        (ask.gang_level_key, ask.gang_level, gang_level),
    ):
        if label is not None and label != HOSTNAME and not any(label in n.labels for n in nodes):
            return Status.unresolvable(
                f"{_written(written)}={value!r}: no node carries the label {label!r}"
            )
    blocked, pinned, gang_blocked, running = _held(pods, snapshot, nodes, ask, level, gang_level)
    total_running = sum(running.values())
    slice_of: dict[str, str] = {}
    room: dict[str, int] = {}
    if level is not None:
        unranked = []
        for pod, _ in asked:
            sid = _slice_id(ask, pod.labels)
            if sid is not None:
                slice_of[pod.key] = sid
            elif ask.unit is None:
                unranked.append(pod)
        if ask.unit is None and ask.size is not None:
            declared = first.gang.min_member if first.gang is not None else None
            total = declared or len(asked) + total_running  # a PodGroup's: those there are
            if total % ask.size:
                return Status.unresolvable(
                    f"annotation {ask.size_key}={str(ask.size)!r}: a slice size of {ask.size} "
                    f"does not divide the pod group's {total} members"
                )
            unranked.sort(key=lambda p: natural_key(p.name))
            for i, pod in enumerate(unranked):
                slice_of[pod.key] = f"{i // ask.size}"
        if ask.size is not None:  # the room of a slice's pods not running yet
            room = {sid: ask.size - running.get(sid, 0) for sid in set(slice_of.values())}
    return SliceSpec(
        level=level,
        exclusive=ask.exclusive,
        slice_of=slice_of,
        room=room,
        blocked=blocked,
        pinned=pinned,
        gang_level=gang_level,
        gang_required=ask.gang_required,
        gang_exclusive=ask.gang_exclusive,
        gang_blocked=frozenset(gang_blocked),
        gang_room=max(0, (ask.group_size or 0) - total_running),
        shown=_describe(ask),
    )


def _foreign(pod: PodInfo) -> bool:
    """A pod that takes a domain from an exclusive slice: one asking for GPUs or belonging to a
    workload of its own (CPU-only pods without one, such as node agents, do not)."""
    return (
        pod.requests.get(podkeys.GPU_RESOURCE, 0) > 0
        or group_of(pod.labels) is not None
        or any(k in pod.labels for k in _WORKLOAD_LABELS)
    )


def _held(
    pods: Sequence[PodRequest],
    snapshot: Snapshot,
    nodes: Sequence[NodeState],
    ask: SliceAsk,
    level: str | None,
    gang_level: str | None,
) -> tuple[dict[str, str], dict[str, str], set[str], dict[str, int]]:
    """Domains already used: by other workloads (``""``) or by a slice of this group (its id),
    the domain each running slice of this group is in, the group-level domains others use, and
    how many pods of this group run (or are assumed) per slice (``""``: in no slice known)."""
    keys = {p.key for p in pods}
    ours = set().union(*(_marks(p.namespace, p.labels) for p in pods))
    by_name = {n.name: n for n in nodes}
    blocked: dict[str, str] = {}
    pinned: dict[str, str] = {}
    gang_blocked: set[str] = set()
    running: dict[str, int] = {}
    for info in snapshot.nodes:
        state = by_name.get(info.name)
        if state is None or not info.pods:
            continue
        value = None if level is None else domain_of(state, level)
        gang_value = None if gang_level is None else domain_of(state, gang_level)
        for q in info.pods:
            if q.key in keys:
                continue
            if _marks(q.namespace, q.labels) & ours:
                sid = _slice_id(ask, q.labels)
                running[sid or ""] = running.get(sid or "", 0) + 1
                if value is not None and sid is not None:
                    blocked.setdefault(value, sid)
                    pinned.setdefault(sid, value)
            elif _foreign(q):
                if value is not None and ask.exclusive:
                    blocked[value] = ""
                if gang_value is not None and ask.gang_exclusive:
                    gang_blocked.add(gang_value)
    return blocked, pinned, gang_blocked, running


#: ``NodeInfo.memo`` key of the node's pods holding a domain exclusively (a NodeInfo never
#: changes): every gang attempt asks, and on most nodes there are none.
_EXCLUSIVE: Final = object()


def _holders(info: NodeInfo) -> tuple[PodInfo, ...]:
    """The node's pods whose slice keys make a domain theirs alone."""
    found = info.memo.get(_EXCLUSIVE)
    if found is None:
        found = info.memo[_EXCLUSIVE] = tuple(
            q
            for q in info.pods
            if q.slices is not None and (q.slices.exclusive or q.slices.gang_exclusive)
        )
    return cast(tuple[PodInfo, ...], found)


def held_domains(
    pods: Sequence[PodRequest], snapshot: Snapshot, nodes: Iterable[NodeState], keys: DomainKeys
) -> set[str]:
    """Nodes inside a domain another workload's running (or assumed) pods hold exclusively (an
    exclusive slice's or group's domain): the gang ``pods`` keeps out of them."""
    found = [(info, holders) for info in snapshot.nodes if (holders := _holders(info))]
    if not found:
        return set()
    pod_keys = {p.key for p in pods}
    ours = set().union(*(_marks(p.namespace, p.labels) for p in pods))
    node_list = list(nodes)
    by_name = {n.name: n for n in node_list}
    held: set[tuple[str, str]] = set()  # (label key, value)
    for info, holders in found:
        state = by_name.get(info.name)
        if state is None:
            continue
        for q in holders:
            ask = q.slices
            if ask is None or q.key in pod_keys or _marks(q.namespace, q.labels) & ours:
                continue
            for written, exclusive in (
                (ask.level, ask.exclusive),
                (ask.gang_level, ask.gang_exclusive),
            ):
                if written is None or not exclusive:
                    continue
                label = resolve_level(written, keys)
                value = domain_of(state, label)
                if value is not None:
                    held.add((label, value))
    if not held:
        return set()
    labels = {label for label, _ in held}
    return {
        n.name for n in node_list if any((label, domain_of(n, label)) in held for label in labels)
    }
