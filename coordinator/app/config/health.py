"""``health``: what the coordinator publishes of the agents' GPU health verdicts (docs/health.md).
A bad value stops start-up naming its key and value."""

from __future__ import annotations

import msgspec

from coordinator.core.dra.healthtaints import EFFECTS

__all__ = ["DeviceTaintsSection", "HealthSection"]


class DeviceTaintsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``health.deviceTaints``: one ``DeviceTaintRule`` per DRA device of an unhealthy GPU."""

    enabled: bool = True
    """Write the rules (the leader only; nothing where the API does not serve them)."""
    effect: str = "NoSchedule"
    """``NoSchedule``: no new claim gets the device; ``NoExecute``: kube-controller-manager also
    evicts the pods using it; ``None``: informational only."""

    def __post_init__(self) -> None:
        if self.effect not in EFFECTS:
            raise ValueError(f"effect: {self.effect!r} is not one of {', '.join(EFFECTS)}")


class HealthSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    device_taints: DeviceTaintsSection = msgspec.field(
        default_factory=DeviceTaintsSection, name="deviceTaints"
    )
