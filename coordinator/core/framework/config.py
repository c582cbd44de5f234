"""A profile's settings, typed: which plugins run, how much each score counts, their arguments.

The core never reads a file: :mod:`coordinator.app.config.scheduling` turns the ``scheduling``
section (and the seeds' configuration objects) into a :class:`SchedulerConfig`; tests and the
simulator build one directly. Weights and arguments are keyed by plugin name; a plugin not named
takes the defaults its declaration gives (:mod:`coordinator.core.registry`). A plugin reads only
its own arguments, never this object. The reasons behind each default are in
``docs/scheduling.md``; which setting is a plugin's, a profile's or the process's is in
docs/architecture.md#profiles.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Final

from common import podkeys
from coordinator.core.framework.config_errors import ConfigError
from coordinator.core.framework.prices import PriceTable

__all__ = [
    "ConfigError",
    "CustomScorer",
    "FastScheduling",
    "ProcessSettings",
    "SchedulerConfig",
    "TopologyConstraints",
    "num_feasible_nodes_to_find",
    "unknown_plugin",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyConstraints:
    """Seed 003/004's ``topologyConstraints``: the most nodes and GPUs one gang (or placed
    workload) may take in a single leaf; ``None``: no limit."""

    max_nodes_per_leaf: int | None = None
    max_gpus_per_leaf: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FastScheduling:
    """NeuroNetes' fast path: score at most ``max_nodes_to_score`` feasible nodes (an absolute
    count, unlike the percentage), whatever the cluster's size."""

    enabled: bool = False
    max_nodes_to_score: int = 50

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError("fastScheduling.enabled: must be true or false")
        n = self.max_nodes_to_score
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(
                "fastScheduling.maxNodesToScore: must be a whole number of at least 1"
            )


@dataclass(frozen=True, slots=True)
class CustomScorer:
    """A user's Score plugin (``customScorers``), its factory already found and tried."""

    name: str
    source: str  # "module pkg.mod:Attr" or "entry point x", for messages
    factory: Callable[..., object] = field(compare=False)
    weight: int = 1
    args: Mapping[str, object] = field(default_factory=dict, compare=False)

    def build(self) -> object:
        """A fresh plugin object (the factory was tried once when the config was read)."""
        plugin = self.factory(**self.args)
        plugin.name = self.name  # type: ignore[attr-defined]
        return plugin


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessSettings:
    """What one process holds once for all its profiles: set at the top of the ``scheduling``
    section, never by a profile entry (``profiles[i]`` takes no such key)."""

    #: How fast a failure's weight halves in the one ``DomainHistory`` (HistoricalPerformance).
    history_half_life_s: float = 600.0
    #: What nodes cost (``prices``): CostEfficiency and the AgentPool controller read it.
    prices: PriceTable = field(default_factory=PriceTable)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    """One profile, and (on the first) what the process holds once for all of them."""

    #: Score weights by plugin name (0–100); a scorer not named keeps its declared default.
    weights: Mapping[str, int] = field(default_factory=dict)
    #: Each plugin's arguments by plugin name (an object of the type its declaration names);
    #: a plugin not named takes that type's defaults.
    args: Mapping[str, object] = field(default_factory=dict)
    #: Stop filtering once this share of nodes was found feasible (kube-scheduler's option).
    #: 0 (the default) is kube's adaptive rule; 100 evaluates and scores every node.
    percentage_of_nodes_to_score: int = 0
    #: An absolute cap on the feasible nodes scored, when enabled (on top of the percentage).
    fast_scheduling: FastScheduling = field(default_factory=FastScheduling)
    #: Plugin names removed from the default profile.
    disabled_plugins: frozenset[str] = frozenset()
    #: Extra plugin names (registered by other packages) added to the profile, in order.
    enabled_plugins: tuple[str, ...] = ()
    #: ``schedulerName`` of a KubeSchedulerConfiguration profile (None: ``topos``).
    scheduler_name: str | None = None
    #: Users' Score plugins (``customScorers``), in the order given.
    custom_scorers: tuple[CustomScorer, ...] = ()
    #: Per-leaf limits on one gang's placement (``topologyConstraints``): not a plugin's, the
    #: gang planner's and preemption's.
    topology_constraints: TopologyConstraints = field(default_factory=TopologyConstraints)
    #: What the process holds once: the first profile's only; another profile that sets it is
    #: refused (it would be ignored).
    process: ProcessSettings = field(default_factory=ProcessSettings)
    #: The other profiles the same process serves, each under its own ``scheduler_name``
    #: (a KubeSchedulerConfiguration's ``profiles[1:]``, the AgentPool profile). They share the
    #: scheduler's queue and snapshot; what is not per profile (gangs, preemption) reads this one.
    other_profiles: tuple[SchedulerConfig, ...] = ()

    def nodes_to_score(self, total: int) -> int:
        """How many feasible nodes a cycle looks for among ``total`` before it stops filtering:
        kube-scheduler's rule for the percentage, capped by ``fast_scheduling``."""
        want = num_feasible_nodes_to_find(total, self.percentage_of_nodes_to_score)
        if self.fast_scheduling.enabled:
            want = min(want, self.fast_scheduling.max_nodes_to_score)
        return want

    def __post_init__(self) -> None:
        if not 0 <= self.percentage_of_nodes_to_score <= 100:
            raise ConfigError("percentageOfNodesToScore: must be from 0 to 100")
        for name, value in self.weights.items():
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
                raise ConfigError(f"weights.{name}: must be an integer from 0 to 100")
        for i, other in enumerate(self.other_profiles, 1):
            if other.process != ProcessSettings():
                raise ConfigError(
                    f"profiles[{i}]: historyHalfLifeSeconds and prices are the process's, set "
                    "once at the top of the scheduling section, not per profile"
                )
        names = [p.scheduler_name or podkeys.SCHEDULER_NAME for p in (self, *self.other_profiles)]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ConfigError(f"profiles[{i}].schedulerName: {name!r} names two profiles")


def num_feasible_nodes_to_find(total: int, percentage: int) -> int:
    """kube-scheduler's rule: every node below 100 nodes or at 100 %; else the percentage
    (0: adaptive, 50 % - 1 % per 125 nodes, at least 5 %) of the nodes, at least 100."""
    if total < _MIN_FEASIBLE or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(5, 50 - total // 125)
    return max(_MIN_FEASIBLE, total * percentage // 100)


_MIN_FEASIBLE: Final = 100


def unknown_plugin(name: str, known: Collection[str]) -> str:
    """``unknown plugin 'X' — did you mean 'Y'? (the plugins: …)``: the name and every valid one."""
    close = difflib.get_close_matches(name, list(known), n=1)
    guess = f" — did you mean {close[0]!r}?" if close else ""
    return f"unknown plugin {name!r}{guess} (the plugins: {', '.join(sorted(known))})"
