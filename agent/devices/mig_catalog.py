"""MIG geometry of each MIG-capable GPU: GPU-instance profiles, placements, compute instances.

The fake NVML needs the same rules the driver enforces, so a profile can say "A100 40GB" and get
the placements, sizes and "still creatable" counts real NVML reports. The numbers are the facts
shown by ``nvidia-smi mig -lgip`` / ``-lgipp`` / ``-lcip`` on those parts: memory in MiB
(``memorySizeMB``; nvidia-smi prints it as GiB with two decimals), streaming multiprocessors,
placement starts and sizes in memory slices (8 per GPU; 7 compute slices).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import pynvml


@dataclass(frozen=True, slots=True)
class GiProfile:
    """One GPU-instance profile (a row of ``nvidia-smi mig -lgip``)."""

    name: str  # "3g.20gb", "1g.5gb+me"
    index: int  # NVML_GPU_INSTANCE_PROFILE_* constant (argument of ...GetGpuInstanceProfileInfo)
    id: int  # profile ID (19, 14, 9, …) used by create/list calls
    slices: int  # compute slices
    memory_mib: int
    sms: int
    starts: tuple[int, ...]  # allowed placement starts (memory slices)
    size: int  # memory slices occupied
    instance_count: int  # how many an empty GPU holds

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True, slots=True)
class CiProfile:
    """One compute-instance profile inside a GPU instance (a row of ``nvidia-smi mig -lcip``)."""

    name: str  # "1c.3g.20gb", or the GI's own name when it spans the whole GI
    index: int  # NVML_COMPUTE_INSTANCE_PROFILE_* constant (also its ID)
    slices: int
    starts: tuple[int, ...]
    sms: int


@dataclass(frozen=True, slots=True)
class MigGeometry:
    """The MIG rules of one GPU model."""

    key: str
    compute_slices: int  # 7 on A100/H100, 4 on A30
    memory_slices: int  # 8 on A100/H100, 4 on A30
    profiles: tuple[GiProfile, ...]

    def by_id(self, profile_id: int) -> GiProfile | None:
        for p in self.profiles:
            if p.id == profile_id:
                return p
        return None

    def by_index(self, index: int) -> GiProfile | None:
        for p in self.profiles:
            if p.index == index:
                return p
        return None

    def by_name(self, name: str) -> GiProfile | None:
        for p in self.profiles:
            if p.name == name:
                return p
        return None


_CI_INDEX: Final[dict[int, int]] = {
    1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
}

# Compute-instance splits a GPU instance of g slices allows (``nvidia-smi mig -lcip``).
_CI_SPLITS: Final[dict[int, tuple[int, ...]]] = {
    1: (1,),
    2: (1, 2),
    3: (1, 2, 3),
    4: (1, 2, 4),
    7: (1, 2, 3, 4, 7),
}


def ci_profiles(gi: GiProfile) -> tuple[CiProfile, ...]:
    """Compute-instance profiles of a GPU instance.

    A ``c``-slice compute instance starts at a multiple of ``c`` rounded up to a power of two, so
    1c + 2c + 3c fit one 7g instance (at 0, 2 and 4) as ``nvidia-smi -L`` shows on real A100s.
    """
    out: list[CiProfile] = []
    for c in _CI_SPLITS.get(gi.slices, (gi.slices,)):
        name = gi.name if c == gi.slices else f"{c}c.{gi.name}"
        step = 1 << (c - 1).bit_length()
        starts = tuple(range(0, gi.slices - c + 1, step))
        out.append(CiProfile(name, _CI_INDEX[c], c, starts, gi.sms * c // gi.slices))
    return tuple(out)


def ci_profile_name(gi_name: str, ci_slices: int, gi_slices: int) -> str:
    """``1c.3g.40gb`` for a split, the GI's own name for a compute instance spanning it."""
    return gi_name if ci_slices >= gi_slices else f"{ci_slices}c.{gi_name}"


P = pynvml  # short alias for the constants below


def _seven_slice(
    *,
    key: str,
    names: tuple[str, str, str, str, str, str, str],
    mem: tuple[int, int, int, int, int],
    sms: tuple[int, int, int, int, int, int],
    with_1g_double: bool = True,
) -> MigGeometry:
    """The A100/H100 family: 7 compute slices over 8 memory slices.

    ``names`` = 1g, 1g+me, 1g (double memory), 2g, 3g, 4g, 7g;
    ``mem`` = MiB of 1g, 1g double/2g, 3g/4g, 7g and the +me one (same as 1g);
    ``sms`` = 1g, 1g double, 2g, 3g, 4g, 7g.
    """
    m1, m2, m3, m7, _ = mem
    profiles = [
        GiProfile(
            names[0],
            P.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
            19,
            1,
            m1,
            sms[0],
            (0, 1, 2, 3, 4, 5, 6),
            1,
            7,
        ),
        GiProfile(
            names[1],
            P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
            20,
            1,
            m1,
            sms[0],
            (0, 1, 2, 3, 4, 5, 6),
            1,
            1,
        ),
    ]
    if with_1g_double:
        profiles.append(
            GiProfile(
                names[2],
                P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
                15,
                1,
                m2,
                sms[1],
                (0, 2, 4, 6),
                2,
                4,
            )
        )
    profiles += [
        GiProfile(
            names[3], P.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, 2, m2, sms[2], (0, 2, 4), 2, 3
        ),
        GiProfile(names[4], P.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, 3, m3, sms[3], (0, 4), 4, 2),
        GiProfile(names[5], P.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, 4, m3, sms[4], (0,), 4, 1),
        GiProfile(names[6], P.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, 7, m7, sms[5], (0,), 8, 1),
    ]
    return MigGeometry(key, 7, 8, tuple(profiles))


GEOMETRIES: Final[dict[str, MigGeometry]] = {
    g.key: g
    for g in (
        # A100 40GB (SXM4 and PCIe): -lgip shows 4.75 / 9.75 / 19.62 / 39.50 GiB.
        _seven_slice(
            key="a100-40gb",
            names=("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
            mem=(4864, 9984, 20096, 40448, 4864),
            sms=(14, 14, 28, 42, 56, 98),
        ),
        # A100 80GB: 9.50 / 19.50 / 39.25 / 79.00 GiB.
        _seven_slice(
            key="a100-80gb",
            names=("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            mem=(9728, 19968, 40192, 80896, 9728),
            sms=(14, 14, 28, 42, 56, 98),
        ),
        # H100 80GB (SXM5 / PCIe): 9.75 / 19.62 / 39.50 / 79.25 GiB.
        _seven_slice(
            key="h100-80gb",
            names=("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
            mem=(9984, 20096, 40448, 81152, 9984),
            sms=(16, 26, 32, 60, 64, 132),
        ),
        # H100 NVL / 94GB: 10.62 / 21.50 / 46.12 / 92.62 GiB.
        _seven_slice(
            key="h100-94gb",
            names=("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
            mem=(10880, 22016, 47232, 94848, 10880),
            sms=(16, 26, 32, 60, 64, 132),
        ),
        # A30 24GB: 4 compute slices over 4 memory slices; 5.81 / 11.69 / 23.50 GiB.
        MigGeometry(
            "a30-24gb",
            4,
            4,
            (
                GiProfile(
                    "1g.6gb",
                    P.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
                    14,
                    1,
                    5952,
                    14,
                    (0, 1, 2, 3),
                    1,
                    4,
                ),
                GiProfile(
                    "1g.6gb+me",
                    P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
                    21,
                    1,
                    5952,
                    14,
                    (0, 1, 2, 3),
                    1,
                    1,
                ),
                GiProfile(
                    "2g.12gb", P.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 5, 2, 11968, 28, (0, 2), 2, 2
                ),
                GiProfile(
                    "4g.24gb", P.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 0, 4, 24064, 56, (0,), 4, 1
                ),
            ),
        ),
    )
}


def geometry_for_product(product: str | None, memory_mib: int | None) -> MigGeometry | None:
    """The MIG geometry of a product name (``NVIDIA A100-SXM4-80GB`` → ``a100-80gb``)."""
    if product is None:
        return None
    p = product.upper().replace(" ", "-")
    gib = (memory_mib or 0) / 1024
    if "A30" in p:
        return GEOMETRIES["a30-24gb"]
    if "A100" in p:
        return GEOMETRIES["a100-80gb" if "80G" in p or gib > 60 else "a100-40gb"]
    if "H100" in p:
        return GEOMETRIES["h100-94gb" if "94G" in p or "NVL" in p or gib > 85 else "h100-80gb"]
    return None


def geometry_for_names(names: Iterable[str]) -> MigGeometry | None:
    """The geometry whose profile names include every name given (for the importer)."""
    wanted = set(names)
    for geo in GEOMETRIES.values():
        if wanted <= {p.name for p in geo.profiles}:
            return geo
    return None
