"""A fake sysfs tree generated from a profile: NUMA nodes, CPUs, the PCI tree, RDMA NICs.

The PCI tree is built so that ``Sysfs.pci_relation`` gives back the profile's cells: devices are
grouped socket by socket (joined by anything closer than ``SYS``), then host bridge (closer than
``NODE``), root port (closer than ``PHB``) and PCIe switch (``PIX``). GPU pairs joined by NVLink
say nothing about their PCIe path; GPUs with no known PCIe relation at all are placed by NUMA node.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from agent.devices.profile import Profile, ProfileError
from agent.devices.sysfs import Sysfs, sysfs_bdf
from common.model import parse_cpulist

_RANK: Final[dict[str, int]] = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}


class _UnionFind:
    def __init__(self, items: Iterable[int]) -> None:
        self.parent = {i: i for i in items}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)

    def groups(self) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for i in self.parent:
            out.setdefault(self.find(i), []).append(i)
        return sorted((sorted(g) for g in out.values()), key=lambda g: g[0])


def _split(items: Sequence[int], rel: dict[tuple[int, int], int], below: int) -> list[list[int]]:
    uf = _UnionFind(items)
    members = set(items)
    for (a, b), rank in rel.items():
        if rank < below and a in members and b in members:
            uf.union(a, b)
    return uf.groups()


def build_fake_sysfs(profile: Profile, root: Path, *, gpu_bus_ids: Sequence[str]) -> Sysfs:
    """Write the tree under ``root`` (``root/sys/...``) and return a reader for it."""
    sys_dir = root / "sys"
    _write_numa(profile, sys_dir)
    n = len(profile.gpus)
    nics = profile.nics
    devices = [sysfs_bdf(b) for b in gpu_bus_ids]
    used_buses = {d.split(":")[1] for d in devices}
    nic_bdfs: list[str] = []
    for k, nic in enumerate(nics):
        if nic.pci_bus_id is not None:
            bdf = sysfs_bdf(nic.pci_bus_id)
        else:
            bus = _free_bus(used_buses, start=0x40 + 0x08 * k)
            bdf = f"0000:{bus}:00.0"
        used_buses.add(bdf.split(":")[1])
        nic_bdfs.append(bdf)
    devices += nic_bdfs
    if len(set(devices)) != len(devices):
        raise ProfileError(f"{profile.name}: two devices share a PCI bus id")

    # Known relations between device indices (GPUs 0..n-1, then NICs n..n+k-1).
    rel: dict[tuple[int, int], int] = {}
    matrix = profile.link_matrix()
    for i in range(n):
        for j in range(i + 1, n):
            if matrix[i][j] in _RANK:
                rel[(i, j)] = _RANK[matrix[i][j]]
    for i, row in enumerate(profile.nic_matrix()):
        for k, cell in enumerate(row):
            rel[(i, n + k)] = _RANK[cell]
    for a, row in enumerate(profile.nic_nic_matrix()):
        for b, cell in enumerate(row):
            if a < b:
                rel[(n + a, n + b)] = _RANK[cell]
    gpu_numa = [_first(g.numa_affinity) for g in profile.gpus]
    related = {x for pair in rel for x in pair}
    lonely = [i for i in range(n) if i not in related]
    for x, i in enumerate(lonely):  # NVLink-only GPUs: same NUMA node → same socket
        for j in lonely[x + 1 :]:
            if gpu_numa[i] is not None and gpu_numa[i] == gpu_numa[j]:
                rel[(i, j)] = _RANK["NODE"]

    numa_of: dict[int, int | None] = {i: gpu_numa[i] for i in range(n)}
    for k, nic in enumerate(nics):
        numa_of[n + k] = nic.numa_node

    bridges = _BridgeNamer(used_buses)
    paths: dict[int, list[str]] = {}
    roots: dict[int, str] = {}
    port_numa: dict[str, int] = {}
    taken: set[int] = set()
    for socket in _split(range(len(devices)), rel, _RANK["SYS"]):
        votes = Counter(numa_of[d] for d in socket if numa_of[d] is not None)
        numa = next((v for v, _ in votes.most_common() if v is not None and v not in taken), None)
        if numa is None:
            numa = next(x for x in range(1024) if x not in taken and x not in votes)
        taken.add(numa)
        for host in _split(socket, rel, _RANK["NODE"]):
            pci_root = f"pci0000:{bridges.bus()}"
            for port_group in _split(host, rel, _RANK["PHB"]):
                port = bridges.bdf()
                port_numa[port] = numa
                switches = _split(port_group, rel, _RANK["PXB"])
                for d in port_group:
                    roots[d] = pci_root
                if len(port_group) == 1:
                    paths[port_group[0]] = [port]
                elif len(switches) == 1:
                    upstream = bridges.bdf()
                    for d in port_group:
                        paths[d] = [port, upstream, bridges.bdf()]
                else:
                    top = bridges.bdf()
                    for sw in switches:
                        down, up = bridges.bdf(), bridges.bdf()
                        for d in sw:
                            paths[d] = [port, top, down, up, bridges.bdf()]

    _write_tree(sys_dir, devices, paths, roots, port_numa, numa_of, n)
    for k, nic in enumerate(nics):
        cls = sys_dir / "class" / "infiniband" / nic.name
        cls.mkdir(parents=True, exist_ok=True)
        os.symlink(_device_dir(sys_dir, roots[n + k], paths[n + k], nic_bdfs[k]), cls / "device")

    reader = Sysfs(root)
    _check(profile, reader, devices, rel)
    return reader


class _BridgeNamer:
    def __init__(self, used: set[str]) -> None:
        self.used = used
        self.next = 0x01

    def bus(self) -> str:
        bus = _free_bus(self.used, start=self.next)
        self.used.add(bus)
        self.next = int(bus, 16) + 1
        return bus

    def bdf(self) -> str:
        return f"0000:{self.bus()}:00.0"


def _free_bus(used: set[str], *, start: int) -> str:
    for b in list(range(start, 0x100)) + list(range(0x01, start)):
        bus = f"{b:02x}"
        if bus not in used:
            return bus
    raise ProfileError("the profile has more PCI devices than a fake PCI domain can hold")


def _device_dir(sys_dir: Path, root: str, chain: list[str], bdf: str) -> Path:
    return sys_dir.joinpath("devices", root, *chain, bdf)


def _write_tree(
    sys_dir: Path,
    devices: list[str],
    paths: dict[int, list[str]],
    roots: dict[int, str],
    port_numa: dict[str, int],
    numa_of: dict[int, int | None],
    n_gpus: int,
) -> None:
    bus_dir = sys_dir / "bus" / "pci" / "devices"
    bus_dir.mkdir(parents=True, exist_ok=True)
    linked: set[str] = set()
    for d, bdf in enumerate(devices):
        chain = paths[d]
        here = sys_dir / "devices" / roots[d]
        for bridge in chain:
            here = here / bridge
            if bridge not in linked:
                here.mkdir(parents=True, exist_ok=True)
                numa = port_numa.get(bridge, port_numa.get(chain[0], -1))
                (here / "numa_node").write_text(f"{numa}\n")
                (here / "class").write_text("0x060400\n")
                os.symlink(here, bus_dir / bridge)
                linked.add(bridge)
        dev = here / bdf
        dev.mkdir(parents=True, exist_ok=True)
        dev_numa = numa_of[d]
        (dev / "numa_node").write_text(f"{-1 if dev_numa is None else dev_numa}\n")
        (dev / "class").write_text("0x030200\n" if d < n_gpus else "0x020700\n")
        (dev / "vendor").write_text("0x10de\n" if d < n_gpus else "0x15b3\n")
        os.symlink(dev, bus_dir / bdf)


def _write_numa(profile: Profile, sys_dir: Path) -> None:
    node_dir = sys_dir / "devices" / "system" / "node"
    cpu_dir = sys_dir / "devices" / "system" / "cpu"
    cpu_dir.mkdir(parents=True, exist_ok=True)
    all_cpus: set[int] = set()
    for node in profile.numa_nodes:
        d = node_dir / f"node{node.id}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpulist").write_text(node.cpus + "\n")
        all_cpus.update(parse_cpulist(node.cpus))
        if node.memory_mib is not None:
            (d / "meminfo").write_text(
                f"Node {node.id} MemTotal:       {node.memory_mib * 1024} kB\n"
                f"Node {node.id} MemFree:        {node.memory_mib * 1024} kB\n"
            )
    if profile.numa_nodes:
        ids = ",".join(str(node.id) for node in profile.numa_nodes)
        (node_dir / "online").write_text(ids + "\n")
    count = profile.cpu_count or (max(all_cpus) + 1 if all_cpus else 0)
    if count:
        (cpu_dir / "online").write_text(f"0-{count - 1}\n")
    memory = profile.memory_mib
    if memory is None and profile.numa_nodes and all(n.memory_mib for n in profile.numa_nodes):
        memory = sum(n.memory_mib or 0 for n in profile.numa_nodes)
    if memory is not None:
        proc = sys_dir.parent / "proc"
        proc.mkdir(parents=True, exist_ok=True)
        (proc / "meminfo").write_text(f"MemTotal:       {memory * 1024} kB\n")


def _first(cpulist: str | None) -> int | None:
    if not cpulist:
        return None
    ids = parse_cpulist(cpulist)
    return ids[0] if ids else None


def _check(
    profile: Profile, reader: Sysfs, devices: list[str], rel: dict[tuple[int, int], int]
) -> None:
    """The tree must give back every known cell; a matrix no PCI tree can produce is an error."""
    names = {v: k for k, v in _RANK.items()}
    n = len(profile.gpus)
    for (a, b), rank in rel.items():
        got = reader.pci_relation(devices[a], devices[b])
        if got != names[rank]:
            label = [f"GPU{i}" for i in range(n)] + [nic.name for nic in profile.nics]
            raise ProfileError(
                f"{profile.name}: no PCI tree gives {label[a]}–{label[b]} = {names[rank]}"
                f" together with the other cells (a tree built from them gives {got})"
            )
