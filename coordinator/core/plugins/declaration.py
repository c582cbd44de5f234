"""How a plugin module declares its plugins: one :class:`PluginSpec` each.

The spec is everything the rest of the scheduler knows of a plugin: its class (which carries the
name and the traits of :class:`~coordinator.core.framework.interfaces.Plugin`), its arguments'
type, how to make one, its default score weight, the ``weights`` key users wrote before weights
were by plugin name, and the other names a KubeSchedulerConfiguration may give it.
``coordinator.core.registry`` lists the specs; no other module spells a plugin's name.

A factory gets two things: the plugin's own arguments (an object of its ``args`` type, from the
profile's ``args`` by plugin name, else the type's defaults; ``None`` for a plugin without
arguments) and the :class:`Context` — what the process shares between profiles and plugins.
Never the whole profile. A spec is generic over its arguments' type, so mypy checks that the
factory takes what ``args`` makes: ``PluginSpec(plugin=P, args=PArgs, factory=lambda a, c: P(a))``
infers ``PluginSpec[PArgs]``; a plugin without arguments is a ``PluginSpec[None]``. Lists that
mix plugins hold :data:`AnySpec`, and :meth:`PluginSpec.build` checks the arguments it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar, cast

from coordinator.core.framework.interfaces import Plugin
from coordinator.core.framework.prices import PriceTable
from coordinator.core.plugins.fragmentation import ShapeMix

if TYPE_CHECKING:
    from coordinator.core.plugins.domainscore import DomainHistory
    from coordinator.core.plugins.pools import CarbonReadings

__all__ = ["DEFAULT_LEAF_LABEL", "AnySpec", "Context", "PluginSpec"]

#: The node label naming a leaf unless ``gangs.domainKeys.leaf`` says otherwise.
DEFAULT_LEAF_LABEL = "topos.io/leaf"


@dataclass(slots=True)
class Context:
    """What a factory gets besides its arguments: what the process holds once for every
    profile (none of it is a plugin's setting), and what the plugins of one framework share."""

    #: The failures HistoricalPerformance reads (the running scheduler records into it).
    history: DomainHistory
    #: The regions' carbon intensities PoolPlacement reads (the AgentPool controller updates).
    carbon: CarbonReadings | None = None
    #: What nodes cost (``scheduling.prices``): CostEfficiency and the AgentPool controller.
    prices: PriceTable = field(default_factory=PriceTable)
    #: The node label naming a leaf (``gangs.domainKeys.leaf``: gangs read it too).
    leaf_label: str = DEFAULT_LEAF_LABEL
    _mix: ShapeMix | None = None

    def mix(self, half_life: int | None = None) -> ShapeMix:
        """The pod shapes seen, one per framework (GpuTopology records into it, GpuFragmentation
        reads it); ``half_life`` (GpuFragmentation's ``shapeHalfLife``) sets how fast it fades."""
        if self._mix is None:
            self._mix = ShapeMix()
        if half_life is not None:
            self._mix.set_half_life(half_life)
        return self._mix


#: The type of a plugin's arguments.
ArgsT = TypeVar("ArgsT")


# No slots: a slotted frozen dataclass cannot be made through ``PluginSpec[None](...)`` on 3.11.
@dataclass(frozen=True, kw_only=True)
class PluginSpec(Generic[ArgsT]):
    """One plugin, declared once, in its own module."""

    #: The class: its ``name`` and its traits (node-local, gate, what re-queues its refusals).
    plugin: type[Plugin]
    #: The type of its arguments (kube-scheduler's per-plugin args: a frozen dataclass whose
    #: fields all have defaults, validated in ``__post_init__``); ``None``: it takes none.
    args: type[ArgsT] | None = None
    #: Makes the plugin object from its arguments and the context (none: the class called
    #: without arguments).
    factory: Callable[[ArgsT, Context], Plugin] | None = None
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

    def default_args(self) -> ArgsT | None:
        """Its arguments when the profile gives none (``None``: it takes none)."""
        return self.args() if self.args is not None else None

    def build(self, args: object, context: Context) -> Plugin:
        """The plugin, made from ``args`` (checked against the args type: a profile's args
        are values of any type until here)."""
        if self.args is None:
            if args is not None:
                raise TypeError(f"{self.name}: takes no args, not {args!r}")
            mine = cast(ArgsT, None)  # no args type: a PluginSpec[None]
        elif isinstance(args, self.args):
            mine = args
        else:
            raise TypeError(f"{self.name}: args must be a {self.args.__name__}, not {args!r}")
        return self.factory(mine, context) if self.factory is not None else self.plugin()


#: A declaration whatever its arguments' type: what lists mixing plugins hold.
AnySpec: TypeAlias = PluginSpec[Any]
