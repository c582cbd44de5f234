"""The Topos GPU, NUMA and MIG keys of a pod (see docs/scheduling.md, "What a pod can say")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from common import podkeys
from common.podkeys import GPU_RESOURCE
from common.quantity import QuantityError, parse_quantity, to_int
from coordinator.core.podspec.fields import FieldError, key_choice, key_value, written_path
from coordinator.core.podspec.migprofiles import MIG_RESOURCE_PREFIX, is_known_mig_profile

__all__ = ["MAX_MIG_PER_POD", "gpu_memory_mib", "mig_demand", "numa"]

MAX_MIG_PER_POD: Final = 64
_MiB: Final = 2**20


def numa(annotations: Mapping[str, str]) -> tuple[str | None, frozenset[str]]:
    policy = key_choice(podkeys.NUMA_POLICY, annotations, podkeys.NUMA_POLICY_VALUES)
    resources_text = key_value(podkeys.NUMA_RESOURCES, annotations)
    if resources_text is None:
        if policy is None:
            return None, frozenset()
        return policy, frozenset(podkeys.NUMA_RESOURCE_VALUES)
    path = written_path(podkeys.NUMA_RESOURCES, annotations)
    names = [n.strip() for n in resources_text.split(",") if n.strip()]
    if not names:
        raise FieldError(path, "names no resource")
    for n in names:
        if n not in podkeys.NUMA_RESOURCE_VALUES:
            raise FieldError(
                path, f"unknown resource {n!r} (expected {', '.join(podkeys.NUMA_RESOURCE_VALUES)})"
            )
    return policy or "best-effort", frozenset(names)


def gpu_memory_mib(annotations: Mapping[str, str]) -> int | None:
    text = key_value(podkeys.GPU_MEMORY_MIN, annotations)
    if text is None:
        return None
    path = written_path(podkeys.GPU_MEMORY_MIN, annotations)
    try:
        # A bare number is MiB, as nvidia-smi and the node labels count GPU memory.
        mib = int(text) if text.isdigit() else to_int(parse_quantity(text) / _MiB)
    except QuantityError as exc:
        raise FieldError(path, str(exc)) from None
    if mib <= 0 or mib > 16 * 2**20:  # 16 TiB per GPU is no GPU we know of
        raise FieldError(path, f"{text!r} is not a plausible per-GPU memory size")
    return mib


def mig_demand(
    requests: dict[str, int], annotations: Mapping[str, str]
) -> tuple[tuple[tuple[str, int], ...], int, bool]:
    """MIG demand from ``nvidia.com/mig-<profile>`` resources or ``topos.io/mig-profile``.

    Returns (profile counts, whole GPUs left, from_annotation).
    """
    gpus = requests.get(GPU_RESOURCE, 0)
    found: dict[str, int] = {}
    for name, amount in requests.items():
        if name.startswith(MIG_RESOURCE_PREFIX):
            profile = name[len(MIG_RESOURCE_PREFIX) :]
            if not is_known_mig_profile(profile):
                raise FieldError(
                    f"spec.containers[*].resources.limits[{name}]",
                    f"unknown MIG profile {profile!r}",
                )
            found[profile] = amount
    annotated = key_value(podkeys.MIG_PROFILE, annotations)
    from_annotation = False
    if annotated is not None:
        path = written_path(podkeys.MIG_PROFILE, annotations)
        if not is_known_mig_profile(annotated):
            raise FieldError(path, f"unknown MIG profile {annotated!r}")
        if found and set(found) != {annotated}:
            raise FieldError(
                path,
                f"contradicts the requested MIG resources ({', '.join(sorted(found))})",
            )
        if not found:
            # Single-strategy nodes advertise MIG devices as nvidia.com/gpu: N of them is N
            # instances of the annotated profile.
            found[annotated] = max(gpus, 1)
            gpus = 0
            from_annotation = True
    total = sum(found.values())
    if total > MAX_MIG_PER_POD:
        raise FieldError(
            "spec.containers[*].resources", f"{total} MIG instances is more than {MAX_MIG_PER_POD}"
        )
    return tuple(sorted(found.items())), gpus, from_annotation
