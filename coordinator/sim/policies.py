"""Placement policies the simulator compares, all on the scheduling core's ``Snapshot``.

``topos``     the real core: ``schedule_one`` with the default profile for single pods, and
              whole-gang planning (``schedule_gang``: narrowest network domain, then every member
              confirmed by the per-pod core) for gangs.
``spread``    what kube-scheduler does with the NVIDIA device plugin: the same filters for what
              Kubernetes knows (resources, node affinity, taints, unschedulable nodes), scored by
              LeastAllocated over cpu, memory and ``nvidia.com/gpu`` (the emptiest node wins),
              and inside the node the first free GPUs by index — no link or NUMA awareness.
``firstfit``  the same filters, no scoring: the first node in name order that fits, first free
              GPUs.

Both baselines place gangs all or nothing, member by member with their own rule (as the
Coscheduling plugin does on top of kube-scheduler), so the comparison is about *where*, not
about gang semantics. Their profiles are :mod:`coordinator.sim.baselines` (the one home of every
baseline), run by the same ``schedule_one``; only GPU choice and scoring differ from Topos.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.gangs.cycle import schedule_gang
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from coordinator.sim.baselines.perpod import baseline_framework

__all__ = [
    "POLICIES",
    "Policy",
    "Slot",
    "make_policy",
]


@dataclass(frozen=True, slots=True)
class Slot:
    """One pod's place: node and what it holds there."""

    pod: PodRequest
    node: str
    placement: Placement
    claims: tuple[ClaimAllocation, ...] = ()  # DRA claims allocated for it


class Policy(Protocol):
    name: str

    def place(self, pods: Sequence[PodRequest], snapshot: Snapshot) -> list[Slot] | str:
        """Where every pod of one job goes (all or nothing), or why it does not fit now.
        Must not change ``snapshot``."""
        ...


class _PerPod:
    """Single pods through ``schedule_one``; gangs member by member on a copy, all or nothing."""

    def __init__(self, name: str, framework: Framework) -> None:
        self.name = name
        self.framework = framework

    def place(self, pods: Sequence[PodRequest], snapshot: Snapshot) -> list[Slot] | str:
        if len(pods) == 1:
            result = schedule_one(pods[0], snapshot, self.framework)
            if isinstance(result, Decision):
                return [Slot(pods[0], result.node, result.placement, result.claims)]
            return result.message
        trial = snapshot.copy()
        slots: list[Slot] = []
        for pod in pods:
            result = schedule_one(pod, trial, self.framework)
            if not isinstance(result, Decision):
                return f"{len(slots)}/{len(pods)} members placed; {result.message}"
            trial.assume(pod, result.node, result.placement, result.claims)
            slots.append(Slot(pod, result.node, result.placement, result.claims))
        return slots


class ToposPolicy(_PerPod):
    def __init__(self, framework: Framework | None = None) -> None:
        super().__init__("topos", framework or build_framework())

    def place(self, pods: Sequence[PodRequest], snapshot: Snapshot) -> list[Slot] | str:
        if len(pods) == 1:
            return super().place(pods, snapshot)
        result = schedule_gang(pods, snapshot, self.framework, min_member=len(pods))
        if isinstance(result, Status):
            return result.message
        by_key = {p.key: p for p in pods}
        return [Slot(by_key[d.pod_key], d.node, d.placement, d.claims) for d in result.decisions]


POLICIES: Final[Mapping[str, str]] = {
    "topos": "Topos (topology-aware core + whole-gang planning)",
    "spread": "kube-scheduler-like spread (LeastAllocated, first free GPUs)",
    "firstfit": "naive first-fit (first node that fits, first free GPUs)",
}


def make_policy(name: str) -> Policy:
    if name == "topos":
        return ToposPolicy()
    if name in ("spread", "firstfit"):
        return _PerPod(name, baseline_framework(name))
    raise KeyError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
