"""How a plugin module declares its plugins: one :class:`PluginSpec` each.

The spec is everything the rest of the scheduler knows of a plugin: its class (which carries the
name and the traits of :class:`~coordinator.core.framework.interfaces.Plugin`), how to make one,
its default score weight, the ``weights`` key users wrote before weights were by plugin name,
and the other names a KubeSchedulerConfiguration may give it. ``coordinator.core.registry``
lists the specs; no other module spells a plugin's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.fragmentation import ShapeMix

if TYPE_CHECKING:
    from coordinator.core.plugins.domainscore import DomainHistory
    from coordinator.core.plugins.pools import CarbonReadings

__all__ = ["Context", "PluginSpec"]


@dataclass(slots=True)
class Context:
    """What a factory gets: the profile's settings, what the running scheduler hands in, and
    what the plugins of one framework share."""

    config: SchedulerConfig
    #: What HistoricalPerformance reads (the running scheduler records into it); none: its own.
    history: DomainHistory | None = None
    #: The regions' carbon intensities PoolPlacement reads (the AgentPool controller updates).
    carbon: CarbonReadings | None = None
    _mix: ShapeMix | None = None

    def mix(self) -> ShapeMix:
        """The pod shapes seen, one per framework (GpuTopology and GpuFragmentation share it)."""
        if self._mix is None:
            self._mix = ShapeMix(half_life=self.config.fragmentation_half_life)
        return self._mix


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginSpec:
    """One plugin, declared once, in its own module."""

    #: The class: its ``name`` and its traits (node-local, gate, what re-queues its refusals).
    plugin: type[Plugin]
    #: Makes the plugin object (none: the class called without arguments).
    factory: Callable[[Context], Plugin] | None = None
    #: The default score weight (0–100); ``None``: the plugin does not score nodes.
    weight: int | None = None
    #: The default weight in the AgentPool profile (``agentPools``), the NeuroNetes guide's
    #: 30/25/20/15/10 factors; ``None``: the ordinary weight.
    pool_weight: int | None = None
    #: The ``weights`` key that set this weight before weights were keyed by plugin name (still
    #: accepted: an alias; two plugins may share one).
    weight_key: str | None = None
    #: Other names a KubeSchedulerConfiguration gives it (kube-scheduler's, KubeNexus').
    aliases: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.plugin.name

    def build(self, context: Context) -> Plugin:
        return self.factory(context) if self.factory is not None else self.plugin()
