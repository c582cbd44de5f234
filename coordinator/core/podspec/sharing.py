"""Part of one GPU: ``topos.io/gpu-fraction`` and ``topos.io/gpu-memory``, and the peers' words for
them (docs/sharing.md).

A pod asks for a share of ONE GPU by compute (a fraction, counted here in thousandths of a GPU,
rounded up) and/or memory (MiB). What it leaves out is taken in proportion to what it gives: a
fraction of 0.5 holds half the GPU's memory too, 20Gi of an 80Gi GPU holds a quarter of its
compute (KAI's reading). Both given, each counts on its own (HAMi's ``gpumem`` + ``gpucores``).

Spellings read, each in its own unit:

=================================  =============================================================
``topos.io/gpu-fraction``          annotation, decimal ``0 < f ≤ 1`` (KAI alias ``gpu-fraction``)
``topos.io/gpu-memory``            annotation, quantity; a bare number is MiB (alias ``gpu-memory``)
``nvidia.com/gpumem``              HAMi resource, MiB
``nvidia.com/gpumem-percentage``   HAMi resource, percent of the GPU's memory
``nvidia.com/gpucores``            HAMi resource, percent of the GPU's SMs
``volcano.sh/vgpu-memory``         Volcano vGPU resource, MiB (``-percentage`` as HAMi's)
``volcano.sh/vgpu-cores``          Volcano vGPU resource, percent of the SMs
``aliyun.com/gpu-mem``             Aliyun gpushare resource, GiB
=================================  =============================================================

A share is part of one GPU: with ``nvidia.com/gpu`` (or ``volcano.sh/vgpu-number``,
``aliyun.com/gpu-count``) above 1 it is an error; with exactly 1 the pod takes one device-plugin
unit, which only a node handing out replicas of its GPUs (time-slicing, MPS, HAMi) can give it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final

from common import podkeys
from common.podkeys import GPU_RESOURCE
from common.quantity import QuantityError, format_bytes, parse_quantity, to_int
from coordinator.core.podspec.fields import FieldError, key_value, written_path

__all__ = [
    "SHARE_RESOURCES",
    "WHOLE",
    "GpuShare",
    "HeldShare",
    "gib_text",
    "gpu_share",
    "mib_text",
    "parse_held",
]

WHOLE: Final = 1000  # a GPU in thousandths
_MiB: Final = 2**20
_MAX_MIB: Final = 16 * 2**20  # 16 TiB on one GPU is no GPU we know of

# resource → (what it gives, multiplier to thousandths or MiB)
_COMPUTE: Final = {"nvidia.com/gpucores": 10, "volcano.sh/vgpu-cores": 10}
_MEMORY: Final = {"nvidia.com/gpumem": 1, "volcano.sh/vgpu-memory": 1, "aliyun.com/gpu-mem": 1024}
_MEMORY_SHARE: Final = {
    "nvidia.com/gpumem-percentage": 10,
    "volcano.sh/vgpu-memory-percentage": 10,
}
_COUNTS: Final = (GPU_RESOURCE, "volcano.sh/vgpu-number", "aliyun.com/gpu-count")
#: Resources only a sharing device plugin advertises: a node without them leaves them to it
#: (the kubelet drops extended resources its node does not list before admitting a pod).
SHARE_RESOURCES: Final = frozenset({*_COMPUTE, *_MEMORY, *_MEMORY_SHARE, *_COUNTS[1:]})


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def mib_text(mib: int) -> str:
    """``40960`` → ``40Gi``: memory as users write it."""
    return format_bytes(mib * _MiB)


def gib_text(mib: int) -> str:
    """``81559`` → ``79.6Gi``: an amount of memory for people to read."""
    return mib_text(mib) if mib % 1024 == 0 else f"{mib / 1024:.1f}Gi"


@dataclass(frozen=True, slots=True)
class HeldShare:
    """What a fractional pod holds of its GPU: compute in thousandths, memory in MiB."""

    milli: int
    memory_mib: int

    def text(self) -> str:
        """The ``topos.io/gpu-share`` value: ``fraction=0.5,memory=40Gi``."""
        return f"fraction={self.milli / WHOLE:g},memory={mib_text(self.memory_mib)}"

    def of_gpu(self, gpu: int) -> str:
        """For people: ``0.5 of GPU 3, 39.8Gi of its memory``."""
        return f"{self.milli / WHOLE:g} of GPU {gpu}, {gib_text(self.memory_mib)} of its memory"


@dataclass(frozen=True, slots=True)
class GpuShare:
    """A pod's ask of one GPU. ``None`` parts follow the other part (see the module doc)."""

    milli: int | None = None  # compute, thousandths of the GPU
    memory_mib: int | None = None
    memory_milli: int | None = None  # memory as thousandths of the GPU's (a percentage ask)
    replica: bool = False  # also asks one nvidia.com/gpu (a time-slicing/MPS replica)
    path: str = ""  # the field it was written in, for messages
    memory_path: str = ""  # the field its memory was written in (an ask by memory)

    @property
    def by_memory(self) -> bool:
        return self.memory_mib is not None or self.memory_milli is not None

    def on_gpu(self, gpu_mib: int | None) -> HeldShare | None:
        """What the share holds of a GPU with ``gpu_mib`` memory (``None``: unknown memory, which
        an ask by memory cannot be checked against)."""
        if gpu_mib is None or gpu_mib <= 0:
            if self.by_memory:
                return None
            return HeldShare(self.milli or WHOLE, 0)
        memory = self.memory_mib
        if memory is None:
            part = self.memory_milli if self.memory_milli is not None else self.milli
            # rounded down, so that shares adding up to the whole GPU fit it
            memory = (part or WHOLE) * gpu_mib // WHOLE
        milli = self.milli
        if milli is None:
            milli = (
                self.memory_milli
                if self.memory_milli is not None
                else _ceil_div(memory * WHOLE, gpu_mib)
            )
        return HeldShare(min(milli, WHOLE), memory)


def parse_held(text: str) -> HeldShare | None:
    """A ``topos.io/gpu-share`` value back (a bound pod after a restart); ``None`` when odd."""
    if not text:
        return None  # a pod holding whole GPUs (no exception raised and caught for it)
    parts = dict(p.partition("=")[::2] for p in text.replace(" ", "").split(",") if "=" in p)
    try:
        milli = int(Decimal(parts["fraction"]) * WHOLE)
        memory = _memory_mib(parts.get("memory", "0") or "0")
    except (KeyError, InvalidOperation, QuantityError, ValueError):
        return None
    if not 0 < milli <= WHOLE or memory < 0:
        return None
    return HeldShare(milli, memory)


def _memory_mib(text: str) -> int:
    return int(text) if text.isdigit() else to_int(parse_quantity(text) / _MiB)


def _fraction(annotations: Mapping[str, str]) -> int | None:
    text = key_value(podkeys.GPU_FRACTION, annotations)
    if text is None:
        return None
    path = written_path(podkeys.GPU_FRACTION, annotations)
    try:
        value = Decimal(text)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite():
        raise FieldError(path, f"{text!r} is not a number: write a fraction of one GPU, e.g. 0.25")
    if not 0 < value <= 1:
        raise FieldError(
            path,
            f"{text!r} is not in (0, 1]: a fraction is part of one GPU "
            f"(ask for whole GPUs with {GPU_RESOURCE})",
        )
    return max(1, int((value * WHOLE).to_integral_value(rounding="ROUND_CEILING")))


def _memory(annotations: Mapping[str, str]) -> int | None:
    text = key_value(podkeys.GPU_MEMORY, annotations)
    if text is None:
        return None
    path = written_path(podkeys.GPU_MEMORY, annotations)
    try:
        mib = _memory_mib(text)
    except QuantityError as exc:
        raise FieldError(
            path, f"{exc} (write GPU memory as 10Gi, or MiB as a bare number)"
        ) from None
    if mib <= 0 or mib > _MAX_MIB:
        raise FieldError(path, f"{text!r} is not a plausible amount of one GPU's memory")
    return mib


def _resource_path(name: str) -> str:
    return f"spec.containers[*].resources.limits[{name}]"


def _agree(found: list[tuple[str, int]], what: str) -> int | None:
    if not found:
        return None
    for path, value in found[1:]:
        if value != found[0][1]:
            raise FieldError(
                found[0][0], f"{found[0][1]} {what} contradicts {path} ({value} {what})"
            )
    return found[0][1]


def gpu_share(
    requests: Mapping[str, int],
    annotations: Mapping[str, str],
    gpus: int,
    zeros: Mapping[str, str] | None = None,
) -> GpuShare | None:
    """The pod's share of one GPU, or ``None`` when it asks for none. ``gpus``: its whole GPUs
    (``nvidia.com/gpu`` left after MIG); ``zeros``: resources written as 0, with their field
    (:func:`~coordinator.core.podspec.resources.zero_asks`). Raises :class:`FieldError` naming
    the key at fault."""
    for name, path in (zeros or {}).items():
        if name in _COMPUTE or name in _MEMORY_SHARE:
            raise FieldError(path, "0 is not a percentage from 1 to 100")
        if name in _MEMORY:
            raise FieldError(
                path, "0 is no amount of GPU memory: ask for some, or leave the resource out"
            )
    compute: list[tuple[str, int]] = []
    memory: list[tuple[str, int]] = []
    memory_part: list[tuple[str, int]] = []
    milli = _fraction(annotations)
    if milli is not None:
        compute.append((written_path(podkeys.GPU_FRACTION, annotations), milli))
    mib = _memory(annotations)
    if mib is not None:
        memory.append((written_path(podkeys.GPU_MEMORY, annotations), mib))
    for table, into in ((_COMPUTE, compute), (_MEMORY, memory), (_MEMORY_SHARE, memory_part)):
        for name, scale in table.items():
            amount = requests.get(name)
            if amount is None:
                continue
            path = _resource_path(name)
            if table is not _MEMORY and not 0 < amount <= 100:
                raise FieldError(path, f"{amount} is not a percentage from 1 to 100")
            into.append((path, amount * scale))
    if not (compute or memory or memory_part):
        return None
    first = (compute or memory or memory_part)[0][0]
    for name in _COUNTS:
        count = gpus if name == GPU_RESOURCE else requests.get(name, 0)
        if count > 1:
            raise FieldError(
                first,
                f"a share is part of ONE GPU, but the pod asks for {count} {name}; "
                "ask for whole GPUs without a share, or for one GPU",
            )
    return GpuShare(
        milli=_agree(compute, "thousandths of a GPU"),
        memory_mib=_agree(memory, "MiB"),
        memory_milli=_agree(memory_part, "thousandths of its memory"),
        replica=gpus == 1,
        path=first,
        memory_path=(memory or memory_part or [("", 0)])[0][0],
    )
