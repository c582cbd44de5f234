"""Pods a queueing system admitted are not Topos's to preempt.

Kueue admits a workload against its ClusterQueue's quota and evicts whole workloads to reclaim
quota or for a higher-priority workload (its preemption between workloads and queues). A pod of
an admitted workload carries ``kueue.x-k8s.io/podset`` (Kueue writes it into the pod template when
it starts the Job, JobSet, LWS…) or ``kueue.x-k8s.io/managed: "true"`` (plain pods and pod
groups). Were Topos to evict such a pod for a higher-priority pod, its Job would recreate it
while Kueue still counts the workload's quota as in use, and the two would fight over the same
GPUs; so Topos never picks one as a victim. A Kueue-admitted pod may still preempt pods Kueue
does not manage (lower priority, as always): Kueue's quota said it may run, Topos makes the room.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

PODSET_LABEL: Final = "kueue.x-k8s.io/podset"
MANAGED_LABEL: Final = "kueue.x-k8s.io/managed"


def admitted_by_queue(labels: Mapping[str, str]) -> bool:
    """The pod belongs to a workload Kueue admitted (Kueue's, not Topos's, to evict)."""
    return PODSET_LABEL in labels or labels.get(MANAGED_LABEL) == "true"
