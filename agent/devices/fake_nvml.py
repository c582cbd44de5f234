"""A fake of the ``pynvml`` module driven by a hardware profile.

``FakeNvml(profile)`` exposes the functions and constants the NVML reader calls, with the same
names and argument order as ``pynvml``, and raises the real ``pynvml.NVMLError_*`` classes where
real NVML fails: NVLink queries on PCIe GPUs (NotSupported), link numbers past the GPU's ports
(InvalidArgument), MIG calls on GPUs without MIG (NotSupported / InvalidArgument), every query on
a lost GPU (GpuIsLost), calls before ``nvmlInit`` (Uninitialized).

MIG is stateful: GPU and compute instances can be created and destroyed with the NVML calls, with
the placement rules of the GPU's MIG geometry (see ``mig_catalog``), and every query reports the
current state. ``inject_error`` makes any call fail, to test how callers degrade.
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import pynvml

from agent.devices.mig_catalog import CiProfile, GiProfile, MigGeometry, ci_profiles
from agent.devices.profile import Profile, ProfileHealth, mig_geometry
from common.model import Link, parse_cpulist

_UUID_NS: Final = uuidlib.UUID("5f1f4f8e-3c1b-4d53-9d0e-7a6f2b0c9e11")

_TOPOLOGY_LEVEL: Final[dict[str, int]] = {
    "PIX": pynvml.NVML_TOPOLOGY_SINGLE,
    "PXB": pynvml.NVML_TOPOLOGY_MULTIPLE,
    "PHB": pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
    "NODE": pynvml.NVML_TOPOLOGY_NODE,
    "SYS": pynvml.NVML_TOPOLOGY_SYSTEM,
}

# PCI device ids of well-known parts (device << 16 | vendor), reported by GetPciInfo.
_PCI_DEVICE_IDS: Final[dict[str, int]] = {
    "A100-SXM4-40GB": 0x20B010DE,
    "A100-SXM4-80GB": 0x20B210DE,
    "A100 80GB PCIE": 0x20B510DE,
    "H100 80GB HBM3": 0x233010DE,
    "V100-SXM2": 0x1DB110DE,
    "L40S": 0x26B910DE,
}
_NVSWITCH_PCI_ID: Final = 0x1AF110DE


FABRIC_STATES: Final = ("not_supported", "not_started", "in_progress", "completed")


def make_gpu_uuid(hostname: str, index: int) -> str:
    return f"GPU-{uuidlib.uuid5(_UUID_NS, f'{hostname}/gpu{index}')}"


def make_mig_uuid(gpu_uuid: str, gi_id: int, ci_id: int) -> str:
    return f"MIG-{uuidlib.uuid5(_UUID_NS, f'{gpu_uuid}/{gi_id}/{ci_id}')}"


def default_bus_id(index: int) -> str:
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class _HandleArrayType(type):
    """``(c_nvmlGpuInstance_t * n)()`` gives a list of ``n`` empty slots, like the ctypes array."""

    def __mul__(cls, n: int) -> Callable[[], list[Any]]:
        return lambda: [None] * n


class _GpuInstanceArray(metaclass=_HandleArrayType):
    pass


class _ComputeInstanceArray(metaclass=_HandleArrayType):
    pass


def _set_count(ref: Any, value: int) -> None:
    target = getattr(ref, "_obj", ref)  # ctypes.byref(c_uint()) keeps the c_uint in _obj
    target.value = value


@dataclass(slots=True)
class _Struct:
    """Attribute bag standing in for the ctypes structures pynvml returns."""

    values: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(slots=True)
class _EventSet:
    """An ``nvmlEventSet_t``: which event types each GPU reports into it, and what is pending."""

    masks: dict[int, int] = field(default_factory=dict)
    queue: list[_Struct] = field(default_factory=list)
    ready: threading.Condition = field(default_factory=threading.Condition)


@dataclass(slots=True)
class _Fault:
    code: int
    remaining: int | None


@dataclass(eq=False, slots=True)
class _Ci:
    gpu: _Gpu
    gi: _Gi
    id: int
    profile: CiProfile
    start: int


@dataclass(eq=False, slots=True)
class _Gi:
    gpu: _Gpu
    id: int
    profile: GiProfile
    start: int
    cis: dict[int, _Ci] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class _MigDevice:
    gpu: _Gpu
    ci: _Ci


@dataclass(eq=False, slots=True)
class _Link:
    remote_bus: str
    remote_type: int
    remote_pci_id: int
    active: bool = True
    # nvmlNvLinkErrorCounter_t order: replay, recovery, CRC flit, CRC data, ECC data
    counters: list[int] = field(default_factory=lambda: [0, 0, 0, 0, 0])


@dataclass(eq=False, slots=True)
class _Gpu:
    index: int
    uuid: str
    bus_id: str
    name: str | None
    memory_mib: int | None
    memory_used_mib: int
    cc: tuple[int, int] | None
    pcie: tuple[int | None, int | None, int | None, int | None]
    power_mw: int | None
    cpus: tuple[int, ...] | None
    numa: tuple[int, ...] | None
    memory_numa: int | None
    geometry: MigGeometry | None
    mig_current: int
    mig_pending: int
    lost: bool
    health: ProfileHealth = field(default_factory=ProfileHealth)
    links: list[_Link] = field(default_factory=list)
    gis: dict[int, _Gi] = field(default_factory=dict)


class FakeNvml:
    """The profile-driven stand-in for the ``pynvml`` module (see the module docstring)."""

    NVMLError = pynvml.NVMLError
    c_nvmlGpuFabricInfo_t = pynvml.c_nvmlGpuFabricInfo_t
    c_nvmlGpuFabricInfo_v2_t = pynvml.c_nvmlGpuFabricInfo_v2_t
    c_nvmlGpuInstance_t = _GpuInstanceArray
    c_nvmlComputeInstance_t = _ComputeInstanceArray

    def __init__(self, profile: Profile, *, hostname: str | None = None) -> None:
        self.profile = profile
        self.hostname = hostname or profile.hostname or profile.name
        keep_uuids = hostname is None or hostname == (profile.hostname or profile.name)
        self._initialized = 0
        self._faults: dict[tuple[str, int | None], _Fault] = {}
        self._event_sets: list[_EventSet] = []
        self.events: list[tuple[int, int, int]] = []  # every injected (GPU, type, data), in order
        self.calls = 0
        matrix = profile.link_matrix()
        self._matrix = matrix
        self._gpus: list[_Gpu] = []
        for i, g in enumerate(profile.gpus):
            cc = None
            if g.compute_capability is not None:
                major, minor = g.compute_capability.split(".")
                cc = (int(major), int(minor))
            geometry = mig_geometry(g)
            self._gpus.append(
                _Gpu(
                    index=i,
                    uuid=g.uuid if (g.uuid and keep_uuids) else make_gpu_uuid(self.hostname, i),
                    bus_id=(g.pci_bus_id or default_bus_id(i)).upper().replace("0X", "0x"),
                    name=g.product,
                    memory_mib=g.memory_mib,
                    memory_used_mib=g.memory_used_mib,
                    cc=cc,
                    pcie=(
                        g.pcie_gen_max,
                        g.pcie_width_max,
                        g.pcie_gen_current,
                        g.pcie_width_current,
                    ),
                    power_mw=None if g.power_limit_w is None else int(g.power_limit_w * 1000),
                    cpus=None if g.cpu_affinity is None else parse_cpulist(g.cpu_affinity),
                    numa=None if g.numa_affinity is None else parse_cpulist(g.numa_affinity),
                    memory_numa=g.memory_numa_node,
                    geometry=geometry,
                    mig_current=int(g.mig_enabled),
                    mig_pending=int(g.mig_enabled),
                    lost=g.lost,
                    health=msgspec.structs.replace(g.health),
                )
            )
        for gpu in self._gpus:
            gpu.bus_id = _normalise_bus(gpu.bus_id)
        self._build_links()
        for gpu in self._gpus:
            for port, counts in gpu.health.nvlink_errors.items():
                self.set_nvlink(
                    gpu.index,
                    port,
                    crc=counts.get("crc"),
                    replay=counts.get("replay"),
                    recovery=counts.get("recovery"),
                )
            for port in gpu.health.nvlinks_down:
                self.set_nvlink(gpu.index, port, up=False)
        for gpu, g in zip(self._gpus, profile.gpus, strict=True):
            for inst in g.mig_instances:
                assert gpu.geometry is not None  # validated by the profile
                gi_profile = gpu.geometry.by_name(inst.profile)
                assert gi_profile is not None
                gi = self._create_gi(gpu, gi_profile, inst.placement)
                names = [gi_profile.name] if inst.compute is None else inst.compute
                for ci_name in names:
                    ci_profile = next(
                        (c for c in ci_profiles(gi_profile) if c.name == ci_name), None
                    )
                    if ci_profile is None:
                        raise ValueError(
                            f"GPU {gpu.index}: compute instance {ci_name!r} does not fit a"
                            f" {gi_profile.name} GPU instance"
                        )
                    self._create_ci(gi, ci_profile)

    # -- bookkeeping ---------------------------------------------------------------------------
    def _build_links(self) -> None:
        """NVLink ports from the matrix: direct links to peers, or ports to NVSwitches."""
        bus_of = [g.bus_id for g in self._gpus]
        switch_buses = [f"00000000:{0xE0 + k:02X}:00.0" for k in range(6)]
        for i, gpu in enumerate(self._gpus):
            row = self._matrix[i]
            nv = [(j, Link.parse(c).nvlinks) for j, c in enumerate(row) if c.startswith("NV")]
            if self.profile.nvswitch and nv:
                count = max(n for _, n in nv)
                gpu.links = [
                    _Link(
                        switch_buses[k % len(switch_buses)],
                        pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH,
                        _NVSWITCH_PCI_ID,
                    )
                    for k in range(count)
                ]
            else:
                for j, n in nv:
                    pci_id = _pci_device_id(self._gpus[j].name)
                    gpu.links += [
                        _Link(bus_of[j], pynvml.NVML_NVLINK_DEVICE_TYPE_GPU, pci_id)
                        for _ in range(n)
                    ]
            ports = self.profile.gpus[i].nvlinks
            if ports is not None:
                gpu.links += [
                    _Link("", pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN, 0, active=False)
                    for _ in range(ports - len(gpu.links))
                ]

    def inject_error(
        self, function: str, error: int, *, gpu: int | None = None, times: int | None = None
    ) -> None:
        """Make ``function`` raise ``NVMLError(error)``: for one GPU (or every call), ``times``
        times (or until ``clear_errors``)."""
        if not callable(getattr(self, function, None)):
            raise AttributeError(f"the fake NVML has no function {function}")
        self._faults[(function, gpu)] = _Fault(error, times)

    def clear_errors(self) -> None:
        self._faults.clear()

    def standing_errors(self) -> list[tuple[str, int | None, int]]:
        """The injected errors with no count: (function, GPU or ``None`` for all, code)."""
        return [(f, gpu, x.code) for (f, gpu), x in self._faults.items() if x.remaining is None]

    def _enter(self, function: str, gpu: _Gpu | None = None, *, lost_ok: bool = False) -> None:
        self.calls += 1
        if not self._initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        if self._faults:
            for key in ((function, None), (function, None if gpu is None else gpu.index)):
                fault = self._faults.get(key)
                if fault is None:
                    continue
                if fault.remaining is not None:
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        del self._faults[key]
                raise _err(fault.code)
        if gpu is not None and gpu.lost and not lost_ok:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)

    def _gpu(self, handle: Any) -> _Gpu:
        if isinstance(handle, _Gpu):
            return handle
        if isinstance(handle, _MigDevice):
            return handle.gpu
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _mig_enabled(self, gpu: _Gpu) -> MigGeometry:
        if gpu.geometry is None or not gpu.mig_current:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.geometry

    # -- MIG rules -----------------------------------------------------------------------------
    def _gi_fits(self, gpu: _Gpu, p: GiProfile, start: int) -> bool:
        geometry = gpu.geometry
        assert geometry is not None
        if start not in p.starts:
            return False
        used = sum(gi.profile.slices for gi in gpu.gis.values())
        if used + p.slices > geometry.compute_slices:
            return False
        if sum(1 for gi in gpu.gis.values() if gi.profile.id == p.id) >= p.instance_count:
            return False
        if p.media_extensions and any(gi.profile.media_extensions for gi in gpu.gis.values()):
            return False
        end = start + p.size
        return all(
            end <= gi.start or gi.start + gi.profile.size <= start for gi in gpu.gis.values()
        )

    def _gi_start(self, gpu: _Gpu, p: GiProfile) -> int | None:
        geometry = gpu.geometry
        assert geometry is not None
        # A100s fill from the top (first 3g.20gb lands at 4:4), later parts from the bottom.
        starts = sorted(p.starts, reverse=geometry.key.startswith("a100"))
        return next((s for s in starts if self._gi_fits(gpu, p, s)), None)

    def _create_gi(self, gpu: _Gpu, p: GiProfile, placement: int | None) -> _Gi:
        geometry = gpu.geometry
        assert geometry is not None
        if placement is None:
            start = self._gi_start(gpu, p)
            if start is None:
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        else:
            if placement not in p.starts:
                raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if not self._gi_fits(gpu, p, placement):
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            start = placement
        # GI ids: the lowest free id of the instance's size class (7g: 0, halves: 1-2, …).
        base = 0
        size = geometry.memory_slices
        while size > p.size:
            base += geometry.memory_slices // size
            size //= 2
        slots = geometry.memory_slices // p.size
        gi_id = next(k for k in range(base, base + slots) if k not in gpu.gis)
        gi = _Gi(gpu, gi_id, p, start)
        gpu.gis[gi_id] = gi
        return gi

    def _ci_start(self, gi: _Gi, c: CiProfile) -> int | None:
        used = sum(ci.profile.slices for ci in gi.cis.values())
        if used + c.slices > gi.profile.slices:
            return None
        for s in c.starts:
            if all(
                s + c.slices <= ci.start or ci.start + ci.profile.slices <= s
                for ci in gi.cis.values()
            ):
                return s
        return None

    def _create_ci(self, gi: _Gi, c: CiProfile) -> _Ci:
        start = self._ci_start(gi, c)
        if start is None:
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ci_id = next(k for k in range(16) if k not in gi.cis)
        ci = _Ci(gi.gpu, gi, ci_id, c, start)
        gi.cis[ci_id] = ci
        return ci

    def _remaining(self, gpu: _Gpu, p: GiProfile) -> int:
        added: list[int] = []
        try:
            while (start := self._gi_start(gpu, p)) is not None:
                gi = self._create_gi(gpu, p, start)
                added.append(gi.id)
        finally:
            for gi_id in added:
                del gpu.gis[gi_id]
        return len(added)

    def _mig_devices(self, gpu: _Gpu) -> list[_Ci]:
        return [
            ci
            for gi in sorted(gpu.gis.values(), key=lambda g: g.id)
            for ci in sorted(gi.cis.values(), key=lambda c: c.id)
        ]

    # -- initialisation and system -------------------------------------------------------------
    @staticmethod
    def nvmlErrorString(result: int) -> str:
        return str(pynvml.NVMLError(result))

    def nvmlInit(self) -> None:
        self._initialized += 1

    def nvmlInitWithFlags(self, flags: int) -> None:
        self._initialized += 1

    def nvmlShutdown(self) -> None:
        if not self._initialized:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        if self.profile.driver_version is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.profile.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        if self.profile.cuda_version is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        major, _, minor = self.profile.cuda_version.partition(".")
        return int(major) * 1000 + int(minor or 0) * 10

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    # -- devices -------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Gpu:
        self._enter(
            "nvmlDeviceGetHandleByIndex",
            self._gpus[index] if 0 <= index < len(self._gpus) else None,
            lost_ok=True,
        )
        if not 0 <= index < len(self._gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._gpus[index]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetUUID", gpu)
        if isinstance(handle, _MigDevice):
            return make_mig_uuid(gpu.uuid, handle.ci.gi.id, handle.ci.id)
        return gpu.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetName", gpu)
        if gpu.name is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if isinstance(handle, _MigDevice):
            return f"{gpu.name} MIG {handle.ci.profile.name}"
        return gpu.name

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> _Struct:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetMemoryInfo", gpu)
        if isinstance(handle, _MigDevice):
            total = handle.ci.gi.profile.memory_mib << 20
            return _Struct({"total": total, "free": total, "used": 0})
        if gpu.memory_mib is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        total = gpu.memory_mib << 20
        used = gpu.memory_used_mib << 20
        return _Struct({"total": total, "free": total - used, "used": used})

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetCudaComputeCapability", gpu)
        if gpu.cc is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.cc

    def nvmlDeviceGetPciInfo(self, handle: Any) -> _Struct:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetPciInfo", gpu)
        return _pci_struct(gpu.bus_id, _pci_device_id(gpu.name))

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    def _pcie(self, function: str, handle: Any, k: int) -> int:
        gpu = self._gpu(handle)
        self._enter(function, gpu)
        value = gpu.pcie[k]
        if value is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie("nvmlDeviceGetMaxPcieLinkGeneration", handle, 0)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie("nvmlDeviceGetMaxPcieLinkWidth", handle, 1)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._pcie("nvmlDeviceGetCurrPcieLinkGeneration", handle, 2)

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._pcie("nvmlDeviceGetCurrPcieLinkWidth", handle, 3)

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetPowerManagementLimit", gpu)
        if gpu.power_mw is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetCpuAffinity(self, handle: Any, cpuSetSize: int) -> list[int]:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetCpuAffinity", gpu)
        if gpu.cpus is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _bitmask(gpu.cpus, cpuSetSize)

    def nvmlDeviceGetMemoryAffinity(self, handle: Any, nodeSetSize: int, scope: int) -> list[int]:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetMemoryAffinity", gpu)
        if gpu.numa is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _bitmask(gpu.numa, nodeSetSize)

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetNumaNodeId", gpu)
        if gpu.memory_numa is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.memory_numa

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        a, b = self._gpu(device1), self._gpu(device2)
        self._enter("nvmlDeviceGetTopologyCommonAncestor", a)
        if b.lost:
            raise _err(pynvml.NVML_ERROR_GPU_IS_LOST)
        if a is b:
            return int(pynvml.NVML_TOPOLOGY_INTERNAL)
        cell = self._matrix[a.index][b.index]
        if cell in _TOPOLOGY_LEVEL:
            return _TOPOLOGY_LEVEL[cell]
        # NVLink-joined pair: the PCIe path behind it follows the NUMA layout.
        same = a.numa is not None and b.numa is not None and a.numa[:1] == b.numa[:1]
        return int(pynvml.NVML_TOPOLOGY_NODE if same else pynvml.NVML_TOPOLOGY_SYSTEM)

    # -- NVLink --------------------------------------------------------------------------------
    def _link(self, function: str, device: Any, link: int) -> _Link:
        gpu = self._gpu(device)
        self._enter(function, gpu)
        if not gpu.links:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.links):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.links[link]

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        state = self._link("nvmlDeviceGetNvLinkState", device, link)
        return int(pynvml.NVML_FEATURE_ENABLED if state.active else pynvml.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> _Struct:
        state = self._link("nvmlDeviceGetNvLinkRemotePciInfo", device, link)
        if not state.active:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _pci_struct(state.remote_bus, state.remote_pci_id)

    nvmlDeviceGetNvLinkRemotePciInfo_v2 = nvmlDeviceGetNvLinkRemotePciInfo

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        state = self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        if not state.active:
            return int(pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN)
        return state.remote_type

    # -- MIG: mode and GPU instances -----------------------------------------------------------
    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetMigMode", gpu)
        if gpu.geometry is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_current, gpu.mig_pending]

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        """Switch MIG mode; the fake applies it at once (as after the GPU reset it needs)."""
        gpu = self._gpu(device)
        self._enter("nvmlDeviceSetMigMode", gpu)
        if gpu.geometry is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if mode not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if gpu.gis:
            raise _err(pynvml.NVML_ERROR_IN_USE)
        gpu.mig_current = gpu.mig_pending = mode
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> _Struct:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo", gpu)
        if gpu.geometry is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= profile < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        p = gpu.geometry.by_index(profile)
        if p is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _Struct(
            {
                "id": p.id,
                "isP2pSupported": 0,
                "sliceCount": p.slices,
                "instanceCount": p.instance_count,
                "multiprocessorCount": p.sms,
                "copyEngineCount": p.slices,
                "decoderCount": 0,
                "encoderCount": 0,
                "jpegCount": 0,
                "ofaCount": 0,
                "memorySizeMB": p.memory_mib,
                "name": f"MIG {p.name}".encode(),
            }
        )

    nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo

    def _gi_profile(self, gpu: _Gpu, profile_id: int) -> GiProfile:
        geometry = self._mig_enabled(gpu)
        p = geometry.by_id(profile_id)
        if p is None:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return p

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device: Any, profileId: int) -> int:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetGpuInstanceRemainingCapacity", gpu)
        return self._remaining(gpu, self._gi_profile(gpu, profileId))

    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: list[Any], countRef: Any
    ) -> int:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetGpuInstances", gpu)
        p = self._gi_profile(gpu, profileId)
        found = sorted((gi for gi in gpu.gis.values() if gi.profile.id == p.id), key=lambda g: g.id)
        if len(found) > len(gpuInstancesRef):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for k, gi in enumerate(found):
            gpuInstancesRef[k] = gi
        _set_count(countRef, len(found))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceCreateGpuInstance(self, device: Any, profileId: int) -> _Gi:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceCreateGpuInstance", gpu)
        return self._create_gi(gpu, self._gi_profile(gpu, profileId), None)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: Any, profileId: int, placement: Any
    ) -> _Gi:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceCreateGpuInstanceWithPlacement", gpu)
        p = self._gi_profile(gpu, profileId)
        start = getattr(placement, "start", placement)
        if hasattr(placement, "size") and placement.size != p.size:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._create_gi(gpu, p, int(start))

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        gi = self._gi(gpuInstance)
        self._enter("nvmlGpuInstanceDestroy", gi.gpu)
        if gi.cis:
            raise _err(pynvml.NVML_ERROR_IN_USE)
        del gi.gpu.gis[gi.id]
        return int(pynvml.NVML_SUCCESS)

    def _gi(self, handle: Any) -> _Gi:
        if not isinstance(handle, _Gi) or handle.gpu.gis.get(handle.id) is not handle:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> _Struct:
        gi = self._gi(gpuInstance)
        self._enter("nvmlGpuInstanceGetInfo", gi.gpu)
        return _Struct(
            {
                "device": gi.gpu,
                "id": gi.id,
                "profileId": gi.profile.id,
                "placement": _Struct({"start": gi.start, "size": gi.profile.size}),
            }
        )

    # -- MIG: compute instances ----------------------------------------------------------------
    def _ci_profile_by_index(self, gi: _Gi, index: int) -> CiProfile:
        for c in ci_profiles(gi.profile):
            if c.index == index:
                return c
        raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> _Struct:
        gi = self._gi(device)
        self._enter("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi.gpu)
        if not 0 <= profile < pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if engProfile != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        c = self._ci_profile_by_index(gi, profile)
        return _Struct(
            {
                "id": c.index,
                "sliceCount": c.slices,
                "instanceCount": len(c.starts),
                "multiprocessorCount": c.sms,
                "sharedCopyEngineCount": gi.profile.slices,
                "sharedDecoderCount": 0,
                "sharedEncoderCount": 0,
                "sharedJpegCount": 0,
                "sharedOfaCount": 0,
                "name": f"MIG {c.name}".encode(),
            }
        )

    nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo

    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
        self, gpuInstance: Any, profileId: int
    ) -> int:
        gi = self._gi(gpuInstance)
        self._enter("nvmlGpuInstanceGetComputeInstanceRemainingCapacity", gi.gpu)
        c = self._ci_profile_by_index(gi, profileId)
        made: list[int] = []
        try:
            while self._ci_start(gi, c) is not None:
                made.append(self._create_ci(gi, c).id)
        finally:
            for ci_id in made:
                del gi.cis[ci_id]
        return len(made)

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: list[Any], countRef: Any
    ) -> int:
        gi = self._gi(gpuInstance)
        self._enter("nvmlGpuInstanceGetComputeInstances", gi.gpu)
        c = self._ci_profile_by_index(gi, profileId)
        found = sorted(
            (ci for ci in gi.cis.values() if ci.profile.index == c.index), key=lambda x: x.id
        )
        if len(found) > len(computeInstancesRef):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for k, ci in enumerate(found):
            computeInstancesRef[k] = ci
        _set_count(countRef, len(found))
        return int(pynvml.NVML_SUCCESS)

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> _Ci:
        gi = self._gi(gpuInstance)
        self._enter("nvmlGpuInstanceCreateComputeInstance", gi.gpu)
        return self._create_ci(gi, self._ci_profile_by_index(gi, profileId))

    def _ci(self, handle: Any) -> _Ci:
        if not isinstance(handle, _Ci) or handle.gi.cis.get(handle.id) is not handle:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if handle.gpu.gis.get(handle.gi.id) is not handle.gi:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        ci = self._ci(computeInstance)
        self._enter("nvmlComputeInstanceDestroy", ci.gpu)
        del ci.gi.cis[ci.id]
        return int(pynvml.NVML_SUCCESS)

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> _Struct:
        ci = self._ci(computeInstance)
        self._enter("nvmlComputeInstanceGetInfo", ci.gpu)
        return _Struct(
            {
                "device": ci.gpu,
                "gpuInstance": ci.gi,
                "id": ci.id,
                "profileId": ci.profile.index,
                "placement": _Struct({"start": ci.start, "size": ci.profile.slices}),
            }
        )

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    # -- MIG devices ---------------------------------------------------------------------------
    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetMaxMigDeviceCount", gpu)
        if gpu.geometry is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.geometry.compute_slices if gpu.mig_current else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> _MigDevice:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", gpu)
        if gpu.geometry is None or not gpu.mig_current or isinstance(device, _MigDevice):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        devices = self._mig_devices(gpu)
        if not 0 <= index < len(devices):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return _MigDevice(gpu, devices[index])

    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> int:
        self._enter("nvmlDeviceIsMigDeviceHandle")
        return int(isinstance(device, _MigDevice))

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> _Gpu:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if not isinstance(migDevice, _MigDevice):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return migDevice.gpu

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetGpuInstanceId", gpu)
        if not isinstance(device, _MigDevice):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return device.ci.gi.id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetComputeInstanceId", gpu)
        if not isinstance(device, _MigDevice):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return device.ci.id

    # -- conveniences for tests and the simulator ----------------------------------------------
    def gpu_bus_ids(self) -> list[str]:
        return [g.bus_id for g in self._gpus]

    def gpu_uuids(self) -> list[str]:
        return [g.uuid for g in self._gpus]

    def mark_lost(self, index: int, lost: bool = True) -> None:
        """Simulate a GPU falling off the bus (every query then answers GPU_IS_LOST)."""
        self._gpus[index].lost = lost

    # -- health: ECC, retired pages, row remapping, clock reasons, NVLink errors, fabric -------
    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int:
        state = self._link("nvmlDeviceGetNvLinkErrorCounter", device, link)
        if not 0 <= counter < len(state.counters):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return state.counters[counter]

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> list[_Struct]:
        """NVLink error counters as field values (``NVML_FI_DEV_NVLINK_ERROR_DL_*``, the link
        as scope); other fields answer NotSupported each, as on a GPU without them."""
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetFieldValues", gpu)
        slots = {
            pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: (0,),
            pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: (1,),
            pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: (2, 3),
        }
        out = []
        for item in fieldIds:
            field_id, scope = item if isinstance(item, tuple) else (item, 0)
            code, value = int(pynvml.NVML_ERROR_NOT_SUPPORTED), 0
            if field_id in slots and gpu.links:
                if 0 <= scope < len(gpu.links):
                    code = int(pynvml.NVML_SUCCESS)
                    value = sum(gpu.links[scope].counters[k] for k in slots[field_id])
                else:
                    code = int(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            out.append(
                _Struct(
                    {
                        "fieldId": field_id,
                        "scopeId": scope,
                        "nvmlReturn": code,
                        "valueType": pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                        "value": _Struct({"ullVal": value}),
                    }
                )
            )
        return out

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetTotalEccErrors", gpu)
        if errorType not in (0, 1) or counterType not in (0, 1):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        h = gpu.health
        return h.ecc_uncorrected if errorType else h.ecc_corrected

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetRetiredPages", gpu)
        if sourceFilter not in (0, 1):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        n = gpu.health.retired_double_bit if sourceFilter else gpu.health.retired_single_bit
        return [0x1000 * (k + 1) + (0x800000 if sourceFilter else 0) for k in range(n)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus", gpu)
        return int(gpu.health.retired_pending)

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceGetRemappedRows", gpu)
        h = gpu.health
        return (
            h.remapped_corrected,
            h.remapped_uncorrected,
            int(h.remap_pending),
            int(h.remap_failure),
        )

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", gpu)
        return gpu.health.clocks_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        gpu = self._gpu(handle)
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", gpu)
        return gpu.health.clocks_event_reasons

    def _fabric(self, function: str, device: Any, ref: Any, versioned: bool) -> int:
        gpu = self._gpu(device)
        self._enter(function, gpu)
        fabric = gpu.health.fabric
        if fabric is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = getattr(ref, "_obj", ref)  # ctypes.byref(struct) keeps the struct in _obj
        if versioned and int(info.version) not in (
            pynvml.nvmlGpuFabricInfo_v2,
            getattr(pynvml, "nvmlGpuFabricInfo_v3", -1),
        ):
            raise _err(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        raw = bytes.fromhex(fabric.cluster_uuid.replace("-", ""))[:16].ljust(16, b"\0")
        for k, byte in enumerate(raw):
            info.clusterUuid[k] = byte
        info.status = fabric.status
        info.cliqueId = fabric.clique_id
        info.state = FABRIC_STATES.index(fabric.state)
        if versioned:
            info.healthMask = fabric.health_mask
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetGpuFabricInfoV(self, device: Any, gpuFabricInfo: Any) -> int:
        return self._fabric("nvmlDeviceGetGpuFabricInfoV", device, gpuFabricInfo, True)

    def nvmlDeviceGetGpuFabricInfo(self, device: Any, gpuFabricInfo: Any) -> int:
        return self._fabric("nvmlDeviceGetGpuFabricInfo", device, gpuFabricInfo, False)

    def set_pcie(self, index: int, *, gen: int | None = None, width: int | None = None) -> None:
        """The PCIe link GPU ``index`` trained to now (current generation / width)."""
        gpu = self._gpus[index]
        gen_max, width_max, gen_now, width_now = gpu.pcie
        gpu.pcie = (
            gen_max,
            width_max,
            gen_now if gen is None else gen,
            width_now if width is None else width,
        )

    def _peer_port(self, index: int, port: int) -> _Link | None:
        """The far end of a direct NVLink: the peer's k-th link back, for our k-th link to it."""
        links = self._gpus[index].links
        link = links[port]
        if link.remote_type != pynvml.NVML_NVLINK_DEVICE_TYPE_GPU:
            return None
        mine = self._gpus[index].bus_id
        peer = next((g for g in self._gpus if g.bus_id == link.remote_bus), None)
        if peer is None:
            return None
        ordinal = sum(1 for k in links[:port] if k.remote_bus == link.remote_bus)
        back = [k for k in peer.links if k.remote_bus == mine]
        return back[ordinal] if ordinal < len(back) else None

    def set_health(self, index: int, **changes: Any) -> None:
        """Change what GPU ``index``'s health calls answer (``ProfileHealth`` field names):
        ``set_health(0, ecc_uncorrected=3)``, ``set_health(2, fabric=ProfileFabric(...))``."""
        gpu = self._gpus[index]
        gpu.health = msgspec.structs.replace(gpu.health, **changes)

    def set_nvlink(
        self,
        index: int,
        port: int,
        *,
        up: bool | None = None,
        crc: int | None = None,
        replay: int | None = None,
        recovery: int | None = None,
    ) -> None:
        """Take NVLink ``port`` of GPU ``index`` down/up, or set its error counters (absolute
        values since the driver loaded; a lower value than before is a counter reset)."""
        links = self._gpus[index].links
        if not 0 <= port < len(links):
            raise ValueError(f"GPU {index} has no NVLink port {port} (it has {len(links)})")
        link = links[port]
        if up is not None:
            link.active = up
            peer = self._peer_port(index, port)
            if peer is not None:  # a direct GPU-GPU link is down at both ends
                peer.active = up
        for slot, value in ((2, crc), (0, replay), (1, recovery)):
            if value is not None:
                link.counters[slot] = value

    # -- events (XID / ECC; added for the agent's health watcher) -------------------------------
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError
    nvmlEventTypeDoubleBitEccError = pynvml.nvmlEventTypeDoubleBitEccError

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        return _EventSet()

    def nvmlDeviceRegisterEvents(self, device: Any, eventTypes: int, eventSet: Any) -> None:
        gpu = self._gpu(device)
        self._enter("nvmlDeviceRegisterEvents", gpu)
        if not isinstance(eventSet, _EventSet):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with eventSet.ready:
            eventSet.masks[gpu.index] = eventSet.masks.get(gpu.index, 0) | int(eventTypes)
        if all(e is not eventSet for e in self._event_sets):
            self._event_sets.append(eventSet)

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> _Struct:
        """Blocks up to ``timeoutms`` like the driver; raises Timeout when nothing arrived."""
        self._enter("nvmlEventSetWait")
        if not isinstance(eventSet, _EventSet):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        with eventSet.ready:
            if not eventSet.queue:
                eventSet.ready.wait(timeoutms / 1000)
            if not eventSet.queue:
                raise _err(pynvml.NVML_ERROR_TIMEOUT)
            return eventSet.queue.pop(0)

    nvmlEventSetWait_v2 = nvmlEventSetWait

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        if isinstance(eventSet, _EventSet):
            self._event_sets[:] = [e for e in self._event_sets if e is not eventSet]

    def inject_event(self, index: int, *, xid: int | None = None) -> int:
        """Deliver an event for GPU ``index`` to every set registered for it: an XID critical
        error ``xid``, or a double-bit ECC error when ``xid`` is ``None``. Returns how many sets
        received it (0: nobody is watching that GPU for that event type)."""
        gpu = self._gpus[index]
        kind = (
            pynvml.nvmlEventTypeXidCriticalError
            if xid is not None
            else pynvml.nvmlEventTypeDoubleBitEccError
        )
        self.events.append((index, kind, 0 if xid is None else xid))
        delivered = 0
        for event_set in list(self._event_sets):
            with event_set.ready:
                if event_set.masks.get(index, 0) & kind:
                    event_set.queue.append(
                        _Struct(
                            {
                                "device": gpu,
                                "eventType": kind,
                                "eventData": 0 if xid is None else xid,
                                "gpuInstanceId": 0xFFFFFFFF,
                                "computeInstanceId": 0xFFFFFFFF,
                            }
                        )
                    )
                    event_set.ready.notify_all()
                    delivered += 1
        return delivered


def _install_constants() -> None:
    """Give the fake every ``NVML_*`` constant and ``NVMLError*`` class of the real module."""
    for name, value in vars(pynvml).items():
        wanted = (name.startswith("NVML_") and isinstance(value, int)) or name.startswith(
            "NVMLError"
        )
        if wanted and not hasattr(FakeNvml, name):
            setattr(FakeNvml, name, value)


_install_constants()


def _normalise_bus(bus: str) -> str:
    domain, _, rest = bus.partition(":")
    return f"{int(domain, 16):08X}:{rest.upper()}"


def _pci_device_id(product: str | None) -> int:
    if product:
        up = product.upper()
        for key, value in _PCI_DEVICE_IDS.items():
            if key in up:
                return value
    return 0x000010DE


def _pci_struct(bus_id: str, device_id: int) -> _Struct:
    domain, bus, rest = ([*bus_id.split(":"), "0", "0", "0.0"])[:3]
    return _Struct(
        {
            "busId": bus_id.encode(),
            "busIdLegacy": bus_id[-12:].encode(),
            "domain": int(domain or "0", 16),
            "bus": int(bus or "0", 16),
            "device": int(rest.split(".")[0] or "0", 16),
            "pciDeviceId": device_id,
            "pciSubSystemId": 0,
        }
    )


def _bitmask(ids: tuple[int, ...], words: int) -> list[int]:
    out = [0] * words
    for i in ids:
        if i // 64 < words:
            out[i // 64] |= 1 << (i % 64)
    return out
