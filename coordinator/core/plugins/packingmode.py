"""The arguments of the two scorers that pack or spread: GpuPacking (per node) and
DomainUtilisation (per leaf). Users set both with ``scheduling.packing``."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.core.framework.config_errors import ConfigError

__all__ = ["PackingArgs"]


@dataclass(frozen=True, slots=True)
class PackingArgs:
    #: ``binpack`` prefers what is already busy (keeps whole nodes and leaves for big jobs);
    #: ``spread`` prefers the emptiest.
    packing: str = "binpack"

    def __post_init__(self) -> None:
        if self.packing not in ("binpack", "spread"):
            raise ConfigError(
                f"packing: unknown mode {self.packing!r} (expected binpack or spread)"
            )

    @property
    def spread(self) -> bool:
        return self.packing == "spread"
