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

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, cast, runtime_checkable

from common import podkeys
from common.model import NodeTopology
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.status import SUCCESS, Code, Reason, Status, summarize
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.snapshot.devices import mig_device_id
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot

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
    "pod_class_key",
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
        # Memo keys: one small object per distinct pod class, hashed by identity, so a warm
        # cycle hashes the (large) class key once instead of once per node.
        self._interned: dict[object, object] = {}
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
        from coordinator.core.plugins import DEFAULT_PROFILE, default_registry

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

    def intern(self, key: object) -> object:
        """The framework's token for ``key`` (equal keys, same token; distinct per framework)."""
        token = self._interned.get(key)
        if token is None:
            if len(self._interned) > 10_000:
                self._interned.clear()
            token = self._interned[key] = object()
        return token

    @staticmethod
    def is_local(plugin: object) -> bool:
        """A plugin whose Filter and Score depend only on the node and the pod's class
        (:func:`pod_class_key`) — the framework memoises its results per NodeInfo. Set
        ``node_local = True`` on a plugin only when that holds."""
        return getattr(plugin, "node_local", False) is True

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


def pod_class_key(pod: PodRequest) -> tuple[object, ...]:
    """Everything about a pod a *node-local* plugin may read: two pods with equal keys get the
    same node-local verdicts and scores on the same NodeInfo."""
    return (
        tuple(sorted(pod.requests.items())),
        pod.gpus,
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


@dataclass(slots=True, eq=False)
class _Memo:
    """Node-local verdict, placement and raw scores of one pod class on one NodeInfo."""

    verdict: Status
    placement: Placement | None
    scores: dict[str, float]  # plugin → raw score
    sums: dict[object, float] = field(default_factory=dict)  # weighted local sums


_MEMO_LIMIT: Final = 64


class _Placements(dict[str, Placement]):
    """The cycle's placements: written by filters on memo misses, read through to the memo for
    nodes whose verdict was remembered (so a warm cycle never copies them)."""

    __slots__ = ("_key", "_snapshot")

    def __init__(self, snapshot: Snapshot, key: object) -> None:
        super().__init__()
        self._snapshot = snapshot
        self._key = key

    def _remembered(self, name: str) -> Placement | None:
        node = self._snapshot.get(name)
        entry = node.memo.get(self._key) if node is not None else None
        return entry.placement if isinstance(entry, _Memo) else None

    def __missing__(self, name: str) -> Placement:
        placement = self._remembered(name)
        if placement is None:
            raise KeyError(name)
        return placement

    def get(self, name: str, default: Placement | None = None) -> Placement | None:  # type: ignore[override]
        if name in self:
            return dict.__getitem__(self, name)
        placement = self._remembered(name)
        return default if placement is None else placement


def _cycle(
    pod: PodRequest,
    snapshot: Snapshot,
    nodes: Sequence[NodeInfo],
    fw: Framework,
    candidate_nodes: Collection[str] | None,
) -> ScheduleResult:
    state = CycleState()
    allowed: set[str] | None = set(candidate_nodes) if candidate_nodes is not None else None
    skipped: set[str] = set()
    # PreFilter may reject, skip, or narrow; the placements map must exist before it runs.
    local_names = tuple(f.name for f in fw.filter if fw.is_local(f))
    pending = _Placements(snapshot, None)
    state.write(PLACEMENTS, pending)
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
    local_filters = [f for f in fw.filter if f.name not in skipped and fw.is_local(f)]
    other_filters = [f for f in fw.filter if f.name not in skipped and not fw.is_local(f)]
    memo_key = fw.intern((pod_class_key(pod), tuple(n for n in local_names if n not in skipped)))
    placements = _Placements(snapshot, memo_key)
    state.write(PLACEMENTS, placements)

    # --- filtering: node-local verdicts from the memo, the rest per node -----------------------
    considered = [n for n in nodes if n.name in allowed] if allowed is not None else list(nodes)
    got: list[_Memo | None] = [n.memo.get(memo_key) for n in considered]  # type: ignore[misc]
    if None in got:
        for i, node in enumerate(considered):
            if got[i] is not None:
                continue
            verdict = SUCCESS
            for f in local_filters:
                status = f.filter(state, pod, node)
                if status is not SUCCESS and not status.is_success:
                    verdict = status.with_plugin(f.name)
                    break
            entry = _Memo(verdict, dict.get(placements, node.name), {})
            memo = node.memo
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[memo_key] = entry
            got[i] = entry
    entries_all = cast(list[_Memo], got)
    ok = [i for i, e in enumerate(entries_all) if e.verdict is SUCCESS]
    if other_filters:
        rejected: dict[int, Status] = {}
        still: list[int] = []
        for i in ok:
            node = considered[i]
            for f in other_filters:
                status = f.filter(state, pod, node)
                if status is not SUCCESS and not status.is_success:
                    rejected[i] = status.with_plugin(f.name)
                    break
            else:
                still.append(i)
        ok = still
    else:
        rejected = {}
    want = num_feasible_nodes_to_find(len(nodes), fw.config.percentage_of_nodes_to_score)
    if len(ok) > want:
        ok = ok[:want]  # kube's early stop: enough feasible nodes found
    feasible = [considered[i] for i in ok]
    entries = [entries_all[i] for i in ok]

    def statuses() -> dict[str, Status]:
        out: dict[str, Status] = {}
        if allowed is not None:
            not_candidate = Status.unresolvable(Reason.NOT_IN_CANDIDATES)
            out.update((n.name, not_candidate) for n in nodes if n.name not in allowed)
        for i, e in enumerate(entries_all):
            if e.verdict is not SUCCESS:
                out[considered[i].name] = e.verdict
        for i, st in rejected.items():
            out[considered[i].name] = st
        return out

    if not feasible:
        total = len(nodes)
        found = statuses()
        return Failure(pod.key, total, found, summarize(total, found))

    # --- scoring --------------------------------------------------------------------------
    # Node-local plugins without normalisation add up to one memoised sum per node; the others
    # (normalised or cluster-dependent) are computed per cycle.
    local: list[tuple[ScorePlugin, int]] = []
    cycle: list[tuple[str, int, dict[str, float]]] = []
    for plugin, weight in fw.score:
        name = plugin.name
        pre = fw.pre_score.get(name)
        if pre is not None:
            st = pre.pre_score(state, pod, feasible, snapshot)
            if st.is_skip:
                continue
            if not st.is_success:
                return _pod_rejected(pod.key, nodes, st.with_plugin(name))
        norm = fw.normalize.get(name)
        if fw.is_local(plugin) and norm is None:
            local.append((plugin, weight))
            continue
        scores: dict[str, float] = {}
        if fw.is_local(plugin):
            for node, entry in zip(feasible, entries, strict=True):
                scores[node.name] = _local_score(entry, plugin, state, pod, node)
        else:
            for node in feasible:
                scores[node.name] = plugin.score(state, pod, node)
        if norm is not None:
            norm.normalize_scores(state, pod, scores)
        cycle.append((name, weight, scores))

    sum_key = fw.intern(tuple(p.name for p, _ in local))
    sums: list[float | None] = [e.sums.get(sum_key) for e in entries]
    if None in sums:
        for i, (node, entry) in enumerate(zip(feasible, entries, strict=True)):
            if sums[i] is None:
                t = 0.0
                for plugin, weight in local:
                    t += weight * _local_score(entry, plugin, state, pod, node)
                entry.sums[sum_key] = sums[i] = t
    totals = cast(list[float], sums)
    for _, weight, scores in cycle:
        totals = [t + weight * scores[n.name] for t, n in zip(totals, feasible, strict=True)]

    top = max(totals)
    best_i = min((i for i, t in enumerate(totals) if t == top), key=lambda i: feasible[i].name)
    best = feasible[best_i]
    verdicts = _Verdicts(statuses, feasible, entries, local, cycle, totals)
    placement = placements.get(best.name) or Placement()
    return Decision(
        pod_key=pod.key,
        node=best.name,
        placement=placement,
        device_ids=_device_ids(best.topology, placement),
        score=totals[best_i],
        breakdown=verdicts.breakdown(best_i),
        verdicts=verdicts,
        evaluated=len(nodes),
        feasible=len(feasible),
        state=state,
    )


def _local_score(
    entry: _Memo, plugin: ScorePlugin, state: CycleState, pod: PodRequest, node: NodeInfo
) -> float:
    value = entry.scores.get(plugin.name)
    if value is None:
        value = entry.scores[plugin.name] = plugin.score(state, pod, node)
    return value


class _Verdicts(Mapping[str, NodeVerdict]):
    """Per-node verdicts of one cycle, built when asked for (explanations are rare; cycles
    are not)."""

    def __init__(
        self,
        statuses: Callable[[], dict[str, Status]],
        feasible: list[NodeInfo],
        entries: list[_Memo],
        local: list[tuple[ScorePlugin, int]],
        cycle: list[tuple[str, int, dict[str, float]]],
        totals: list[float],
    ) -> None:
        self._make_statuses = statuses
        self._statuses_cache: dict[str, Status] | None = None
        self._feasible_nodes = feasible
        self._index: dict[str, int] | None = None
        self._entries = entries
        self._local = local
        self._cycle = cycle
        self._totals = totals

    @property
    def _statuses(self) -> dict[str, Status]:
        if self._statuses_cache is None:
            self._statuses_cache = self._make_statuses()
        return self._statuses_cache

    @property
    def _names(self) -> list[str]:
        return [n.name for n in self._feasible_nodes]

    def breakdown(self, i: int) -> dict[str, float]:
        entry, name = self._entries[i], self._feasible_nodes[i].name
        out = {p.name: w * entry.scores[p.name] for p, w in self._local}
        out.update({plugin: w * scores[name] for plugin, w, scores in self._cycle})
        return out

    def __getitem__(self, name: str) -> NodeVerdict:
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self._names)}
        i = self._index.get(name)
        if i is not None:
            return NodeVerdict(SUCCESS, self.breakdown(i), self._totals[i])
        return NodeVerdict(self._statuses[name])

    def __iter__(self) -> Iterator[str]:
        yield from self._statuses
        yield from self._names

    def __len__(self) -> int:
        return len(self._statuses) + len(self._names)


def _device_ids(topology: NodeTopology | None, placement: Placement) -> tuple[str, ...]:
    if topology is None:
        return ()
    ids = [topology.gpus[i].uuid for i in placement.gpus]
    ids.extend(mig_device_id(topology, g, gi) for g, gi in placement.mig)
    return tuple(ids)
