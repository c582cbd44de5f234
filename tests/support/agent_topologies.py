"""Hand-built topologies for labeler and publisher tests (no NVML, no profiles)."""

from __future__ import annotations

from common.model import Gpu, MigInstance, NodeTopology, NumaNode
from tests.support.mig import mig_instance

A100 = "NVIDIA A100-SXM4-40GB"


def _matrix(n: int, cell: str) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple("X" if i == j else cell for j in range(n)) for i in range(n))


def _numa(split: bool) -> tuple[NumaNode, ...]:
    if split:  # hyperthreads interleaved: not a single range
        return (
            NumaNode(id=0, cpus=(*range(0, 16), *range(32, 48)), memory_mib=65536),
            NumaNode(id=1, cpus=(*range(16, 32), *range(48, 64)), memory_mib=65536),
        )
    return (NumaNode(id=0, cpus=tuple(range(0, 64)), memory_mib=515000),)


def nvswitch_node(n: int = 8, *, product: str = A100, memory_mib: int = 40960) -> NodeTopology:
    gpus = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{i:08d}-aaaa",
            product=product,
            memory_total_mib=memory_mib,
            memory_free_mib=memory_mib - 500,
            compute_capability="8.0",
            pci_bus_id=f"00000000:{7 + i:02X}:00.0",
            numa_node=i // 4,
            mig_capable=True,
            mig_enabled=False,
        )
        for i in range(n)
    )
    return NodeTopology(
        hostname="dgx-0",
        driver_version="535.104.05",
        cuda_version="12.2",
        gpus=gpus,
        links=_matrix(n, "NV12"),
        nvswitch=True,
        numa_nodes=_numa(split=True),
        source="test",
    )


def pcie_node(n: int = 4) -> NodeTopology:
    gpus = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{i:08d}-bbbb",
            product="NVIDIA L40S",
            memory_total_mib=46068,
            compute_capability="8.9",
            numa_node=0 if i < n // 2 else 1,
            mig_capable=False,
            mig_enabled=False,
        )
        for i in range(n)
    )
    links = tuple(
        tuple(
            "X"
            if i == j
            else (
                "PIX" if i // 2 == j // 2 else ("NODE" if (i < n // 2) == (j < n // 2) else "SYS")
            )
            for j in range(n)
        )
        for i in range(n)
    )
    return NodeTopology(
        hostname="pcie-0",
        driver_version="550.54.15",
        cuda_version="12.4",
        gpus=gpus,
        links=links,
        numa_nodes=(
            NumaNode(id=0, cpus=tuple(range(0, 32)), memory_mib=262144),
            NumaNode(id=1, cpus=tuple(range(32, 64)), memory_mib=262144),
        ),
        source="test",
    )


def _inst(profile: str, gi: int, start: int, size: int, mem: int) -> MigInstance:
    uuid = f"MIG-{profile}-{gi}"
    return mig_instance(profile, gi=gi, start=start, size=size, memory_mib=mem, uuid=uuid)


SEVEN_SMALL = tuple(_inst("1g.10gb", 7 + i, i, 1, 9728) for i in range(7))
MIXED_LAYOUT = (
    _inst("3g.40gb", 2, 4, 4, 40192),
    _inst("2g.20gb", 3, 0, 2, 19968),
    _inst("1g.10gb", 9, 2, 1, 9728),
)


def mig_node(layouts: tuple[tuple[MigInstance, ...], ...]) -> NodeTopology:
    """A100 80GB PCIe GPUs, MIG enabled on those whose layout is non-empty."""
    n = len(layouts)
    gpus = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{i:08d}-cccc",
            product="NVIDIA A100 80GB PCIe",
            memory_total_mib=81920,
            compute_capability="8.0",
            mig_capable=True,
            mig_enabled=bool(layout),
            mig_instances=layout,
        )
        for i, layout in enumerate(layouts)
    )
    return NodeTopology(
        hostname="mig-0",
        driver_version="470.57",
        cuda_version="11.4",
        gpus=gpus,
        links=_matrix(n, "SYS"),
        numa_nodes=_numa(split=False),
        source="test",
    )


def unknown_node() -> NodeTopology:
    """NVML said almost nothing."""
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}") for i in range(2))
    return NodeTopology(hostname="mystery", gpus=gpus, links=_matrix(2, "PHB"), source="test")
