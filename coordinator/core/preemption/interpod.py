"""The filters that depend on other pods, re-run with victims gone: what preemption must check
beyond free capacity (kube-scheduler's DefaultPreemption runs every filter with the victims
removed; these are the ones whose verdict a removal changes).

Evicting a pod changes more than the room on its node: a pod's topology spread counts the
matching pods in every domain, inter-pod (anti-)affinity looks for the pods a term matches, and
NodeVolumeLimits counts the volumes of the node's pods.
:func:`interpod_check` answers, for one pending pod, whether it passes ``PodTopologySpread``,
``InterPodAffinity`` and ``NodeVolumeLimits`` on a node once given pods are gone — run on a copy
of the snapshot with those pods removed, so the plugins' PreFilter state sees the removal.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection
from typing import Final

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.preemption.model import RunningPod
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status

__all__ = ["INTERPOD_FILTERS", "Recheck", "interpod_check", "passes"]

#: The filters whose verdict on a node depends on other pods.
INTERPOD_FILTERS: Final = frozenset({"PodTopologySpread", "InterPodAffinity", "NodeVolumeLimits"})

#: ``(node, pods gone) -> Status``: the pod's inter-pod filters on ``node`` once the pods are gone.
Recheck = Callable[[str, Collection[RunningPod]], Status]

_SUBSETS: weakref.WeakKeyDictionary[Framework, Framework | None] = weakref.WeakKeyDictionary()


def _interpod(framework: Framework) -> Framework | None:
    """The profile's inter-pod filters alone (same config), or None when it has none."""
    if framework not in _SUBSETS:
        chosen = [p for p in framework.filter if getattr(p, "name", "") in INTERPOD_FILTERS]
        _SUBSETS[framework] = Framework(framework.config, chosen) if chosen else None
    return _SUBSETS[framework]


def _concerned(pod: PodRequest, snapshot: Snapshot) -> bool:
    """Could removing pods change the pod's inter-pod verdicts? Only with a hard spread
    constraint, a required (anti-)affinity term, running pods' required anti-affinity, or
    volumes (a node's volume limit)."""
    return bool(
        pod.volume_claims
        or pod.inline_volumes
        or any(c.when_unsatisfiable == "DoNotSchedule" for c in pod.spread)
        or pod.pod_affinity
        or pod.pod_anti_affinity
        or snapshot.anti_affinity_terms()
    )


_PASS: Final = Status()


def passes(node: str, gone: Collection[RunningPod]) -> Status:
    """The check of a pod no removal can change: it passes everywhere."""
    return _PASS


def interpod_check(pod: PodRequest, snapshot: Snapshot, framework: Framework) -> Recheck:
    """The inter-pod filters of ``framework`` for ``pod`` on ``snapshot`` less the victims; one
    that passes everywhere when no removal can change them (the pod has no such constraint, or
    the profile runs neither filter). Read only: each check works on a copy of ``snapshot``."""
    subset = _interpod(framework)
    if subset is None or not _concerned(pod, snapshot):
        return passes

    def check(node: str, gone: Collection[RunningPod]) -> Status:
        trial = snapshot
        keys = {p.key for p in gone}
        if keys:
            trial = snapshot.copy()
            for name in {p.node for p in gone}:
                info = trial.get(name)
                if info is not None:
                    trial.replace(info.rebuild(p for p in info.pods if p.key not in keys))
        result = schedule_one(pod, trial, subset, candidate_nodes=(node,))
        if isinstance(result, Decision):
            return Status()
        found = result.statuses.get(node)
        if found is not None:
            return found
        return result.pod_status or Status.unschedulable(result.message)

    return check
