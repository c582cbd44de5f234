"""The built-in hardware profiles (``<name>.yaml`` in this folder) and their loader."""

from agent.devices.profile import (
    Profile,
    ProfileError,
    list_profiles,
    load_profile,
    profile_from_mapping,
    profile_to_yaml,
)

__all__ = [
    "Profile",
    "ProfileError",
    "list_profiles",
    "load_profile",
    "profile_from_mapping",
    "profile_to_yaml",
]
