"""The built-in plugins by name, the default profile, and building a :class:`Framework` from them.

This module sits above both :mod:`coordinator.core.framework` (which never names a plugin) and
:mod:`coordinator.core.plugins` (which import only the framework's interfaces). Other packages
add plugins by passing ``registry={"MyPlugin": factory}`` to :func:`build_framework` and naming
them in ``profile`` or the config's ``enabled_plugins``; a factory gets the
:class:`~coordinator.core.framework.config.SchedulerConfig` and returns the plugin object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from coordinator.core.framework.config import BUILT_IN_PLUGINS, SchedulerConfig, unknown_plugin
from coordinator.core.framework.profile import Framework
from coordinator.core.plugins.custom import GuardedScorer
from coordinator.core.plugins.domainscore import (
    DomainHistory,
    DomainUtilisation,
    HistoricalPerformance,
)
from coordinator.core.plugins.dynamicresources import DynamicResources
from coordinator.core.plugins.fragmentation import ShapeMix
from coordinator.core.plugins.fragscore import GpuFragmentation
from coordinator.core.plugins.gpu import GpuAvailability, GpuPacking, GpuTopology, NumaTopology
from coordinator.core.plugins.groupspread import GroupSpread
from coordinator.core.plugins.interpodaffinity import InterPodAffinity
from coordinator.core.plugins.nodeaffinity import NodeAffinity
from coordinator.core.plugins.nodeports import NodePorts
from coordinator.core.plugins.noderesources import NodeResourcesFit
from coordinator.core.plugins.nodestate import NodeHealth, NodeUnschedulable
from coordinator.core.plugins.podtopologyspread import PodTopologySpread
from coordinator.core.plugins.pools import (
    CarbonReadings,
    CostEfficiency,
    ModelCache,
    PoolPlacement,
    PreferredRegion,
)
from coordinator.core.plugins.tainttoleration import TaintToleration

__all__ = ["DEFAULT_PROFILE", "Registry", "build_framework", "default_registry"]

#: name → factory; a factory gets the scheduler config and returns the plugin object.
Registry = Mapping[str, Callable[[SchedulerConfig], object]]

# Filter order follows kube-scheduler's (cheap node-level gates first), so the reason a node
# reports is the same one kube would report.
DEFAULT_PROFILE: Final = (
    "NodeHealth",
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
    "PoolPlacement",
    "NodePorts",
    "NodeResourcesFit",
    "GpuTopology",
    "DynamicResources",
    "PodTopologySpread",
    "InterPodAffinity",
    "GroupSpread",
    "NumaTopology",
    "GpuPacking",
    "GpuFragmentation",
    "GpuAvailability",
    "DomainUtilisation",
    "HistoricalPerformance",
    "ModelCache",
    "CostEfficiency",
    "PreferredRegion",
)


assert frozenset(DEFAULT_PROFILE) == BUILT_IN_PLUGINS, "framework/config.py's plugin list is stale"


def default_registry(
    history: DomainHistory | None = None, carbon: CarbonReadings | None = None
) -> Registry:
    """The built-in plugins; ``history`` is what HistoricalPerformance reads (the running
    scheduler records into it; none: a history of its own, empty); ``carbon`` the regions'
    carbon intensities PoolPlacement reads (the AgentPool controller updates them). GpuTopology
    and GpuFragmentation share one :class:`ShapeMix` (the pod shapes seen)."""
    mixes: list[ShapeMix] = []

    def mix(config: SchedulerConfig) -> ShapeMix:
        if not mixes:
            mixes.append(ShapeMix(half_life=config.fragmentation_half_life))
        return mixes[0]

    return {
        "NodeHealth": lambda _: NodeHealth(),
        "NodeUnschedulable": lambda _: NodeUnschedulable(),
        "TaintToleration": lambda _: TaintToleration(),
        "NodeAffinity": lambda _: NodeAffinity(),
        "NodePorts": lambda _: NodePorts(),
        "NodeResourcesFit": NodeResourcesFit,
        "GpuTopology": lambda config: GpuTopology(mix(config)),
        "DynamicResources": lambda _: DynamicResources(),
        "PodTopologySpread": lambda config: PodTopologySpread(config.spread_defaults),
        "InterPodAffinity": lambda _: InterPodAffinity(),
        "GroupSpread": lambda _: GroupSpread(),
        "NumaTopology": lambda _: NumaTopology(),
        "GpuPacking": GpuPacking,
        "GpuFragmentation": lambda config: GpuFragmentation(config, mix(config)),
        "GpuAvailability": lambda _: GpuAvailability(),
        "DomainUtilisation": DomainUtilisation,
        "HistoricalPerformance": lambda config: HistoricalPerformance(config, history),
        "PoolPlacement": lambda _: PoolPlacement(carbon),
        "ModelCache": lambda _: ModelCache(),
        "CostEfficiency": CostEfficiency,
        "PreferredRegion": lambda _: PreferredRegion(),
    }


def build_framework(
    config: SchedulerConfig | None = None,
    *,
    registry: Registry | None = None,
    profile: Sequence[str] | None = None,
    history: DomainHistory | None = None,
    carbon: CarbonReadings | None = None,
) -> Framework:
    """Instantiate the profile's plugins (default: every registered one, minus those the config
    disables, plus those it enables) from the built-in registry and ``registry``, then — unless
    ``profile`` names the plugins — the config's ``customScorers`` (each guarded: see
    :mod:`.plugins.custom`)."""
    config = config or SchedulerConfig()
    factories = dict(default_registry(history, carbon))
    if registry:
        factories.update(registry)
    names = list(profile if profile is not None else DEFAULT_PROFILE)
    names.extend(n for n in config.enabled_plugins if n not in names)
    plugins = []
    for name in names:
        if name in config.disabled_plugins:
            continue
        factory = factories.get(name)
        if factory is None:
            key = "enabled_plugins" if name in config.enabled_plugins else "profile"
            raise KeyError(f"{key}: {unknown_plugin(name, factories)}")
        plugins.append(factory(config))
    for custom in config.custom_scorers if profile is None else ():
        if custom.name not in config.disabled_plugins:
            plugins.append(GuardedScorer(custom.build(), custom.name))
    return Framework(config, plugins)
