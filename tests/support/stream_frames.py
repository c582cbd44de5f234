"""Hand-built node topologies and frame helpers for the stream, inventory and API tests."""

from __future__ import annotations

import msgspec

from common.model import Gpu, NodeTopology, NumaNode
from common.wire import ContainerAllocation, DeviceAllocation, Hello
from tests.support.mig import mig_instance


def topology(hostname: str = "node-a", *, gpus: int = 2, nvlink: bool = True) -> NodeTopology:
    """``gpus`` A100s split over two NUMA nodes, NVLink-joined (or PCIe only)."""
    half = max(1, gpus // 2)
    gpu_list = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{hostname}-{i}",
            product="NVIDIA A100-SXM4-80GB",
            memory_total_mib=81920,
            memory_free_mib=81920,
            numa_node=0 if i < half else 1,
            mig_capable=True,
            mig_enabled=False,
        )
        for i in range(gpus)
    )
    links = tuple(
        tuple(
            "X"
            if i == j
            else ("NV12" if nvlink else ("NODE" if (i < half) == (j < half) else "SYS"))
            for j in range(gpus)
        )
        for i in range(gpus)
    )
    return NodeTopology(
        hostname=hostname,
        driver_version="550.54.15",
        cuda_version="12.4",
        gpus=gpu_list,
        links=links,
        nvswitch=nvlink,
        numa_nodes=(
            NumaNode(id=0, cpus=tuple(range(0, 16)), memory_mib=262144),
            NumaNode(id=1, cpus=tuple(range(16, 32)), memory_mib=262144),
        ),
        cpu_count=32,
        memory_mib=524288,
        source="profile:test",
    )


def with_gpu(topo: NodeTopology, index: int, **changes: object) -> NodeTopology:
    gpus = list(topo.gpus)
    gpus[index] = msgspec.structs.replace(gpus[index], **changes)
    return msgspec.structs.replace(topo, gpus=tuple(gpus))


def mig_layout(topo: NodeTopology, index: int, profiles: list[str]) -> NodeTopology:
    """GPU ``index`` switched to MIG with one instance per profile (``"3g.40gb"`` …)."""
    instances = []
    start = 0
    for gi, profile in enumerate(profiles):
        slices = int(profile.split("g", 1)[0])
        instances.append(
            mig_instance(
                profile,
                gi=gi + 1,
                start=start,
                size=slices,
                memory_mib=int(profile.split(".")[1].removesuffix("gb")) * 1024,
                uuid=f"MIG-{topo.gpus[index].uuid}-{gi + 1}",
            )
        )
        start += slices
    return with_gpu(topo, index, mig_enabled=True, mig_instances=tuple(instances))


def allocation(pod: str, *uuids: str, namespace: str = "default") -> ContainerAllocation:
    return ContainerAllocation(
        namespace=namespace,
        pod=pod,
        container="main",
        devices=(DeviceAllocation(resource="nvidia.com/gpu", ids=uuids, numa_nodes=(0,)),),
        cpus=(0, 1),
    )


def hello(node: str = "node-a", *, agent_id: str = "agent-1", seq: int = 0, **kw: object) -> Hello:
    topo = kw.pop("topology", None) or topology(node)
    return Hello(
        node=node,
        agent_version="test",
        agent_id=agent_id,
        seq=seq,
        topology=topo,
        **kw,  # type: ignore[arg-type]
    )
