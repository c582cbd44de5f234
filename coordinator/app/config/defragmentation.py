"""``defragmentation``: moving movable pods so that a waiting workload fits
(docs/defragmentation.md). A bad value stops start-up naming its key and value."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from coordinator.core.preemption.defrag import MODES, DefragSettings

__all__ = ["DefragmentationSection"]


class DefragmentationSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``off``: never move a pod; ``onDemand``: for a workload that waits only because free
    GPUs are scattered; ``background``: that, and compaction while nothing waits."""

    mode: str | bool = "onDemand"
    """YAML reads a bare ``off`` as ``false``: that is ``off`` too."""
    max_loss_ratio: Annotated[float, msgspec.Meta(ge=0)] = msgspec.field(
        default=0.05, name="maxLossRatio"
    )
    """GPU-seconds of work lost at most this share of the waiting workload's GPU-seconds."""
    horizon_s: Annotated[float, msgspec.Meta(gt=0)] = msgspec.field(
        default=3600.0, name="horizonSeconds"
    )
    """The waiting workload's GPU-seconds: its GPUs × this."""
    priority_step: Annotated[int, msgspec.Meta(gt=0)] = msgspec.field(
        default=100, name="priorityStep"
    )
    """Each this much priority above the moved pods' lets the waiting workload lose half more."""
    evictions_per_hour: Annotated[int, msgspec.Meta(ge=0)] = msgspec.field(
        default=20, name="evictionsPerHour"
    )
    """``background``: the most pods compaction moves in any hour."""
    interval_s: Annotated[float, msgspec.Meta(gt=0)] = msgspec.field(
        default=60.0, name="intervalSeconds"
    )
    """``background``: the least time between two compactions."""
    gather: Any = True
    """A gang the planner would split over NVLink cliques asks for moves into one clique (with
    ``onDemand`` and ``background``); any YAML value is read, so that a bad one is named."""
    compact_racks: bool = msgspec.field(default=False, name="compactRacks")
    """``background``: compaction may empty a whole NVLink rack, moving its gangs whole into
    other racks in use."""

    def __post_init__(self) -> None:
        if self.mode is not False and self.mode not in MODES:
            raise ValueError(f"mode: {self.mode!r} is none of {', '.join(MODES)}")
        if not isinstance(self.gather, bool):
            raise ValueError(f"gather: {self.gather!r} is neither true nor false")

    def settings(self) -> DefragSettings:
        return DefragSettings(
            mode="off" if self.mode is False else str(self.mode),
            max_loss_ratio=self.max_loss_ratio,
            horizon_s=self.horizon_s,
            priority_step=self.priority_step,
            evictions_per_hour=self.evictions_per_hour,
            interval_s=self.interval_s,
            gather=self.gather,
            compact_racks=self.compact_racks,
        )
