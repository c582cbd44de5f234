"""sysfs reading: NUMA nodes, CPUs, memory, PCI relations, RDMA NICs, and the psutil fallback."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from agent.devices import NullSource
from agent.devices.sysfs import Sysfs, nvml_bus_id, sysfs_bdf


def _tree(root: Path) -> Sysfs:
    """Two sockets; socket 0 has a PCIe switch with two GPUs and a dual-port NIC on one port."""
    node = root / "sys/devices/system/node"
    for n, cpus in ((0, "0-3,8-11"), (1, "4-7,12-15")):
        (node / f"node{n}").mkdir(parents=True)
        (node / f"node{n}/cpulist").write_text(cpus + "\n")
        (node / f"node{n}/meminfo").write_text(f"Node {n} MemTotal:       2097152 kB\n")
    (root / "sys/devices/system/cpu").mkdir(parents=True)
    (root / "sys/devices/system/cpu/online").write_text("0-15\n")
    bus = root / "sys/bus/pci/devices"
    bus.mkdir(parents=True)
    devices = {
        "0000:00:01.0": "pci0000:00/0000:00:01.0",
        "0000:01:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0",
        "0000:02:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0",
        "0000:02:01.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0",
        "0000:03:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
        "0000:04:00.0": "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
        "0000:00:02.0": "pci0000:00/0000:00:02.0",
        "0000:05:00.0": "pci0000:00/0000:00:02.0/0000:05:00.0",
        "0000:05:00.1": "pci0000:00/0000:00:02.0/0000:05:00.1",
        "0000:40:01.0": "pci0000:40/0000:40:01.0",
        "0000:41:00.0": "pci0000:40/0000:40:01.0/0000:41:00.0",
        "0000:80:01.0": "pci0000:80/0000:80:01.0",
        "0000:81:00.0": "pci0000:80/0000:80:01.0/0000:81:00.0",
    }
    for bdf, rel in devices.items():
        d = root / "sys/devices" / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "numa_node").write_text("1\n" if "pci0000:80" in rel else "0\n")
        os.symlink(d, bus / bdf)
    for name, bdf in (("mlx5_1", "0000:05:00.1"), ("mlx5_0", "0000:05:00.0")):
        ib = root / "sys/class/infiniband" / name
        ib.mkdir(parents=True)
        os.symlink(bus / bdf, ib / "device")
    (root / "proc").mkdir()
    (root / "proc/meminfo").write_text("MemTotal:       4194304 kB\nMemFree: 1 kB\n")
    return Sysfs(root)


def test_numa_cpus_memory(tmp_path: Path) -> None:
    fs = _tree(tmp_path)
    nodes = fs.numa_nodes()
    assert nodes is not None
    assert [(n.id, n.cpus[:4], n.memory_mib) for n in nodes] == [
        (0, (0, 1, 2, 3), 2048),
        (1, (4, 5, 6, 7), 2048),
    ]
    assert fs.cpu_count() == 16
    assert fs.memory_mib() == 4096


def test_pci_relations_follow_the_tree(tmp_path: Path) -> None:
    fs = _tree(tmp_path)
    assert fs.pci_relation("0000:03:00.0", "0000:04:00.0") == "PIX"  # one switch
    assert fs.pci_relation("0000:05:00.0", "0000:05:00.1") == "PIX"  # two ports of one NIC
    assert fs.pci_relation("0000:03:00.0", "0000:05:00.0") == "PHB"  # other root port
    assert fs.pci_relation("0000:03:00.0", "0000:41:00.0") == "NODE"  # other host bridge
    assert fs.pci_relation("0000:03:00.0", "0000:81:00.0") == "SYS"  # other socket
    assert fs.pci_relation("0000:03:00.0", "0000:99:00.0") is None
    assert fs.pci_numa_node("0000:81:00.0") == 1


def test_rdma_nics_in_natural_order(tmp_path: Path) -> None:
    nics = _tree(tmp_path).rdma_nics()
    assert [(n.name, n.pci_bus_id, n.numa_node) for n in nics] == [
        ("mlx5_0", "00000000:05:00.0", 0),
        ("mlx5_1", "00000000:05:00.1", 0),
    ]


def test_missing_files_are_unknown(tmp_path: Path) -> None:
    fs = Sysfs(tmp_path)
    assert fs.numa_nodes() is None
    assert fs.cpu_count() is None
    assert fs.memory_mib() is None
    assert fs.pci_numa_node("0000:03:00.0") is None
    assert fs.rdma_nics() == ()


def test_null_source_falls_back_to_psutil(tmp_path: Path) -> None:
    topo = NullSource(sysfs_root=tmp_path, hostname="cpu-box").discover()
    assert topo.gpus == ()
    assert topo.cpu_count == psutil.cpu_count()
    assert len(topo.numa_nodes) == 1
    assert topo.memory_mib == psutil.virtual_memory().total >> 20


def test_null_source_reads_sysfs(tmp_path: Path) -> None:
    _tree(tmp_path)
    topo = NullSource(sysfs_root=tmp_path, hostname="x").discover()
    assert [n.id for n in topo.numa_nodes] == [0, 1]
    assert topo.memory_mib == 4096


def test_bus_id_forms() -> None:
    assert sysfs_bdf("00000000:9E:00.0") == "0000:9e:00.0"
    assert nvml_bus_id("0000:9e:00.0") == "00000000:9E:00.0"
