"""Placement policies the simulator compares. Each is what the engine runs: a framework profile
(for every pod) and a gang planner (for every gang), so a baseline differs from Topos only there —
the queue, backoff, gang timeouts, preemption and binder are the engine's for all of them.

``topos``     the default profile (``schedule_one``) and whole-gang planning (``schedule_gang``:
              narrowest network domain, then every member confirmed by the per-pod core).
``spread``    what kube-scheduler does with the NVIDIA device plugin: the same filters for what
              Kubernetes knows (resources, node affinity, taints, unschedulable nodes), scored by
              LeastAllocated over cpu, memory and ``nvidia.com/gpu`` (the emptiest node wins),
              and inside the node the first free GPUs by index — no link or NUMA awareness.
``firstfit``  the same filters, no scoring: the first node in name order that fits, first free
              GPUs.

Both baselines place gangs all or nothing, member by member with their own rule (as the
Coscheduling plugin does on top of kube-scheduler), so the comparison is about *where*, not
about gang semantics. Their profiles are :mod:`coordinator.sim.baselines` (the one home of every
baseline).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from coordinator.core.framework.profile import Framework
from coordinator.core.gangs.cycle import GangPlanner, schedule_gang
from coordinator.core.preemption.defrag import DefragPlanner, plan_defrag
from coordinator.core.registry import build_framework
from coordinator.sim.baselines.perpod import baseline_framework, members_one_by_one

__all__ = ["POLICIES", "Policy", "make_policy"]


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    framework: Framework
    planner: GangPlanner
    mover: DefragPlanner = plan_defrag
    """Plans defragmentation's moves (when the engine's settings turn it on)."""


POLICIES: Final[Mapping[str, str]] = {
    "topos": "Topos (topology-aware core + whole-gang planning)",
    "spread": "kube-scheduler-like spread (LeastAllocated, first free GPUs)",
    "firstfit": "naive first-fit (first node that fits, first free GPUs)",
}


def make_policy(name: str) -> Policy:
    if name == "topos":
        return Policy(name, build_framework(), schedule_gang)
    if name in ("spread", "firstfit"):
        return Policy(name, baseline_framework(name), members_one_by_one)
    raise KeyError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
