"""One scheduling profile: its name, its plugin objects sorted by extension point, with their
score weights. A process serves several (:mod:`.profiles`), each under its own ``schedulerName``.

The framework never names a plugin: what it needs to know of one, the plugin declares (the
:class:`~.interfaces.Plugin` traits, the extension-point protocols), and
:func:`coordinator.core.registry.build_framework` turns plugin names into objects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol, cast

from common import podkeys
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.interfaces import (
    BatchScorePlugin,
    CandidatesPlugin,
    EpochPlugin,
    FilterPlugin,
    Learner,
    NormalizeScorePlugin,
    Plugin,
    PreFilterPlugin,
    PreScorePlugin,
    Requeue,
    RunningObserver,
    ScorePlugin,
    SharedScorePlugin,
    VisitFirstPlugin,
)
from coordinator.core.framework.memo import Alike
from coordinator.core.framework.results import Failure
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.podinfo import PodInfo

__all__ = ["Framework"]


class _Shared(SharedScorePlugin, ScorePlugin, Protocol):
    pass


class Framework:
    """Plugins of one profile, sorted by extension point, with their score weights."""

    def __init__(
        self,
        config: SchedulerConfig,
        plugins: Iterable[object],
        *,
        weights: Mapping[str, int] | None = None,
    ) -> None:
        """``weights`` by plugin name (none: the config's; a scorer named in neither: 1)."""
        self.config = config
        #: The ``schedulerName`` of the pods this profile schedules.
        self.name: str = config.scheduler_name or podkeys.SCHEDULER_NAME
        #: Where the next cycle starts looking when it stops early (kube-scheduler's rotating
        #: ``nextStartNodeIndex``): each cycle resumes after the nodes the last one visited, so
        #: every node gets its turn.
        self.next_start = 0
        # Memo keys: one small object per distinct pod class, hashed by identity, so a warm
        # cycle hashes the (large) class key once instead of once per node.
        self._interned: dict[object, object] = {}
        self.plugins: tuple[object, ...] = tuple(plugins)
        self.pre_filter: list[PreFilterPlugin] = []
        self.filter: list[FilterPlugin] = []
        #: Filters that name candidate nodes from an index (resolved once: a Protocol
        #: ``isinstance`` check is slow).
        self.candidates: list[CandidatesPlugin] = []
        self.pre_score: dict[str, PreScorePlugin] = {}
        #: Scorers that name nodes for the search to visit first (those with a weight above 0).
        self.visit_first: list[VisitFirstPlugin] = []
        self.score: list[tuple[ScorePlugin, float]] = []
        self.normalize: dict[str, NormalizeScorePlugin] = {}
        #: Plugins that score every feasible node in one call (not node-local ones only).
        self.batch_score: dict[str, BatchScorePlugin] = {}
        #: Node-local plugins whose results also depend on state that changes between cycles,
        #: which ``memo_epoch(pod)`` names. A filter's *placement* may depend on it (its verdict
        #: must not): a remembered placement of another epoch is chosen again. A score-only
        #: plugin's score is remembered per epoch.
        self.epoch_filters: list[FilterPlugin] = []
        self.score_epochs: dict[str, Callable[[PodRequest], object]] = {}
        #: Node-local results shared by nodes alike (see :mod:`.memo`): only when every
        #: node-local plugin declares ``alike_nodes = True``; ``None`` otherwise.
        self.alike: Alike | None = None
        for p in self.plugins:
            if isinstance(p, PreFilterPlugin):
                self.pre_filter.append(p)
            if isinstance(p, FilterPlugin):
                self.filter.append(p)
                if isinstance(p, CandidatesPlugin):
                    self.candidates.append(p)
            if isinstance(p, PreScorePlugin):
                self.pre_score[p.name] = p
            if isinstance(p, ScorePlugin):
                weight = (weights if weights is not None else config.weights).get(p.name, 1)
                if weight > 0:
                    self.score.append((p, weight))
                    if isinstance(p, VisitFirstPlugin):
                        self.visit_first.append(p)
            if isinstance(p, NormalizeScorePlugin):
                self.normalize[p.name] = p
            if isinstance(p, BatchScorePlugin) and not self.is_local(p):
                self.batch_score[p.name] = p
            if isinstance(p, EpochPlugin) and self.is_local(p):
                if isinstance(p, FilterPlugin):
                    self.epoch_filters.append(p)
                elif isinstance(p, ScorePlugin):
                    self.score_epochs[p.name] = p.memo_epoch
        #: A scorer a pod may give a share of a node's total (:class:`SharedScorePlugin`).
        self._shared: _Shared | None = None
        for p in self.plugins:
            if isinstance(p, SharedScorePlugin) and isinstance(p, ScorePlugin):
                self._shared = cast(_Shared, p)
                break
        shared = self._shared.name if self._shared is not None else None
        self._without_shared = [(p, w) for p, w in self.score if p.name != shared]
        #: What re-queues the pods each plugin refuses (:class:`~.interfaces.Requeue`).
        self.requeue: dict[str, Requeue] = {
            p.name: p.requeue for p in self.plugins if isinstance(p, Plugin)
        }
        #: The filters in their order, node-local ones and the others (resolved once: a cycle
        #: would otherwise ask every filter of every pod).
        self.local_filters: tuple[FilterPlugin, ...] = tuple(
            f for f in self.filter if self.is_local(f)
        )
        self.other_filters: tuple[FilterPlugin, ...] = tuple(
            f for f in self.filter if not self.is_local(f)
        )
        local = [p for p in self.plugins if self.is_local(p)]
        if all(isinstance(p, Plugin) and p.alike_nodes for p in local):
            self.alike = Alike.of([f for f in self.filter if self.is_local(f)])

    def scores_for(self, pod: PodRequest) -> Sequence[tuple[ScorePlugin, float]]:
        """The score plugins and weights for ``pod``: the profile's, without the scorer ``pod``
        gives a share of the total (which :meth:`score_share` adds)."""
        if self._shared is None or self._shared.score_share(pod) is None:
            return self.score
        return self._without_shared

    def score_share(self, pod: PodRequest) -> tuple[ScorePlugin, float] | None:
        """The scorer ``pod`` gives a share of a node's total, and that share (above 0): the
        cycle gives a node ``share / (1 − share)`` × the points the other scorers gave it, times
        the scorer's score / 100. ``None``: the profile's weights apply."""
        shared = self._shared
        if shared is None:
            return None
        share = shared.score_share(pod)
        if share is None or share <= 0:
            return None
        return shared, share

    def waits_for(self, failure: Failure) -> str:
        """Which cluster changes may help the pod ``failure`` is about (``QueuedPod.waits_for``),
        from what its refusers declare (:class:`~.interfaces.Requeue`): ``"claim"`` — any DRA
        change (a DRA plugin refused the pod before any node was looked at); ``"dra"`` —
        devices freed or nodes changed (a DRA plugin refused nodes the others refused only for
        what a node change alone lifts); ``"any"`` otherwise."""
        if failure.pod_status is not None:
            plugin = failure.pod_status.plugin
            return "claim" if self.requeue.get(plugin or "") is Requeue.DRA else "any"
        dra = False
        for status in failure.statuses.values():  # one per node: stop at the first "any"
            if status.is_rejection:
                kind = self.requeue.get(status.plugin or "", Requeue.ANY)
                if kind is Requeue.DRA:
                    dra = True
                elif kind is not Requeue.NODE:
                    return "any"
        return "dra" if dra else "any"

    def refused_by(self, failure: Failure) -> frozenset[str]:
        """The plugins that refused the pod ``failure`` is about whose refusal a change of pods
        may lift (:class:`~.interfaces.Requeue` ``ANY``; ``""`` for a refusal no plugin
        signed): what a pod's departure is checked against (``QueuedPod.refused_by``)."""
        if failure.pod_status is not None:
            names = {failure.pod_status.plugin or ""}
        else:
            names = {s.plugin or "" for s in failure.statuses.values() if s.is_rejection}
        return frozenset(n for n in names if self.requeue.get(n, Requeue.ANY) is Requeue.ANY)

    def observe_running(self, pods: Iterable[PodInfo]) -> None:
        """Hand the pods already running to the plugins that learn from them (the shape mix
        fragmentation scores against): at start and when the settings are reloaded."""
        observers = [p for p in self.plugins if isinstance(p, RunningObserver)]
        if observers:
            running = tuple(pods)
            for p in observers:
                p.observe_running(running)

    @contextlib.contextmanager
    def dry_run(self) -> Iterator[None]:
        """Cycles run inside leave the framework as they found it: the next cycle starts its
        node scan where it would have (``next_start``) and learning plugins learn nothing
        (:class:`~.interfaces.Learner`). What-if runs its cycles inside one."""
        start = self.next_start
        with contextlib.ExitStack() as stack:
            for p in self.plugins:
                if isinstance(p, Learner):
                    stack.enter_context(p.paused())
            try:
                yield
            finally:
                self.next_start = start

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
        (:func:`~.interfaces.pod_class_key`) — the framework memoises its results per NodeInfo.
        It says so with :attr:`~.interfaces.Plugin.node_local`."""
        return isinstance(plugin, Plugin) and plugin.node_local
