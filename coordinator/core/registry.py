"""The registry: the list of plugin declarations, and building a :class:`Framework` from them.

Each plugin module declares its plugins once (:class:`~.plugins.declaration.PluginSpec`: class,
factory, default weights, aliases); :data:`PLUGINS` lists those declarations in filter order, and
everything else — the default profile, the weights by name, the names a configuration may use —
is read from it. Adding a plugin is its module plus one line here (docs/architecture.md, "Adding
a scorer"). Other packages add plugins by passing ``plugins=(*PLUGINS, MY_SPEC)`` (or
``registry={"MyPlugin": factory}``, a factory of the scheduler config) to
:func:`build_framework` and naming them in the config's ``enabled_plugins``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from coordinator.core.framework.config import SchedulerConfig, unknown_plugin
from coordinator.core.framework.profile import Framework
from coordinator.core.plugins import (
    domainscore,
    dynamicresources,
    fragscore,
    gpu,
    groupspread,
    interpodaffinity,
    nodeaffinity,
    nodeports,
    noderesources,
    nodestate,
    podtopologyspread,
    pools,
    tainttoleration,
)
from coordinator.core.plugins.custom import GuardedScorer
from coordinator.core.plugins.declaration import Context, PluginSpec
from coordinator.core.plugins.domainscore import DomainHistory
from coordinator.core.plugins.pools import CarbonReadings

__all__ = [
    "DEFAULT_PROFILE",
    "PLUGINS",
    "Registry",
    "build_framework",
    "kube_names",
    "weight_aliases",
    "weights_of",
]

#: Extra plugins by name: a factory gets the scheduler config and returns the plugin object.
Registry = Mapping[str, Callable[[SchedulerConfig], object]]

# Filter order follows kube-scheduler's (cheap node-level gates first), so the reason a node
# reports is the same one kube would report.
PLUGINS: Final[tuple[PluginSpec, ...]] = (
    nodestate.NODE_HEALTH,
    nodestate.NODE_UNSCHEDULABLE,
    tainttoleration.PLUGIN,
    nodeaffinity.PLUGIN,
    pools.POOL_PLACEMENT,
    nodeports.PLUGIN,
    noderesources.PLUGIN,
    gpu.GPU_TOPOLOGY,
    dynamicresources.PLUGIN,
    podtopologyspread.PLUGIN,
    interpodaffinity.PLUGIN,
    groupspread.PLUGIN,
    gpu.NUMA_TOPOLOGY,
    gpu.GPU_PACKING,
    fragscore.PLUGIN,
    gpu.GPU_AVAILABILITY,
    domainscore.DOMAIN_UTILISATION,
    domainscore.HISTORICAL_PERFORMANCE,
    pools.MODEL_CACHE,
    pools.COST_EFFICIENCY,
    pools.PREFERRED_REGION,
)

#: The plugins a profile runs unless its configuration says otherwise.
DEFAULT_PROFILE: Final = tuple(spec.name for spec in PLUGINS)


def weights_of(
    config: SchedulerConfig, plugins: Sequence[PluginSpec] = PLUGINS, *, pool: bool = False
) -> dict[str, int]:
    """Every scorer's weight in ``config`` (``pool``: in the AgentPool profile), by plugin name:
    the config's own, else the declaration's default."""
    out: dict[str, int] = {}
    for spec in plugins:
        if spec.weight is None:
            continue
        weight = config.weights.get(spec.name, spec.weight)
        if pool:
            own = config.pool_weights.get(spec.name) if config.pool_weights is not None else None
            default = spec.pool_weight if spec.pool_weight is not None else weight
            weight = own if own is not None else default
        out[spec.name] = weight
    for custom in config.custom_scorers:
        out[custom.name] = custom.weight
    return out


def weight_aliases(plugins: Sequence[PluginSpec] = PLUGINS) -> dict[str, tuple[str, ...]]:
    """The ``weights`` keys users wrote before weights were by plugin name → the plugins each
    sets (``topology_fitness``: GpuTopology and DynamicResources)."""
    out: dict[str, tuple[str, ...]] = {}
    for spec in plugins:
        if spec.weight_key is not None:
            out[spec.weight_key] = (*out.get(spec.weight_key, ()), spec.name)
    return out


def kube_names(plugins: Sequence[PluginSpec] = PLUGINS) -> dict[str, str]:
    """Every name a KubeSchedulerConfiguration may give a plugin → the plugin's own."""
    out = {spec.name: spec.name for spec in plugins}
    for spec in plugins:
        out.update(dict.fromkeys(spec.aliases, spec.name))
    return out


def build_framework(
    config: SchedulerConfig | None = None,
    *,
    registry: Registry | None = None,
    profile: Sequence[str] | None = None,
    history: DomainHistory | None = None,
    carbon: CarbonReadings | None = None,
    plugins: Sequence[PluginSpec] = PLUGINS,
) -> Framework:
    """Instantiate the profile's plugins (default: every declared one, minus those the config
    disables, plus those it enables) from ``plugins`` and ``registry``, then — unless
    ``profile`` names the plugins — the config's ``customScorers`` (each guarded: see
    :mod:`.plugins.custom`)."""
    config = config or SchedulerConfig()
    context = Context(config, history, carbon)
    factories: dict[str, Callable[[], object]] = {
        spec.name: (lambda spec=spec: spec.build(context))  # type: ignore[misc]
        for spec in plugins
    }
    for name, factory in (registry or {}).items():
        factories[name] = lambda factory=factory: factory(config)  # type: ignore[misc]
    names = list(profile if profile is not None else (spec.name for spec in plugins))
    names.extend(n for n in config.enabled_plugins if n not in names)
    made = []
    for name in names:
        if name in config.disabled_plugins:
            continue
        make = factories.get(name)
        if make is None:
            key = "enabled_plugins" if name in config.enabled_plugins else "profile"
            raise KeyError(f"{key}: {unknown_plugin(name, factories)}")
        made.append(make())
    for custom in config.custom_scorers if profile is None else ():
        if custom.name not in config.disabled_plugins:
            made.append(GuardedScorer(custom.build(), custom.name))
    return Framework(
        config,
        made,
        weights=weights_of(config, plugins),
        pool_weights=weights_of(config, plugins, pool=True),
    )
