"""``gangs.protections``: what keeps running pods from preemption, and pending pods from
preempting at once (docs/preemption-protections.md).

Durations are seconds (``600``) or the duration grammar of ``topos.io/gang-timeout`` (``10m``,
``1h30m``); ``0`` is none. A value that does not parse stops start-up naming its key and value.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from common.labels import check_namespace_name
from coordinator.core.podspec.durations import DurationError, parse_duration
from coordinator.core.preemption.protections import DurationRule, Protections

__all__ = ["DurationsSection", "ProtectionsSection"]

Duration = str | float


def seconds(where: str, value: Duration) -> float:
    """``value`` in seconds; ``ValueError`` naming ``where`` and the value."""
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{where}: {value!r} is negative")
        return float(value)
    if value.strip() in ("0", "0s"):
        return 0.0
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise ValueError(f"{where}: {exc}") from None


class DurationsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One duration by PriorityClass, by namespace and by default (a pod's annotation wins)."""

    default: Duration = 0.0
    priority_classes: dict[str, Duration] = msgspec.field(
        default_factory=dict, name="priorityClasses"
    )
    namespaces: dict[str, Duration] = msgspec.field(default_factory=dict)
    annotation_max: Duration | None = msgspec.field(default=None, name="annotationMax")
    """The most a pod's own annotation may ask (``None``: up to the grammar's 7 days)."""

    def __post_init__(self) -> None:
        self.rule()
        for ns in self.namespaces:
            check_namespace_name("namespaces", ns)

    def rule(self) -> DurationRule:
        return DurationRule(
            default_s=seconds("default", self.default),
            priority_classes={
                k: seconds(f"priorityClasses.{k}", v) for k, v in self.priority_classes.items()
            },
            namespaces={k: seconds(f"namespaces.{k}", v) for k, v in self.namespaces.items()},
            annotation_max_s=(
                None
                if self.annotation_max is None
                else seconds("annotationMax", self.annotation_max)
            ),
        )


class ProtectionsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``gangs.protections``: minimum runtime, preemption delay, eviction budget."""

    min_runtime: DurationsSection = msgspec.field(
        default_factory=DurationsSection, name="minRuntime"
    )
    """How long a pod runs before it may be preempted (``topos.io/min-runtime`` wins)."""
    preemption_delay: DurationsSection = msgspec.field(
        default_factory=DurationsSection, name="preemptionDelay"
    )
    """How long a pending pod waits before it preempts (``topos.io/preemption-delay`` wins)."""
    evictions_per_hour: Annotated[int, msgspec.Meta(ge=0)] = msgspec.field(
        default=0, name="evictionsPerHour"
    )
    """The most pods preemption evicts in any hour; 0: no limit."""

    def protections(self) -> Protections:
        return Protections(
            min_runtime=self.min_runtime.rule(),
            preemption_delay=self.preemption_delay.rule(),
            evictions_per_hour=self.evictions_per_hour,
        )
