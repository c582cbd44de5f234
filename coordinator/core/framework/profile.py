"""One scheduling profile: its plugin objects sorted by extension point, with their score weights.

The framework never names a plugin: :func:`coordinator.core.registry.build_framework` turns
plugin names into objects and hands them to :class:`Framework`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.interfaces import (
    BatchScorePlugin,
    CandidatesPlugin,
    FilterPlugin,
    NormalizeScorePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    RunningObserver,
    ScorePlugin,
)
from coordinator.core.framework.memo import Alike
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.podinfo import PodInfo

__all__ = ["Framework"]

_MODEL_CACHE = "ModelCache"


class Framework:
    """Plugins of one profile, sorted by extension point, with their score weights."""

    def __init__(self, config: SchedulerConfig, plugins: Iterable[object]) -> None:
        self.config = config
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
        self.score: list[tuple[ScorePlugin, float]] = []
        #: The same plugins with the AgentPool profile's weights (``agentPools``).
        self.pool_score: list[tuple[ScorePlugin, float]] = []
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
                weight = config.weight_of(p.name)
                if weight > 0:
                    self.score.append((p, weight))
                weight = config.weight_of(p.name, pool=True)
                if weight > 0:
                    self.pool_score.append((p, weight))
            if isinstance(p, NormalizeScorePlugin):
                self.normalize[p.name] = p
            if isinstance(p, BatchScorePlugin) and not self.is_local(p):
                self.batch_score[p.name] = p
            epoch = getattr(p, "memo_epoch", None)
            if callable(epoch) and self.is_local(p):
                if isinstance(p, FilterPlugin):
                    self.epoch_filters.append(p)
                elif isinstance(p, ScorePlugin):
                    self.score_epochs[p.name] = epoch
        self._without_cache = [(p, w) for p, w in self.pool_score if p.name != _MODEL_CACHE]
        self._cache = next(
            (p for p in self.plugins if isinstance(p, ScorePlugin) and p.name == _MODEL_CACHE),
            None,
        )
        local = [p for p in self.plugins if self.is_local(p)]
        if all(getattr(p, "alike_nodes", False) is True for p in local):
            self.alike = Alike.of([f for f in self.filter if self.is_local(f)])

    def scores_for(self, pod: PodRequest) -> Sequence[tuple[ScorePlugin, float]]:
        """The score plugins and weights for ``pod``: an AgentPool pod gets the pool profile;
        with a ``cacheHitWeight`` without ModelCache, which :meth:`cache_share` adds."""
        pool = pod.pool
        if pool is None:
            return self.score
        if pool.cache_hit_weight is None:
            return self.pool_score
        return self._without_cache

    def cache_share(self, pod: PodRequest) -> tuple[ScorePlugin, float] | None:
        """ModelCache and the share of a node's score it is to be for ``pod`` (its pool's
        ``cacheHitWeight``, above 0): the cycle gives a node holding the model
        ``share / (1 − share)`` × the points the other scorers gave it, so the cache is that
        share of the node's total. ``None``: the profile's weights apply."""
        pool = pod.pool
        share = pool.cache_hit_weight if pool is not None else None
        if share is None or share <= 0 or self._cache is None:
            return None
        return self._cache, share

    def observe_running(self, pods: Iterable[PodInfo]) -> None:
        """Hand the pods already running to the plugins that learn from them (the shape mix
        fragmentation scores against): at start and when the settings are reloaded."""
        observers = [p for p in self.plugins if isinstance(p, RunningObserver)]
        if observers:
            running = tuple(pods)
            for p in observers:
                p.observe_running(running)

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
        Set ``node_local = True`` on a plugin only when that holds."""
        return getattr(plugin, "node_local", False) is True
