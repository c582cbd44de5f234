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

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Final, Protocol, runtime_checkable

from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.snapshot.volumes import VolumeWrites
from coordinator.core.status import SUCCESS, Status

__all__ = [
    "CLAIMS",
    "DRA_SERVED",
    "PLACEMENTS",
    "VOLUMES",
    "BatchScorePlugin",
    "CandidatesPlugin",
    "EpochPlugin",
    "FilterKeyPlugin",
    "FilterPlugin",
    "Learner",
    "NormalizeScorePlugin",
    "Plugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "Requeue",
    "RunningObserver",
    "ScorePlugin",
    "SharedScorePlugin",
    "pod_class_key",
]

#: Plugins that decide *where inside the node* put the placement for each feasible node here.
PLACEMENTS: Final = StateKey[dict[str, Placement]]("placements")
#: The DRA claims a pod gets on each feasible node, or how to make them (the cycle copies the
#: chosen node's into ``Decision.claims``: a plugin may leave the work to that one node).
CLAIMS: Final = StateKey[
    dict[str, tuple[ClaimAllocation, ...] | Callable[[], tuple[ClaimAllocation, ...]]]
]("claims")
#: Extended resources DRA serves for this pod where a node's allocatable lacks them (KEP-5004):
#: NodeResourcesFit and GpuTopology leave those to DRA. Part of the node-local memo key.
DRA_SERVED: Final = StateKey[frozenset[str]]("dra-served")
#: What binding the pod's WaitForFirstConsumer volumes to each feasible node writes (the cycle
#: copies the chosen node's into ``Decision.volumes``).
VOLUMES: Final = StateKey[dict[str, VolumeWrites]]("volumes")


class Requeue(StrEnum):
    """Which cluster changes may lift a plugin's refusal, so that the pods it refused go back to
    the queue only then (``QueuedPod.waits_for``)."""

    #: Any change (the default): pods bound or deleted, nodes added or changed.
    ANY = "any"
    #: Only a change of the node itself: its labels, taints, cordon.
    NODE = "node"
    #: DRA changes (claims, slices: devices freed) or a change of the node. A refusal of the
    #: pod itself (before any node is looked at) waits for its claims.
    DRA = "dra"


class Plugin:
    """What every plugin declares, as class attributes (the defaults promise nothing, so the
    framework shares nothing). The cycle's memo (:mod:`.memo`) trusts these promises: the oracle
    tests (tests/coordinator/core/test_sched_alike_nodes.py) check them against a cycle that
    shares nothing. An object that is not a ``Plugin`` (a user's scorer, a test's) is taken with
    the defaults."""

    name: str
    #: Its Filter and Score read only the node and :func:`pod_class_key` (and what its
    #: ``memo_epoch`` names, :class:`EpochPlugin`): the framework remembers its results per
    #: ``NodeInfo``.
    node_local: ClassVar[bool] = False
    #: A node-local plugin that reads nothing of a node but what ``NodeInfo.state_key`` stands
    #: for: nodes alike share its results (only when every node-local plugin says so).
    alike_nodes: ClassVar[bool] = False
    #: Adding pods to a node never lifts its refusals (they are kept on the node's next version).
    lasting_refusals: ClassVar[bool] = False
    #: A filter that judges a node without its capacity (labels, taints, cordon, health): gang
    #: planning runs these alone to find the nodes a gang may use at all.
    node_gate: ClassVar[bool] = False
    #: Which cluster changes may lift its refusals.
    requeue: ClassVar[Requeue] = Requeue.ANY


@runtime_checkable
class EpochPlugin(Protocol):
    """A node-local plugin whose results also follow state that changes between cycles, which
    ``memo_epoch(pod)`` names. A filter's *placement* may depend on it (its verdict must not): a
    remembered placement of another epoch is chosen again. A score-only plugin's score is
    remembered per epoch."""

    name: str

    def memo_epoch(self, pod: PodRequest) -> object: ...


@runtime_checkable
class FilterKeyPlugin(Protocol):
    """A node-local filter that names what it reads of a node: nodes with equal keys share its
    refusals (:class:`~.memo.Alike`)."""

    name: str

    def filter_key(self, node: NodeInfo) -> object: ...


@runtime_checkable
class SharedScorePlugin(Protocol):
    """A Score plugin that a pod may ask to be a given share (0–1) of a node's total, whatever
    the weights (an AgentPool's ``cacheAware.cacheHitWeight``): ``score_share(pod)``, ``None``
    for the profile's weight. The cycle gives a node ``share / (1 − share)`` × the points the
    other scorers gave it, times this plugin's score / 100."""

    name: str

    def score_share(self, pod: PodRequest) -> float | None: ...


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
class Learner(Protocol):
    """A plugin that learns from the pods it sees in its cycles (the shape mix): ``paused()``
    holds that learning while what-if cycles run, which must leave the scheduler as it was."""

    name: str

    def paused(self) -> AbstractContextManager[None]: ...


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
class VisitFirstPlugin(Protocol):
    """A plugin that names nodes the feasible-node search visits before the others, so that a
    cycle scoring a sample (``percentageOfNodesToScore``) sees them (``None``: kube-scheduler's
    order). Called after PreFilter, once per cycle; it changes which nodes are scored, never
    which are feasible."""

    name: str

    def visit_first(
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
    """kube's NormalizeScore over the scores of the feasible nodes, in their order: a list in,
    the normalised list out (no node names: none of these reads them, and a dict per cycle
    cost more than the normalising)."""

    name: str

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: Sequence[float]
    ) -> list[float]: ...


def pod_class_key(pod: PodRequest) -> tuple[object, ...]:
    """Everything about a pod a *node-local* plugin may read: two pods with equal keys get the
    same node-local verdicts and scores on the same NodeInfo. A plugin sets ``node_local = True``
    (:class:`Plugin`) only when its Filter and Score depend on nothing else, or on nothing else
    than what its ``memo_epoch(pod)`` names (:class:`EpochPlugin`)."""
    return (
        tuple(sorted(pod.requests.items())),
        pod.nonzero,
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
