"""What Linux sysfs says about NUMA nodes, PCI devices and RDMA NICs.

Every reader takes the filesystem root (``/`` on a node, a temp dir holding a fake tree from
``fake_sysfs`` in tests and simulation), reads plain files and never raises for a missing or
unreadable file: the answer is then ``None`` (unknown) or empty.

PCI relations between two devices are classified like ``nvidia-smi topo -m`` from their sysfs
paths (``/sys/devices/pci0000:00/<root port>/<bridge>/…/<device>``):

``PIX``  both hang below the same bridge (at most one bridge between them)
``PXB``  the same PCIe tree below the host bridge, through several bridges
``PHB``  the same host bridge (PCI root), different root ports
``NODE`` different host bridges, same NUMA node (of their root ports)
``SYS``  different NUMA nodes
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

from common.model import ModelError, Nic, NumaNode, parse_cpulist

_BDF_RE: Final = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_NODE_DIR_RE: Final = re.compile(r"^node(\d+)$")
_MEMTOTAL_RE: Final = re.compile(r"MemTotal:\s+(\d+)\s*kB")


def sysfs_bdf(bus_id: str) -> str:
    """NVML's ``00000000:07:00.0`` → sysfs's ``0000:07:00.0``."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return bus_id.lower()


def nvml_bus_id(bdf: str) -> str:
    """sysfs's ``0000:07:00.0`` → NVML's ``00000000:07:00.0``."""
    domain, _, rest = bdf.partition(":")
    try:
        return f"{int(domain, 16):08X}:{rest.upper()}"
    except ValueError:
        return bdf


@dataclass(frozen=True, slots=True)
class PciPath:
    root: str  # "pci0000:00"
    chain: tuple[str, ...]  # BDFs from the root port down to the device itself


class Sysfs:
    """Reads one sysfs tree, rooted at ``root`` (``/`` for the real one)."""

    def __init__(self, root: str | Path = "/") -> None:
        self.root = Path(root)
        self.sys = self.root / "sys"
        self._paths: dict[str, PciPath | None] = {}
        self._port_numas: dict[str, int] = {}

    def forget(self) -> None:
        """Drop what was cached about PCI paths (call before each discovery: hotplug)."""
        self._paths.clear()
        self._port_numas.clear()

    # -- small file helpers ----------------------------------------------------------------------
    def _read(self, path: Path) -> str | None:
        try:
            return path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return None

    def _int(self, path: Path) -> int | None:
        text = self._read(path)
        if text is None:
            return None
        try:
            return int(text, 0)
        except ValueError:
            return None

    # -- NUMA and CPUs ---------------------------------------------------------------------------
    def numa_nodes(self) -> tuple[NumaNode, ...] | None:
        """NUMA nodes with CPU lists and memory; ``None`` when sysfs has no node directory."""
        base = self.sys / "devices" / "system" / "node"
        try:
            entries = sorted(
                (int(m.group(1)), e.name)
                for e in os.scandir(base)
                if (m := _NODE_DIR_RE.match(e.name))
            )
        except OSError:
            return None
        if not entries:
            return None
        nodes: list[NumaNode] = []
        for node_id, name in entries:
            cpulist = self._read(base / name / "cpulist") or ""
            try:
                cpus = parse_cpulist(cpulist)
            except ModelError:
                cpus = ()
            memory = None
            meminfo = self._read(base / name / "meminfo")
            if meminfo is not None and (m := _MEMTOTAL_RE.search(meminfo)):
                memory = int(m.group(1)) // 1024
            nodes.append(NumaNode(id=node_id, cpus=cpus, memory_mib=memory))
        return tuple(nodes)

    def cpu_count(self) -> int | None:
        text = self._read(self.sys / "devices" / "system" / "cpu" / "online")
        if text is None:
            return None
        try:
            return len(parse_cpulist(text)) or None
        except ModelError:
            return None

    def memory_mib(self) -> int | None:
        """Total memory from ``<root>/proc/meminfo``."""
        text = self._read(self.root / "proc" / "meminfo")
        if text is not None and (m := _MEMTOTAL_RE.search(text)):
            return int(m.group(1)) // 1024
        return None

    # -- PCI -------------------------------------------------------------------------------------
    def pci_device_dir(self, bdf: str) -> Path:
        return self.sys / "bus" / "pci" / "devices" / bdf

    def pci_numa_node(self, bdf: str) -> int | None:
        """The device's NUMA node; ``None`` when unknown (missing file or ``-1``)."""
        value = self._int(self.pci_device_dir(bdf) / "numa_node")
        return value if value is not None and value >= 0 else None

    def pci_path(self, bdf: str) -> PciPath | None:
        if bdf not in self._paths:
            self._paths[bdf] = self._pci_path(bdf)
        return self._paths[bdf]

    def _pci_path(self, bdf: str) -> PciPath | None:
        try:
            real = Path(os.path.realpath(self.pci_device_dir(bdf)))
            rel = real.relative_to(Path(os.path.realpath(self.sys / "devices")))
        except (OSError, ValueError):
            return None
        parts = rel.parts
        if not parts or not parts[0].startswith("pci") or not self.pci_device_dir(bdf).exists():
            return None
        chain = tuple(p for p in parts[1:] if _BDF_RE.match(p))
        if not chain or chain[-1] != bdf:
            return None
        return PciPath(parts[0], chain)

    def _port_numa(self, path: PciPath) -> int:
        """NUMA node of the root port above a device (-1 when unknown)."""
        port = path.chain[0]
        if port not in self._port_numas:
            value = self._int(self.pci_device_dir(port) / "numa_node")
            self._port_numas[port] = -1 if value is None else value
        return self._port_numas[port]

    def pci_relation(self, bdf_a: str, bdf_b: str) -> str | None:
        """``PIX``/``PXB``/``PHB``/``NODE``/``SYS`` between two PCI devices; ``None`` if unknown."""
        a, b = self.pci_path(bdf_a), self.pci_path(bdf_b)
        if a is None or b is None:
            return None
        if a.root != b.root:
            return "NODE" if self._port_numa(a) == self._port_numa(b) else "SYS"
        bridges_a, bridges_b = a.chain[:-1], b.chain[:-1]
        common = 0
        while (
            common < min(len(bridges_a), len(bridges_b)) and bridges_a[common] == bridges_b[common]
        ):
            common += 1
        if common == 0:
            return "PHB"
        if max(len(bridges_a), len(bridges_b)) - common <= 1:
            return "PIX"
        return "PXB"

    # -- NICs ------------------------------------------------------------------------------------
    def rdma_nics(self) -> tuple[Nic, ...]:
        """RDMA devices (``/sys/class/infiniband``), the NICs ``nvidia-smi topo -m`` lists."""
        base = self.sys / "class" / "infiniband"
        try:
            names = [e.name for e in os.scandir(base)]
        except OSError:
            return ()
        nics: list[Nic] = []
        for name in sorted(names, key=_natural_key):
            bdf = None
            try:
                target = Path(os.path.realpath(base / name / "device")).name
                if _BDF_RE.match(target):
                    bdf = target
            except OSError:
                pass
            nics.append(
                Nic(
                    name=name,
                    pci_bus_id=None if bdf is None else nvml_bus_id(bdf),
                    numa_node=None if bdf is None else self.pci_numa_node(bdf),
                )
            )
        return tuple(nics)


def _natural_key(name: str) -> tuple[object, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def psutil_numa_fallback() -> tuple[tuple[NumaNode, ...], int | None, int | None]:
    """One NUMA node holding every CPU and all memory, from psutil (no sysfs NUMA data)."""
    count = psutil.cpu_count(logical=True)
    memory = psutil.virtual_memory().total // (1 << 20)
    cpus = tuple(range(count)) if count else ()
    return (NumaNode(id=0, cpus=cpus, memory_mib=memory),), count, memory
