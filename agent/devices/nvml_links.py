"""The link matrix of a node, as ``nvidia-smi topo -m`` prints it: ``NV<n>`` for GPU pairs joined
by NVLink (directly or through a shared NVSwitch), else the PCI relation (NVML's common ancestor,
then the sysfs PCI tree, then ``SYS``); GPU↔NIC and NIC↔NIC cells come from the PCI tree alone."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent.devices.nvml_probe import Probe, norm_bus
from agent.devices.sysfs import Sysfs, sysfs_bdf
from common.model import Nic

_LEVEL_CELLS: Final = (  # NVML_TOPOLOGY_* attribute → matrix cell
    ("NVML_TOPOLOGY_INTERNAL", "PIX"),
    ("NVML_TOPOLOGY_SINGLE", "PIX"),
    ("NVML_TOPOLOGY_MULTIPLE", "PXB"),
    ("NVML_TOPOLOGY_HOSTBRIDGE", "PHB"),
    ("NVML_TOPOLOGY_NODE", "NODE"),
    ("NVML_TOPOLOGY_SYSTEM", "SYS"),
)


@dataclass(frozen=True)
class Port:
    """One NVLink port as the matrix walk found it (the health read asks its counters)."""

    link: int
    up: bool
    peer_bus_id: str | None


@dataclass(frozen=True)
class Links:
    cells: tuple[tuple[str, ...], ...]
    nvswitch: bool
    ports: tuple[tuple[Port, ...], ...] = ()  # per GPU


def link_matrix(
    nvml: Any, handles: list[Any], probes: list[Probe], buses: list[str | None], sysfs: Sysfs
) -> Links:
    n = len(handles)
    index_of = {bus: i for i, bus in enumerate(buses) if bus is not None}
    direct: list[Counter[int]] = [Counter() for _ in range(n)]
    switch_ports = [0] * n
    switches: list[set[str]] = [set() for _ in range(n)]
    switch_type = int(getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2))
    gpu_type = int(getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0))
    enabled = int(getattr(nvml, "NVML_FEATURE_ENABLED", 1))
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    ports: list[list[Port]] = [[] for _ in range(n)]
    for i, handle in enumerate(handles):
        if handle is None:
            continue
        probe = probes[i]
        for link in range(max_links):
            try:
                state = probe.raising("nvmlDeviceGetNvLinkState", handle, link)
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
                break  # a PCIe-only GPU, or past its last NVLink port
            except nvml.NVMLError_GpuIsLost:
                break
            except nvml.NVMLError:
                continue  # this one port would not answer
            if int(state) != enabled:
                ports[i].append(Port(link, False, None))
                continue
            remote = probe("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            if remote is None:
                ports[i].append(Port(link, True, None))
                continue
            remote_bus = norm_bus(remote.busId)
            ports[i].append(Port(link, True, remote_bus))
            kind = probe("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            if kind is not None and int(kind) == switch_type:
                switch_ports[i] += 1
                switches[i].add(remote_bus)
            elif remote_bus in index_of and (kind is None or int(kind) == gpu_type):
                direct[i][index_of[remote_bus]] += 1
            elif kind is None and remote_bus not in index_of:
                # Older drivers cannot name the remote type: a non-GPU peer is an NVSwitch.
                switch_ports[i] += 1
                switches[i].add(remote_bus)

    levels = {int(getattr(nvml, attr)): cell for attr, cell in _LEVEL_CELLS if hasattr(nvml, attr)}
    rows = [["X"] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            count = max(direct[i][j], direct[j][i])
            if count:
                cell = f"NV{count}"
            elif switch_ports[i] and switch_ports[j] and switches[i] & switches[j]:
                cell = f"NV{min(switch_ports[i], switch_ports[j])}"
            else:
                cell = _pcie_cell(nvml, handles[i], handles[j], buses[i], buses[j], levels, sysfs)
            rows[i][j] = rows[j][i] = cell
    return Links(
        tuple(tuple(r) for r in rows),
        nvswitch=any(switch_ports),
        ports=tuple(tuple(p) for p in ports),
    )


def _pcie_cell(
    nvml: Any,
    a: Any,
    b: Any,
    bus_a: str | None,
    bus_b: str | None,
    levels: dict[int, str],
    sysfs: Sysfs,
) -> str:
    if a is not None and b is not None:
        # a lost *peer* must not mark this GPU lost: ask through a throwaway probe
        level = Probe(nvml)("nvmlDeviceGetTopologyCommonAncestor", a, b)
        if level is not None and int(level) in levels:
            return levels[int(level)]
    return _pci_cell(sysfs, bus_a, bus_b)


def nic_matrices(
    sysfs: Sysfs, nics: Sequence[Nic], gpu_buses: Sequence[str | None]
) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]]:
    """(GPU × NIC cells, NIC × NIC cells), from the PCI tree; both empty without NICs."""
    if not nics:
        return (), ()
    nic_buses = [n.pci_bus_id for n in nics]
    gpu_nic = tuple(tuple(_pci_cell(sysfs, g, k) for k in nic_buses) for g in gpu_buses)
    nic_nic = tuple(
        tuple(
            "X" if a == b else _pci_cell(sysfs, nic_buses[a], nic_buses[b])
            for b in range(len(nics))
        )
        for a in range(len(nics))
    )
    return gpu_nic, nic_nic


def _pci_cell(sysfs: Sysfs, bus_a: str | None, bus_b: str | None) -> str:
    """The sysfs PCI tree's relation of two bus ids; ``SYS`` when either is unknown."""
    if bus_a is None or bus_b is None:
        return "SYS"
    return sysfs.pci_relation(sysfs_bdf(bus_a), sysfs_bdf(bus_b)) or "SYS"
