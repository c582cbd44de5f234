"""The scheduling framework: extension points, the plugin registry, and one scheduling cycle.

A plugin is any object with a ``name`` and the methods of the extension points it takes part in
(one small ``Protocol`` each, as in kube-scheduler):

``PreFilter``  once per pod: compute per-cycle state, reject the pod outright, answer ``Skip``
               (nothing to check, its Filter is not run), or restrict the candidate nodes.
``Filter``     per node: can the pod go there? A :class:`~.status.Status`, never an exception.
``PreScore``   once over the feasible nodes (``Skip``: this plugin does not score this pod).
``Score``      per feasible node, 0–100 (or raw, when the plugin also normalises).
``NormalizeScore`` rescale one plugin's raw scores over all feasible nodes to 0–100.
``Reserve`` / ``Unreserve`` and ``Permit``  after a decision, before binding — gangs use these
               to hold capacity and to say ``Wait`` until enough members have reservations.

Adding a plugin is one module and one registry line; see ``docs/scheduling.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

from common import podkeys
from common.model import NodeTopology

from .config import SchedulerConfig
from .cyclestate import CycleState, StateKey
from .nodeinfo import NodeInfo, Placement, Snapshot, mig_device_id
from .podspec import PodRequest, PodSpecError, parse_pod
from .status import SUCCESS, Code, Reason, Status, summarize

__all__ = [
    "PLACEMENTS",
    "Decision",
    "Failure",
    "FilterPlugin",
    "Framework",
    "NodeVerdict",
    "NormalizeScorePlugin",
    "PermitPlugin",
    "PreFilterPlugin",
    "PreFilterResult",
    "PreScorePlugin",
    "Registry",
    "ReservePlugin",
    "ScheduleResult",
    "ScorePlugin",
    "num_feasible_nodes_to_find",
    "schedule_one",
]

MAX_NODE_SCORE: Final = 100

#: Plugins that decide *where inside the node* put the placement for each feasible node here.
PLACEMENTS: Final = StateKey[dict[str, Placement]]("placements")


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
class FilterPlugin(Protocol):
    name: str

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status: ...


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
class NormalizeScorePlugin(Protocol):
    name: str

    def normalize_scores(
        self, state: CycleState, pod: PodRequest, scores: dict[str, float]
    ) -> None: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, state: CycleState, pod: PodRequest, decision: Decision) -> Status: ...

    def unreserve(self, state: CycleState, pod: PodRequest, decision: Decision) -> None: ...


@runtime_checkable
class PermitPlugin(Protocol):
    name: str

    def permit(self, state: CycleState, pod: PodRequest, decision: Decision) -> Status: ...


#: name → factory; a factory gets the scheduler config and returns the plugin object.
Registry = Mapping[str, Callable[[SchedulerConfig], object]]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """What the cycle concluded about one node (for explanations)."""

    status: Status
    scores: Mapping[str, float] = field(default_factory=dict)  # plugin → weighted score
    total: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    pod_key: str
    node: str
    placement: Placement
    device_ids: tuple[str, ...]  # GPU UUIDs, then MIG device ids
    score: float
    breakdown: Mapping[str, float]  # plugin → weighted score on the chosen node
    verdicts: Mapping[str, NodeVerdict]  # every node evaluated this cycle
    evaluated: int
    feasible: int
    state: CycleState = field(repr=False, compare=False, default_factory=CycleState)

    @property
    def numa(self) -> tuple[int, ...]:
        return self.placement.numa

    def annotations(self) -> dict[str, str]:
        """The ``topos.io/assigned-*`` annotations to write on the pod before binding."""
        return {
            podkeys.ASSIGNED_GPUS: ",".join(self.device_ids),
            podkeys.ASSIGNED_NUMA: ",".join(str(n) for n in self.placement.numa),
            podkeys.PLACEMENT_SCORE: f"{self.score:.1f}",
        }


@dataclass(frozen=True, slots=True)
class Failure:
    pod_key: str
    total_nodes: int
    statuses: Mapping[str, Status]  # node → why not
    message: str  # kube-scheduler style: "0/12 nodes are available: …"
    pod_status: Status | None = None  # set when the pod itself was rejected (bad spec, gang…)

    @property
    def unresolvable(self) -> bool:
        """No preemption could help: every node said UnschedulableAndUnresolvable."""
        if self.pod_status is not None:
            return self.pod_status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        return all(s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for s in self.statuses.values())

    @property
    def verdicts(self) -> Mapping[str, NodeVerdict]:
        return {name: NodeVerdict(status) for name, status in self.statuses.items()}


ScheduleResult = Decision | Failure


def num_feasible_nodes_to_find(total: int, percentage: int) -> int:
    """kube-scheduler's rule for how many feasible nodes are enough to stop filtering."""
    if total < 100 or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(5, 50 - total // 125)
    return max(100, total * percentage // 100)


class Framework:
    """Plugins of one profile, sorted by extension point, with their score weights."""

    def __init__(self, config: SchedulerConfig, plugins: Iterable[object]) -> None:
        self.config = config
        self.plugins: tuple[object, ...] = tuple(plugins)
        self.pre_filter: list[PreFilterPlugin] = []
        self.filter: list[FilterPlugin] = []
        self.pre_score: dict[str, PreScorePlugin] = {}
        self.score: list[tuple[ScorePlugin, int]] = []
        self.normalize: dict[str, NormalizeScorePlugin] = {}
        self.reserve: list[ReservePlugin] = []
        self.permit: list[PermitPlugin] = []
        for p in self.plugins:
            if isinstance(p, PreFilterPlugin):
                self.pre_filter.append(p)
            if isinstance(p, FilterPlugin):
                self.filter.append(p)
            if isinstance(p, PreScorePlugin):
                self.pre_score[p.name] = p
            if isinstance(p, ScorePlugin):
                weight = config.weights.for_plugin(p.name)
                if weight > 0:
                    self.score.append((p, weight))
            if isinstance(p, NormalizeScorePlugin):
                self.normalize[p.name] = p
            if isinstance(p, ReservePlugin):
                self.reserve.append(p)
            if isinstance(p, PermitPlugin):
                self.permit.append(p)

    @classmethod
    def build(
        cls,
        config: SchedulerConfig | None = None,
        *,
        registry: Registry | None = None,
        profile: Sequence[str] | None = None,
    ) -> Framework:
        """Instantiate the profile's plugins (default: every registered one, minus those the
        config disables, plus those it enables) from the registry."""
        from .plugins import DEFAULT_PROFILE, default_registry

        config = config or SchedulerConfig()
        reg: dict[str, Callable[[SchedulerConfig], object]] = dict(default_registry())
        if registry:
            reg.update(registry)
        names = list(profile if profile is not None else DEFAULT_PROFILE)
        names.extend(n for n in config.enabled_plugins if n not in names)
        plugins = []
        for name in names:
            if name in config.disabled_plugins:
                continue
            factory = reg.get(name)
            if factory is None:
                raise KeyError(f"plugin {name!r} is not registered")
            plugins.append(factory(config))
        return cls(config, plugins)

    # --- after a decision ------------------------------------------------------------------
    def run_reserve(self, pod: PodRequest, decision: Decision) -> Status:
        """Reserve in order; on the first failure unreserve those already done, in reverse."""
        done: list[ReservePlugin] = []
        for p in self.reserve:
            status = p.reserve(decision.state, pod, decision)
            if not status.is_success:
                for q in reversed(done):
                    q.unreserve(decision.state, pod, decision)
                return status.with_plugin(p.name)
            done.append(p)
        return SUCCESS

    def run_unreserve(self, pod: PodRequest, decision: Decision) -> None:
        for p in reversed(self.reserve):
            p.unreserve(decision.state, pod, decision)

    def run_permit(self, pod: PodRequest, decision: Decision) -> Status:
        """Success, Wait (hold the reservation) or a rejection; the first non-success wins."""
        waiting: Status | None = None
        for p in self.permit:
            status = p.permit(decision.state, pod, decision).with_plugin(p.name)
            if status.is_rejection or status.code is Code.ERROR:
                return status
            if status.code is Code.WAIT:
                waiting = waiting or status
        return waiting or SUCCESS


def schedule_one(
    pod: PodRequest | PodSpecError | Mapping[str, object],
    snapshot: Snapshot,
    framework: Framework,
    *,
    candidate_nodes: Collection[str] | None = None,
) -> ScheduleResult:
    """One scheduling cycle: filter every node, score the feasible ones, pick the best.

    ``pod`` may be a Pod object (parsed here), a parsed request, or a parse error (reported).
    ``candidate_nodes`` restricts the nodes considered (network domains, gang members); the
    others are reported as not among the candidates. Pure: the snapshot is not changed —
    call :meth:`Snapshot.assume` with the decision to hold its capacity.
    """
    if isinstance(pod, Mapping):
        pod = parse_pod(pod)
    nodes = snapshot.nodes
    total = len(nodes)
    if isinstance(pod, PodSpecError):
        return _pod_rejected(pod.pod_key, nodes, pod.status)
    try:
        return _cycle(pod, snapshot, nodes, framework, candidate_nodes)
    except Exception as exc:  # a bug in a plugin must not take the scheduler down
        status = Status.error(f"{type(exc).__name__}: {exc}")
        return Failure(
            pod.key,
            total,
            {},
            f"0/{total} nodes are available: internal error: {type(exc).__name__}: {exc}.",
            status,
        )


def _pod_rejected(pod_key: str, nodes: Sequence[NodeInfo], status: Status) -> Failure:
    total = len(nodes)
    return Failure(
        pod_key,
        total,
        {n.name: status for n in nodes},
        f"0/{total} nodes are available: {status.message}.",
        status,
    )


def _cycle(
    pod: PodRequest,
    snapshot: Snapshot,
    nodes: Sequence[NodeInfo],
    fw: Framework,
    candidate_nodes: Collection[str] | None,
) -> ScheduleResult:
    state = CycleState()
    state.write(PLACEMENTS, {})
    allowed: set[str] | None = set(candidate_nodes) if candidate_nodes is not None else None
    filters: list[FilterPlugin] = []
    skipped: set[str] = set()
    for p in fw.pre_filter:
        result = p.pre_filter(state, pod, snapshot)
        status = result.status if isinstance(result, PreFilterResult) else result
        if status.is_skip:
            skipped.add(p.name)
            continue
        if not status.is_success:
            return _pod_rejected(pod.key, nodes, status.with_plugin(p.name))
        if isinstance(result, PreFilterResult) and result.node_names is not None:
            allowed = set(result.node_names) if allowed is None else allowed & result.node_names
    filters = [f for f in fw.filter if f.name not in skipped]

    statuses: dict[str, Status] = {}
    feasible: list[NodeInfo] = []
    want = num_feasible_nodes_to_find(len(nodes), fw.config.percentage_of_nodes_to_score)
    not_candidate = Status.unresolvable(Reason.NOT_IN_CANDIDATES)
    for node in nodes:
        if allowed is not None and node.name not in allowed:
            statuses[node.name] = not_candidate
            continue
        verdict = SUCCESS
        for f in filters:
            status = f.filter(state, pod, node)
            if status is not SUCCESS and not status.is_success:
                verdict = status.with_plugin(f.name)
                break
        if verdict is SUCCESS:
            feasible.append(node)
            if len(feasible) >= want:
                break
        else:
            statuses[node.name] = verdict

    if not feasible:
        total = len(nodes)
        return Failure(pod.key, total, statuses, summarize(total, statuses))

    # --- scoring --------------------------------------------------------------------------
    per_plugin: list[tuple[str, int, dict[str, float]]] = []
    if len(feasible) > 1 or fw.config.percentage_of_nodes_to_score >= 0:
        for plugin, weight in fw.score:
            pre = fw.pre_score.get(plugin.name)
            if pre is not None:
                st = pre.pre_score(state, pod, feasible, snapshot)
                if st.is_skip:
                    continue
                if not st.is_success:
                    return _pod_rejected(pod.key, nodes, st.with_plugin(plugin.name))
            scores = {n.name: plugin.score(state, pod, n) for n in feasible}
            norm = fw.normalize.get(plugin.name)
            if norm is not None:
                norm.normalize_scores(state, pod, scores)
            per_plugin.append((plugin.name, weight, scores))

    best: NodeInfo | None = None
    best_total = -math.inf
    totals: dict[str, float] = {}
    for node in feasible:
        t = 0.0
        for _, weight, scores in per_plugin:
            t += weight * scores[node.name]
        totals[node.name] = t
        if t > best_total or (t == best_total and best is not None and node.name < best.name):
            best, best_total = node, t
    assert best is not None

    verdicts: dict[str, NodeVerdict] = {name: NodeVerdict(s) for name, s in statuses.items()}
    for node in feasible:
        verdicts[node.name] = NodeVerdict(
            SUCCESS,
            {name: weight * scores[node.name] for name, weight, scores in per_plugin},
            totals[node.name],
        )
    placement = state.read(PLACEMENTS).get(best.name, Placement())
    return Decision(
        pod_key=pod.key,
        node=best.name,
        placement=placement,
        device_ids=_device_ids(best.topology, placement),
        score=best_total,
        breakdown=verdicts[best.name].scores,
        verdicts=verdicts,
        evaluated=len(statuses) + len(feasible),
        feasible=len(feasible),
        state=state,
    )


def _device_ids(topology: NodeTopology | None, placement: Placement) -> tuple[str, ...]:
    if topology is None:
        return ()
    ids = [topology.gpus[i].uuid for i in placement.gpus]
    ids.extend(mig_device_id(topology, g, gi) for g, gi in placement.mig)
    return tuple(ids)
