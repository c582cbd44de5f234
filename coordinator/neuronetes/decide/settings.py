"""``neuronetes``: the AgentPool / ToolBinding controller's section of the configuration."""

from __future__ import annotations

from typing import Annotated

import msgspec

from common.labels import check_namespace_name
from coordinator.neuronetes.decide.podtemplate import DEFAULT_IMAGE

__all__ = ["CarbonIntensitySettings", "NeuronetesSettings"]


class CarbonIntensitySettings(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """``neuronetes.carbonIntensity``: where region carbon intensities come from
    (docs/neuronetes-policies.md#carbon-intensity)."""

    source: Annotated[str, msgspec.Meta(min_length=1)]
    """An ``http(s)://`` URL or a file path answering ``{"regions": {"<region>": gCO2/kWh}}``."""
    refresh_s: Annotated[float, msgspec.Meta(gt=0)] = msgspec.field(
        default=300.0, name="refreshSeconds"
    )
    """How often the leading coordinator reads it."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] = msgspec.field(
        default=5.0, name="timeoutSeconds"
    )
    """A read that takes longer fails (the last good values stay, with their age)."""


class NeuronetesSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``neuronetes``: the controller that serves AgentPools and ToolBindings (docs/neuronetes.md).
    It runs in the leading coordinator against an API server."""

    enabled: bool | None = None
    """None: on — idle, with a log line, until the API server serves ``agentpools.neuronetes.io``;
    false: off."""
    namespace: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    """Only pools of this namespace; none: the scheduler's namespace (every one if unset)."""
    resync_s: Annotated[float, msgspec.Meta(gt=0)] = msgspec.field(
        default=10.0, name="resyncSeconds"
    )
    """How often every pool's load signals are read and its scaling decided."""
    default_image: Annotated[str, msgspec.Meta(min_length=1)] = msgspec.field(
        default=DEFAULT_IMAGE, name="defaultImage"
    )
    """The serving container of a pool without ``spec.template``."""
    prometheus_url: str | None = msgspec.field(default=None, name="prometheusUrl")
    """Prometheus for pools with ``metrics.source: prometheus`` that name none themselves."""
    carbon_intensity: CarbonIntensitySettings | None = msgspec.field(
        default=None, name="carbonIntensity"
    )
    """Region carbon intensities for ``carbonAware`` pools and the PoolPlacement filter."""

    def __post_init__(self) -> None:
        if self.namespace is not None:
            check_namespace_name("namespace", self.namespace)
