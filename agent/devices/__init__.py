"""Hardware discovery: real NVML + sysfs, or a profile-driven fake of both (see docs/profiles.md).

Entry points: ``discover_profile(name, hostname=...)`` for a simulated node's topology,
``NvmlSource`` / ``NullSource`` / ``ProfileSource`` (all ``DeviceSource``s) for the agent, and
``agent.devices.profiles`` (``load_profile``, ``list_profiles``) for the profile catalogue.
"""

from agent.devices.source import (
    DeviceSource,
    NullSource,
    NvmlSource,
    NvmlUnavailable,
    ProfileSource,
    discover_profile,
)

__all__ = [
    "DeviceSource",
    "NullSource",
    "NvmlSource",
    "NvmlUnavailable",
    "ProfileSource",
    "discover_profile",
]
