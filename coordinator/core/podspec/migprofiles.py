"""MIG GPU-instance profile names that exist on NVIDIA hardware.

Names as ``nvidia-smi mig -lgip`` prints them (and as GFD's "mixed" strategy turns them into
resources, ``nvidia.com/mig-<profile>``). A pod asking for a profile outside this set is
rejected up front: no node could ever have it, and a typo should say so instead of pending forever.
"""

from __future__ import annotations

import re
from typing import Final

from common import podkeys

__all__ = ["KNOWN_MIG_PROFILES", "MIG_RESOURCE_PREFIX", "is_known_mig_profile"]

MIG_RESOURCE_PREFIX: Final = podkeys.MIG_RESOURCE_PREFIX

# Per product: A30 24GB, A100 40GB, A100 80GB, H100 80GB, H100 NVL 94GB, H200 141GB, GH200 96/144GB.
_BASE: Final = (
    "1g.6gb 2g.12gb 4g.24gb",
    "1g.5gb 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb",
    "1g.10gb 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb",
    "1g.12gb 1g.24gb 2g.24gb 3g.47gb 4g.47gb 7g.94gb",
    "1g.18gb 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb",
    "1g.12gb 1g.24gb 2g.24gb 3g.48gb 4g.48gb 7g.96gb",
    "1g.18gb 1g.36gb 2g.36gb 3g.72gb 4g.72gb 7g.144gb",
)
KNOWN_MIG_PROFILES: Final = frozenset(
    name
    for line in _BASE
    for base in line.split()
    for name in (base, f"{base}+me", f"{base}+gfx", f"{base}+me.all", f"{base}-me")
    if not (name.endswith(("+me", "+me.all", "-me", "+gfx")) and not base.startswith("1g."))
)
_SHAPE: Final = re.compile(r"^(?:(\d)c\.)?(\d)g\.(\d{1,3})gb(?:\+me|\+gfx|\+me\.all|-me)?$")


def is_known_mig_profile(profile: str) -> bool:
    """True for a GPU-instance profile (``3g.40gb``, ``1g.10gb+me``) or a compute-instance split
    of one (``1c.3g.40gb``)."""
    m = _SHAPE.match(profile)
    if m is None:
        return False
    if m.group(1) is not None:
        ci, gi = int(m.group(1)), int(m.group(2))
        base = profile.split(".", 1)[1]
        return 1 <= ci < gi and base in KNOWN_MIG_PROFILES
    return profile in KNOWN_MIG_PROFILES
