"""A GPU's memory as a size class: the marketed size users ask for and labels name.

NVML (and so ``nvidia-smi``, GFD's ``nvidia.com/gpu.memory`` label, HAMi and KAI) reports the
memory a GPU has for programs, in MiB, which lies below its marketed size by what the driver and
ECC keep: an "H100 80GB" reports 81,559 MiB, under 80 GiB (81,920 MiB). Asked "80Gi" against the
reported MiB, it would never qualify. Topos therefore reads a GPU's size as its **class**: the
reported MiB rounded to the nearest whole GiB (half up), so 81,559 MiB is the 80Gi class, 40,960
the 40Gi class, 46,068 (L40S) the 45Gi class. The ``neuronetes.io/gpu-memory`` label names the
class, and a minimum asked of every GPU (``topos.io/gpu-memory-min``, an AgentPool's
``gpuRequirements.memory``) is met when the class reaches it — one rule, so selecting the label
and asking its value always agree. Amounts a pod holds of a shared GPU are real MiB, not classes.
"""

from __future__ import annotations

from typing import Final

__all__ = ["class_gib", "class_mib"]

_GiB_MiB: Final = 1024


def class_gib(mib: int) -> int:
    """Whole GiB of the size class of a GPU reporting ``mib`` (81,559 → 80)."""
    return (mib + _GiB_MiB // 2) // _GiB_MiB


def class_mib(mib: int) -> int:
    """The size class in MiB (81,559 → 81,920): what a minimum per-GPU ask is compared with."""
    return class_gib(mib) * _GiB_MiB
