"""What a plugin implements: one small ``Protocol`` per extension point, as in kube-scheduler.

A plugin is any object with a ``name`` and the methods of the extension points it takes part in:

``PreFilter``  once per pod: compute per-cycle state, reject the pod outright, answer ``Skip``
               (nothing to check, its Filter is not run), or restrict the candidate nodes.
``Filter``     per node: can the pod go there? A :class:`~.status.Status`, never an exception.
               A filter may also offer ``candidates``: a superset of the nodes it can pass
               (from an index), which the cycle visits first — the others only when none fit.
``PreScore``   once over the feasible nodes (``Skip``: this plugin does not score this pod).
``Score``      per feasible node, 0–100 (or raw, when the plugin also normalises). A plugin that
               is not node-local may also score all feasible nodes in one call
               (``score_nodes``), which the cycle then uses instead.
``NormalizeScore`` rescale one plugin's raw scores over all feasible nodes to 0–100.

Outside the cycle, a plugin that learns from the cluster's pods may take ``observe_running``:
the pods already running, handed over when the scheduler starts or its settings are reloaded.

There is no Reserve or Permit point: gangs are planned whole before the per-pod cycle (see
docs/gangs.md), so nothing holds capacity between a decision and its bind. Plugins import this
module, never the cycle or the registry.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SUCCESS, Status

__all__ = [
    "CLAIMS",
    "DRA_SERVED",
    "PLACEMENTS",
    "BatchScorePlugin",
    "CandidatesPlugin",
    "FilterPlugin",
    "NormalizeScorePlugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "RunningObserver",
    "ScorePlugin",
    "pod_class_key",
]

#: Plugins that decide *where inside the node* put the placement for each feasible node here.
PLACEMENTS: Final = StateKey[dict[str, Placement]]("placements")
#: The DRA claims a pod gets on each feasible node (the cycle copies the chosen node's into
#: ``Decision.claims``).
CLAIMS: Final = StateKey[dict[str, tuple[ClaimAllocation, ...]]]("claims")
#: Extended resources DRA serves for this pod where a node's allocatable lacks them (KEP-5004):
#: NodeResourcesFit and GpuTopology leave those to DRA. Part of the node-local memo key.
DRA_SERVED: Final = StateKey[frozenset[str]]("dra-served")


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """A PreFilter verdict that also narrows the nodes worth filtering (``None``: all)."""

    status: Status = SUCCESS
    node_names: frozenset[str] | None = None


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(
        self, state: CycleState, pod: PodRequest, snapshot: Snapshot
    ) -> Status | PreFilterResult: ...


@runtime_checkable
class RunningObserver(Protocol):
    name: str

    def observe_running(self, pods: Sequence[PodInfo]) -> None: ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status: ...


@runtime_checkable
class CandidatesPlugin(Protocol):
    """A Filter that can name, without visiting every node, a superset of the nodes it passes
    (``None``: no useful narrowing). Called after PreFilter, once per cycle. An answer that is a
    ``Sequence`` must list the names in the snapshot's order (other collections are sorted)."""

    name: str

    def candidates(
        self, state: CycleState, pod: PodRequest, snapshot: Snapshot
    ) -> Collection[str] | None: ...


@runtime_checkable
class PreScorePlugin(Protocol):
    name: str

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float: ...


@runtime_checkable
class BatchScorePlugin(Protocol):
    """A Score plugin that scores many nodes in one call: the same values ``score`` gives each
    node, in the order of ``nodes`` (for plugins whose per-node score is a lookup in what
    PreScore worked out, where one call per node would cost more than the lookup)."""

    name: str

    def score_nodes(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo]
    ) -> list[float]: ...


@runtime_checkable
class NormalizeScorePlugin(Protocol):
    name: str

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: dict[str, float]
    ) -> None: ...


def pod_class_key(pod: PodRequest) -> tuple[object, ...]:
    """Everything about a pod a *node-local* plugin may read: two pods with equal keys get the
    same node-local verdicts and scores on the same NodeInfo. A plugin sets ``node_local = True``
    only when its Filter and Score depend on nothing else, or on nothing else than what its
    ``memo_epoch(pod)`` names (:class:`~.profile.Framework`)."""
    return (
        tuple(sorted(pod.requests.items())),
        pod.gpus,
        pod.share,
        pod.mig,
        pod.gpu_memory_min_mib,
        pod.gpu_locality,
        pod.numa_policy,
        pod.numa_resources,
        pod.node_selector,
        pod.node_affinity,
        pod.tolerations,
        pod.host_ports,
    )
