"""The state file the C NVML library (``fake_nvml.c``) answers from, written from a ``FakeNvml``.

``state_text(fake)`` asks the profile-driven fake everything the agent's reader asks NVML — by
the same ``pynvml`` function names — and writes the answers in the line format ``fake_nvml.c``
parses. Faults injected into the fake (errors, lost GPUs, link and health changes, events) are
written too, so one fault-injection API drives both the Python fake and the C library.
``write_state`` replaces the file atomically; the library notices the change on its next
``nvmlInit``, ``nvmlDeviceGetHandleByIndex`` or ``nvmlEventSetWait``.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from agent.devices.fake_nvml import FakeNvml

_NOT_SUPPORTED = -1
_WORDS = 16  # CPU bitmask words asked (the reader asks at least 16)
_NODE_WORDS = 4


def _ask(call: Callable[..., Any], *args: Any) -> Any:
    """The fake's answer, or ``None`` where it answers an NVML error."""
    try:
        return call(*args)
    except pynvml.NVMLError:
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def state_text(fake: FakeNvml) -> str:
    """Everything the agent would read from ``fake``, as the C library's state file."""
    faults = fake.standing_errors()
    fake.clear_errors()  # read the hardware as it is; the faults are written as `fail` lines
    fake.nvmlInit()
    try:
        lines = _system(fake)
        handles = [fake.nvmlDeviceGetHandleByIndex(i) for i in range(fake.nvmlDeviceGetCount())]
        for i, handle in enumerate(handles):
            lines += _gpu(fake, i, handle, handles)
    finally:
        fake.nvmlShutdown()
        for function, gpu, code in faults:
            fake.inject_error(function, code, gpu=gpu)
    lines += [f"event {gpu} {kind:x} {data}" for gpu, kind, data in fake.events]
    lines += [f"fail {f} {-1 if gpu is None else gpu} {code}" for f, gpu, code in faults]
    return "\n".join(lines) + "\n"


def write_state(fake: FakeNvml, path: Path) -> None:
    """Write ``fake``'s state to ``path`` atomically (the library never reads half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(state_text(fake))
    os.replace(tmp, path)


def _system(fake: FakeNvml) -> list[str]:
    lines = []
    driver = _ask(fake.nvmlSystemGetDriverVersion)
    if driver is not None:
        lines.append(f"driver {_text(driver)}")
    cuda = _ask(fake.nvmlSystemGetCudaDriverVersion)
    if cuda is not None:
        lines.append(f"cuda {int(cuda)}")
    return lines


def _gpu(fake: FakeNvml, i: int, h: Any, handles: list[Any]) -> list[str]:
    out: list[str] = [f"gpu {i} present 1"]

    def put(field: str, *values: Any) -> None:
        out.append(f"gpu {i} {field} " + " ".join(str(v) for v in values))

    uuid = _ask(fake.nvmlDeviceGetUUID, h)
    if uuid is None:  # GPU_IS_LOST: every query answers that
        put("lost", 1)
        put("bus", fake.gpu_bus_ids()[i], "10de")
        return out
    put("uuid", _text(uuid))
    name = _ask(fake.nvmlDeviceGetName, h)
    if name is not None:
        put("name", _text(name))
    pci = fake.nvmlDeviceGetPciInfo(h)
    put("bus", _text(pci.busId), f"{int(pci.pciDeviceId):x}")
    mem = _ask(fake.nvmlDeviceGetMemoryInfo, h)
    if mem is not None:
        put("mem", int(mem.total), int(mem.free), int(mem.used))
    cc = _ask(fake.nvmlDeviceGetCudaComputeCapability, h)
    if cc is not None:
        put("cc", int(cc[0]), int(cc[1]))
    pcie = [
        _ask(getattr(fake, f), h)
        for f in (
            "nvmlDeviceGetMaxPcieLinkGeneration",
            "nvmlDeviceGetMaxPcieLinkWidth",
            "nvmlDeviceGetCurrPcieLinkGeneration",
            "nvmlDeviceGetCurrPcieLinkWidth",
        )
    ]
    put("pcie", *(_NOT_SUPPORTED if v is None else int(v) for v in pcie))
    power = _ask(fake.nvmlDeviceGetPowerManagementLimit, h)
    if power is not None:
        put("power", int(power))
    cpus = _ask(fake.nvmlDeviceGetCpuAffinity, h, _WORDS)
    if cpus is not None:
        put("cpus", *(f"{int(w):x}" for w in cpus))
    nodes = _ask(fake.nvmlDeviceGetMemoryAffinity, h, _NODE_WORDS, 0)
    if nodes is not None:
        put("nodes", *(f"{int(w):x}" for w in nodes))
    numa = _ask(fake.nvmlDeviceGetNumaNodeId, h)
    if numa is not None:
        put("numa", int(numa))
    out += _links(fake, i, h)
    for j, other in enumerate(handles):
        level = _ask(fake.nvmlDeviceGetTopologyCommonAncestor, h, other)
        if level is not None:
            put("ancestor", j, int(level))
    out += _health(fake, i, h)
    out += _mig(fake, i, h)
    return out


def _links(fake: FakeNvml, i: int, h: Any) -> list[str]:
    out = []
    ports = 0
    for link in range(int(pynvml.NVML_NVLINK_MAX_LINKS)):
        state = _ask(fake.nvmlDeviceGetNvLinkState, h, link)
        if state is None:
            break
        ports = link + 1
        remote = _ask(fake.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
        kind = _ask(fake.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
        counters = [_ask(fake.nvmlDeviceGetNvLinkErrorCounter, h, link, c) for c in range(5)]
        bus = "-" if remote is None else _text(remote.busId)
        pci_id = 0 if remote is None else int(remote.pciDeviceId)
        fields = [link, int(state), 0 if kind is None else int(kind), bus, f"{pci_id:x}"]
        if all(c is not None for c in counters):
            fields += [int(c) for c in counters]
        out.append(f"gpu {i} link " + " ".join(str(f) for f in fields))
    return [f"gpu {i} nvlinks {ports}", *out]


def _health(fake: FakeNvml, i: int, h: Any) -> list[str]:
    out = []
    ecc = [_ask(fake.nvmlDeviceGetTotalEccErrors, h, e, c) for c in (0, 1) for e in (0, 1)]
    if all(v is not None for v in ecc):
        out.append(f"gpu {i} ecc " + " ".join(str(int(v)) for v in ecc))
    sbe = _ask(fake.nvmlDeviceGetRetiredPages, h, 0)
    dbe = _ask(fake.nvmlDeviceGetRetiredPages, h, 1)
    pending = _ask(fake.nvmlDeviceGetRetiredPagesPendingStatus, h)
    if sbe is not None and dbe is not None and pending is not None:
        out.append(f"gpu {i} retired {len(sbe)} {len(dbe)} {int(pending)}")
    remap = _ask(fake.nvmlDeviceGetRemappedRows, h)
    if remap is not None:
        out.append(f"gpu {i} remap " + " ".join(str(int(v)) for v in remap))
    clocks = _ask(fake.nvmlDeviceGetCurrentClocksEventReasons, h)
    if clocks is not None:
        out.append(f"gpu {i} clocks {int(clocks):x}")
    info = pynvml.c_nvmlGpuFabricInfo_v2_t()
    if _ask(fake.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(info)) is not None:
        cluster = bytes(info.clusterUuid).hex()
        out.append(
            f"gpu {i} fabric {cluster} {int(info.status)} {int(info.cliqueId)}"
            f" {int(info.state)} {int(info.healthMask):x}"
        )
    return out


def _mig(fake: FakeNvml, i: int, h: Any) -> list[str]:
    mode = _ask(fake.nvmlDeviceGetMigMode, h)
    if mode is None:
        return []
    most = _ask(fake.nvmlDeviceGetMaxMigDeviceCount, h) or 0
    out = [f"gpu {i} mig {int(mode[0])} {int(mode[1])} {int(most)}"]
    if not int(mode[0]):
        return out
    cis: list[tuple[int, int, int, int, int]] = []
    for index in range(int(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
        p = _ask(fake.nvmlDeviceGetGpuInstanceProfileInfo, h, index)
        if p is None:
            continue
        free = _ask(fake.nvmlDeviceGetGpuInstanceRemainingCapacity, h, p.id) or 0
        out.append(
            f"gpu {i} giprofile {index} {p.id} {p.sliceCount} {p.instanceCount}"
            f" {p.multiprocessorCount} {p.memorySizeMB} {free} {_text(p.name)}"
        )
        array = (fake.c_nvmlGpuInstance_t * max(1, int(p.instanceCount)))()
        count = ctypes.c_uint(0)
        if _ask(fake.nvmlDeviceGetGpuInstances, h, p.id, array, ctypes.byref(count)) is None:
            continue
        for gi in list(array)[: count.value]:
            g = fake.nvmlGpuInstanceGetInfo(gi)
            out.append(f"gpu {i} gi {g.id} {g.profileId} {g.placement.start} {g.placement.size}")
            cis += _cis(fake, i, gi, int(g.id), out)
    uuids: dict[tuple[int, int], str] = {}
    slots: list[tuple[int, int]] = []
    for k in range(int(most)):
        mig = _ask(fake.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
        if mig is None:
            continue
        key = (
            int(fake.nvmlDeviceGetGpuInstanceId(mig)),
            int(fake.nvmlDeviceGetComputeInstanceId(mig)),
        )
        uuids[key] = _text(fake.nvmlDeviceGetUUID(mig))
        slots.append(key)
    order = [(gi_id, ci_id) for gi_id, ci_id, *_ in cis]
    for gi_id, ci_id, index, start, size in cis:
        uuid = uuids.get((gi_id, ci_id), "-")
        out.append(f"gpu {i} ci {gi_id} {ci_id} {index} {start} {size} {uuid}")
    out += [f"gpu {i} migdev {order.index(key)}" for key in slots if key in order]
    return out


def _cis(
    fake: FakeNvml, i: int, gi: Any, gi_id: int, out: list[str]
) -> list[tuple[int, int, int, int, int]]:
    found = []
    for index in range(int(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
        c = _ask(fake.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, index, 0)
        if c is None:
            continue
        out.append(
            f"gpu {i} ciprofile {gi_id} {c.id} {c.sliceCount} {c.instanceCount}"
            f" {c.multiprocessorCount} {_text(c.name)}"
        )
        array = (fake.c_nvmlComputeInstance_t * max(1, int(c.instanceCount)))()
        count = ctypes.c_uint(0)
        if (
            _ask(fake.nvmlGpuInstanceGetComputeInstances, gi, c.id, array, ctypes.byref(count))
            is None
        ):
            continue
        for ci in list(array)[: count.value]:
            info = fake.nvmlComputeInstanceGetInfo(ci)
            found.append(
                (
                    gi_id,
                    int(info.id),
                    int(info.profileId),
                    int(info.placement.start),
                    int(info.placement.size),
                )
            )
    return found
