"""Where the agent's snapshots come from: a profile's fake NVML, or the real NVML."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.settings import AgentError

if TYPE_CHECKING:
    from agent.devices import DeviceSource


@dataclass(frozen=True, slots=True)
class Hardware:
    """Where snapshots come from, and the NVML object to watch for events (``None``: no events)."""

    source: DeviceSource
    nvml: Any = None
    close: Callable[[], None] | None = None


def open_hardware(profile: str | None, *, hostname: str | None, sysfs_root: str = "/") -> Hardware:
    """The fake NVML of ``profile`` (name or file), or the real NVML (blocking)."""
    # imported here: `topos <other command>` must not pay for (or depend on) discovery's imports
    from agent.devices import NvmlSource, ProfileSource

    if profile:
        try:
            source = ProfileSource(profile, hostname=hostname)
        except (ValueError, OSError) as exc:
            text = str(exc).strip() or type(exc).__name__
            raise AgentError(f"profile {profile}: {text.splitlines()[0]}") from None
        return Hardware(source=source, nvml=source.nvml, close=source.close)
    try:
        import pynvml
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        pynvml = None
    real = NvmlSource(nvml_module=pynvml, hostname=hostname, sysfs_root=sysfs_root)
    return Hardware(source=real, nvml=pynvml)
