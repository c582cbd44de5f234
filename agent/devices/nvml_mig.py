"""A MIG-enabled GPU's instances (GPU and compute instances, their placements and ``MIG-…``
UUIDs) and the profiles still creatable on it, as NVML reports them."""

from __future__ import annotations

import ctypes
import math
from typing import Any

from agent.devices.mig_catalog import ci_profile_name
from agent.devices.nvml_probe import Probe, as_text
from common.model import MigInstance, MigProfileCapacity


def read_mig(
    nvml: Any, probe: Probe, handle: Any
) -> tuple[bool | None, bool | None, tuple[MigInstance, ...], tuple[MigProfileCapacity, ...]]:
    try:
        mode = probe.raising("nvmlDeviceGetMigMode", handle)
    except nvml.NVMLError_NotSupported:
        return False, False, (), ()
    except nvml.NVMLError as exc:
        probe.errors.append(f"nvmlDeviceGetMigMode: {exc}")
        return None, None, (), ()
    enabled = int(mode[0]) == int(nvml.NVML_DEVICE_MIG_ENABLE)
    if not enabled:
        return True, False, (), ()

    uuids = _mig_uuids(nvml, probe, handle)
    instances: list[MigInstance] = []
    creatable: list[MigProfileCapacity] = []
    for index in range(int(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        try:
            info = probe.raising("nvmlDeviceGetGpuInstanceProfileInfo", handle, index)
        except nvml.NVMLError_FunctionNotFound:
            info = probe("nvmlDeviceGetGpuInstanceProfileInfo", handle, index, 1)
        except nvml.NVMLError:
            continue  # this part has no such profile
        if info is None:
            continue
        gi_name = _profile_name(info)
        free = probe("nvmlDeviceGetGpuInstanceRemainingCapacity", handle, info.id)
        if free is not None:
            creatable.append(
                MigProfileCapacity(
                    profile=gi_name,
                    free=int(free),
                    total=int(info.instanceCount),
                    memory_mib=int(info.memorySizeMB),
                    slices=int(info.sliceCount),
                )
            )
        if int(info.instanceCount) == 0:
            continue
        gi_array = (nvml.c_nvmlGpuInstance_t * int(info.instanceCount))()
        gi_count = ctypes.c_uint(0)
        if (
            probe("nvmlDeviceGetGpuInstances", handle, info.id, gi_array, ctypes.byref(gi_count))
            is None
        ):
            continue
        for gi in list(gi_array)[: gi_count.value]:
            gi_info = probe("nvmlGpuInstanceGetInfo", gi)
            if gi_info is None:
                continue
            instances += _read_cis(nvml, probe, gi, gi_info, gi_name, info, uuids)
    instances.sort(key=lambda m: (m.gi_id, -1 if m.ci_id is None else m.ci_id))
    return True, True, tuple(instances), tuple(creatable)


def _read_cis(
    nvml: Any,
    probe: Probe,
    gi: Any,
    gi_info: Any,
    gi_name: str,
    gi_profile: Any,
    uuids: dict[tuple[int, int], str],
) -> list[MigInstance]:
    gi_id = int(gi_info.id)
    start = int(gi_info.placement.start)
    size = int(gi_info.placement.size)
    memory = int(gi_profile.memorySizeMB)
    gi_slices = int(gi_profile.sliceCount)
    found: list[MigInstance] = []
    engine = int(getattr(nvml, "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", 0))
    for index in range(int(nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
        try:
            ci_profile = probe.raising(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, index, engine
            )
        except nvml.NVMLError_FunctionNotFound:  # drivers before the V call: ask version 1
            ci_profile = probe("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, index, engine, 1)
        except nvml.NVMLError:
            continue  # no such split for this GPU instance
        if ci_profile is None:
            continue
        if int(ci_profile.instanceCount) == 0:
            continue
        ci_array = (nvml.c_nvmlComputeInstance_t * int(ci_profile.instanceCount))()
        ci_count = ctypes.c_uint(0)
        got = probe(
            "nvmlGpuInstanceGetComputeInstances",
            gi,
            ci_profile.id,
            ci_array,
            ctypes.byref(ci_count),
        )
        if got is None:
            continue
        for ci in list(ci_array)[: ci_count.value]:
            ci_info = probe("nvmlComputeInstanceGetInfo", ci)
            if ci_info is None:
                continue
            ci_id = int(ci_info.id)
            slices = int(ci_profile.sliceCount)
            found.append(
                MigInstance(
                    profile=ci_profile_name(gi_name, slices, gi_slices),
                    gi_id=gi_id,
                    ci_id=ci_id,
                    placement_start=start,
                    placement_size=size,
                    memory_mib=memory,
                    slices=slices,
                    uuid=uuids.get((gi_id, ci_id)),
                )
            )
    if not found:  # a GPU instance without compute instances
        found.append(
            MigInstance(
                profile=gi_name,
                gi_id=gi_id,
                placement_start=start,
                placement_size=size,
                memory_mib=memory,
                slices=gi_slices,
            )
        )
    return found


def _mig_uuids(nvml: Any, probe: Probe, handle: Any) -> dict[tuple[int, int], str]:
    """(GPU instance, compute instance) → ``MIG-…`` UUID, from the MIG device handles."""
    out: dict[tuple[int, int], str] = {}
    count = probe("nvmlDeviceGetMaxMigDeviceCount", handle)
    for i in range(int(count or 0)):
        try:
            mig = probe.raising("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
        except nvml.NVMLError:
            continue  # NOT_FOUND: no MIG device at this index
        gi = probe("nvmlDeviceGetGpuInstanceId", mig)
        ci = probe("nvmlDeviceGetComputeInstanceId", mig)
        uuid = probe("nvmlDeviceGetUUID", mig)
        if gi is not None and ci is not None and uuid is not None:
            out[(int(gi), int(ci))] = as_text(uuid)
    return out


def _profile_name(info: Any) -> str:
    name = as_text(getattr(info, "name", b"")).strip()
    if name.startswith("MIG "):
        name = name[4:]
    if name:
        return name
    gib = math.ceil(int(info.memorySizeMB) / 1024)
    return f"{int(info.sliceCount)}g.{gib}gb"
