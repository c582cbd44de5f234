"""Where the pods defragmentation moves would go: each through the scheduling framework's own
filters and scores (node affinity and selectors, taints, inter-pod affinity and anti-affinity,
topology spreading, NUMA and GPU policy, ports), on the cluster as it would be once the moves are
made — the moved pods gone, the waiting workload holding its room, the moved pods placed before
it in place. Pure: a snapshot, a framework and parsed pods in, destinations or a reason out.

A moved pod never counts its own node (it leaves it to free room there). A pod whose spec is not
known is not moved.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from coordinator.core.domains.capacity import GPU, add, fits, subtract
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.preemption.model import RunningPod
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot

__all__ = ["RelocateFn", "by_filters", "by_requests"]


class RelocateFn(Protocol):
    """``(moved pods, the waiting members' (member, node))`` → a node for each moved pod, in
    order (``(pod key, node)``), or why one of them fits nowhere. ``onto``: only these nodes
    may take them (``None``: any other than each pod's own)."""

    def __call__(
        self,
        moved: Sequence[RunningPod],
        assignments: Sequence[tuple[str, str]],
        onto: Collection[str] | None = None,
    ) -> list[tuple[str, str]] | str: ...


def _order(moved: Sequence[RunningPod]) -> list[RunningPod]:
    return sorted(moved, key=lambda p: (-p.requests.get(GPU, 0), p.key))


def by_requests(
    free: Mapping[str, Mapping[str, int]], members: Mapping[str, Mapping[str, int]]
) -> RelocateFn:
    """Resources only: each moved pod (largest first) onto the tightest node, other than its
    own, with room for all its requests once the moves are made and the members hold theirs.
    ``free``: each schedulable node's free resources now; ``members``: each waiting member's
    requests."""

    def relocate(
        moved: Sequence[RunningPod],
        assignments: Sequence[tuple[str, str]],
        onto: Collection[str] | None = None,
    ) -> list[tuple[str, str]] | str:
        room = {name: dict(r) for name, r in free.items()}
        for pod in moved:
            if pod.node in room:
                add(room[pod.node], pod.requests)
        for member, node in assignments:
            if node in room:
                subtract(room[node], members.get(member, {}))
        out: list[tuple[str, str]] = []
        for pod in _order(moved):
            spots = [
                (r.get(GPU, 0), name)
                for name, r in room.items()
                if name != pod.node and (onto is None or name in onto) and fits(r, pod.requests)
            ]
            if not spots:
                return f"{pod.key} would fit nowhere else once moved"
            _, name = min(spots)
            subtract(room[name], pod.requests)
            out.append((pod.key, name))
        return out

    return relocate


def by_filters(
    snapshot: Snapshot,
    framework: Framework,
    *,
    spec_of: Callable[[RunningPod], PodRequest | None],
    members: Mapping[str, PodRequest],
) -> RelocateFn:
    """Each moved pod (largest first) where a scheduling cycle would put it, on ``snapshot``
    (not changed) with the moved pods removed, the waiting ``members`` assumed on their nodes
    and the moved pods before it assumed where they go. ``spec_of``: a moved pod as its
    controller would recreate it (``None``: not known, and it is not moved); ``members``: the
    waiting members by name."""

    def relocate(
        moved: Sequence[RunningPod],
        assignments: Sequence[tuple[str, str]],
        onto: Collection[str] | None = None,
    ) -> list[tuple[str, str]] | str:
        view = snapshot.copy()
        gone = {p.key for p in moved}
        for name in sorted({p.node for p in moved}):
            node = view.get(name)
            if node is not None:
                view.replace(node.rebuild(q for q in node.pods if q.key not in gone))
        for member, name in assignments:
            ask = members.get(member)
            if ask is None or view.get(name) is None or view.is_assumed(ask.key):
                continue
            held = schedule_one(ask, view, framework, candidate_nodes=(name,))
            placement = held.placement if isinstance(held, Decision) else Placement()
            view.assume(ask, name, placement)
        out: list[tuple[str, str]] = []
        for pod in _order(moved):
            spec = spec_of(pod)
            if spec is None:
                return f"{pod.key} would be moved, but its spec is not known"
            others = [n for n in view.node_names() if n != pod.node and (onto is None or n in onto)]
            result = schedule_one(spec, view, framework, candidate_nodes=others)
            if not isinstance(result, Decision):
                return f"{pod.key} would fit nowhere else once moved: {result.message}"
            view.assume(spec, result.node, result.placement, result.claims)
            out.append((pod.key, result.node))
        return out

    return relocate
