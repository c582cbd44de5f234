"""One MIG instance as NVML reports it, for hand-built topologies."""

from __future__ import annotations

from common.model import MigInstance


def mig_instance(
    profile: str, *, gi: int, start: int, size: int, memory_mib: int, uuid: str
) -> MigInstance:
    """Instance ``profile`` (``"3g.40gb"``) in GPU-instance ``gi``, occupying memory slices
    ``start`` to ``start + size``; its compute slices come from the profile's name."""
    return MigInstance(
        profile=profile,
        gi_id=gi,
        ci_id=0,
        placement_start=start,
        placement_size=size,
        memory_mib=memory_mib,
        slices=int(profile.split("g", 1)[0]),
        uuid=uuid,
    )
