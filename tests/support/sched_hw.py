"""Hardware for the scheduling tests: node topologies written from public facts about the
machines (nvidia-smi topo -m of a DGX-1 hybrid cube-mesh, NVSwitch DGX A100/H100, a dual-socket
8×PCIe box with PIX pairs, an NVLink-bridged workstation, an A100 in MIG mode), and builders
for nodes and snapshots (pods come from :mod:`devcluster.pods`).

Kept independent of the agent's profile data so these tests pin the scheduler's behaviour to
the link structure itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from common.allocatable import KUBELET_MAX_PODS, allocatable_from_topology
from common.model import Gpu, MigInstance, NodeTopology, NumaNode
from common.podkeys import GPU_RESOURCE, MIG_RESOURCE_PREFIX
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import ScheduleResult
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo, bound_pod_info
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.inventory.translate import bound_pod
from tests.support.mig import mig_instance

GiB = 2**30

# DGX-1 (V100) hybrid cube-mesh: two fully connected quads {0,1,2,3} and {4,5,6,7}, each GPU
# also joined to its twin in the other quad; everything else crosses sockets.
DGX1_LINKS = [
    ["X", "NV1", "NV1", "NV2", "SYS", "SYS", "NV2", "SYS"],
    ["NV1", "X", "NV2", "NV1", "SYS", "SYS", "SYS", "NV2"],
    ["NV1", "NV2", "X", "NV2", "NV1", "SYS", "SYS", "SYS"],
    ["NV2", "NV1", "NV2", "X", "SYS", "NV1", "SYS", "SYS"],
    ["SYS", "SYS", "NV1", "SYS", "X", "NV2", "NV1", "NV2"],
    ["SYS", "SYS", "SYS", "NV1", "NV2", "X", "NV2", "NV1"],
    ["NV2", "SYS", "SYS", "SYS", "NV1", "NV2", "X", "NV1"],
    ["SYS", "NV2", "SYS", "SYS", "NV2", "NV1", "NV1", "X"],
]


def _pcie8_links() -> list[list[str]]:
    """Two sockets; per socket two PCIe switches with two GPUs each (PIX), switches joined
    through the host bridge (NODE); across sockets SYS."""
    rows = []
    for i in range(8):
        row = []
        for j in range(8):
            if i == j:
                row.append("X")
            elif i // 4 != j // 4:
                row.append("SYS")
            elif i // 2 == j // 2:
                row.append("PIX")
            else:
                row.append("NODE")
        rows.append(row)
    return rows


def _uniform(n: int, cell: str) -> list[list[str]]:
    return [["X" if i == j else cell for j in range(n)] for i in range(n)]


def _numa(count: int, cpus_each: int, mem_gib_each: int) -> tuple[NumaNode, ...]:
    return tuple(
        NumaNode(
            id=k,
            cpus=tuple(range(k * cpus_each, (k + 1) * cpus_each)),
            memory_mib=mem_gib_each * 1024,
        )
        for k in range(count)
    )


def topology(
    host: str,
    *,
    links: Sequence[Sequence[str]],
    product: str,
    memory_mib: int,
    gpu_numa: Sequence[int | None],
    numa: tuple[NumaNode, ...],
    nvswitch: bool = False,
    mig: Mapping[int, Sequence[MigInstance]] | None = None,
    unhealthy: Iterable[int] = (),
) -> NodeTopology:
    bad = set(unhealthy)
    gpus = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-{host}-{i}",
            product=product,
            memory_total_mib=memory_mib,
            numa_node=gpu_numa[i],
            mig_capable=mig is not None,
            mig_enabled=bool(mig and i in mig),
            mig_instances=tuple(mig.get(i, ())) if mig else (),
            healthy=i not in bad,
        )
        for i in range(len(links))
    )
    return NodeTopology(
        hostname=host,
        gpus=gpus,
        links=tuple(tuple(r) for r in links),
        nvswitch=nvswitch,
        numa_nodes=numa,
        cpu_count=sum(len(n.cpus) for n in numa),
        memory_mib=sum(n.memory_mib or 0 for n in numa),
        source="profile:test",
    )


def _two_socket_8gpu(
    host: str,
    *,
    links: Sequence[Sequence[str]],
    product: str,
    memory_mib: int,
    cpus_per_socket: int,
    gib_per_socket: int,
    nvswitch: bool = False,
    mig: Mapping[int, Sequence[MigInstance]] | None = None,
) -> NodeTopology:
    """Eight GPUs, 0-3 on NUMA node 0 and 4-7 on NUMA node 1, as on every 8-GPU box here."""
    return topology(
        host,
        links=links,
        product=product,
        memory_mib=memory_mib,
        gpu_numa=[0, 0, 0, 0, 1, 1, 1, 1],
        numa=_numa(2, cpus_per_socket, gib_per_socket),
        nvswitch=nvswitch,
        mig=mig,
    )


def dgx1(host: str) -> NodeTopology:
    return _two_socket_8gpu(
        host,
        links=DGX1_LINKS,
        product="Tesla-V100-SXM2-32GB",
        memory_mib=32768,
        cpus_per_socket=40,
        gib_per_socket=256,
    )


def dgx_a100(host: str) -> NodeTopology:
    return _two_socket_8gpu(
        host,
        links=_uniform(8, "NV12"),
        product="NVIDIA-A100-SXM4-80GB",
        memory_mib=81920,
        cpus_per_socket=64,
        gib_per_socket=512,
        nvswitch=True,
    )


def dgx_h100(host: str) -> NodeTopology:
    return _two_socket_8gpu(
        host,
        links=_uniform(8, "NV18"),
        product="NVIDIA-H100-80GB-HBM3",
        memory_mib=81559,
        cpus_per_socket=56,
        gib_per_socket=1024,
        nvswitch=True,
    )


def pcie8(host: str, *, product: str = "NVIDIA-L40S", memory_mib: int = 46068) -> NodeTopology:
    return _two_socket_8gpu(
        host,
        links=_pcie8_links(),
        product=product,
        memory_mib=memory_mib,
        cpus_per_socket=32,
        gib_per_socket=256,
    )


def ws4(host: str) -> NodeTopology:
    """A workstation: two NVLink-bridged pairs (0-1, 2-3) on one socket."""
    links = [
        ["X", "NV4", "PHB", "PHB"],
        ["NV4", "X", "PHB", "PHB"],
        ["PHB", "PHB", "X", "NV4"],
        ["PHB", "PHB", "NV4", "X"],
    ]
    return topology(
        host,
        links=links,
        product="NVIDIA-RTX-A6000",
        memory_mib=49140,
        gpu_numa=[0, 0, 0, 0],
        numa=_numa(1, 32, 256),
    )


def _mig(
    profile: str, gi: int, start: int, size: int, mem: int, host: str, gpu: int
) -> MigInstance:
    uuid = f"MIG-{host}-{gpu}-{gi}"
    return mig_instance(profile, gi=gi, start=start, size=size, memory_mib=mem, uuid=uuid)


def a100_mig(host: str) -> NodeTopology:
    """DGX A100 80GB with GPU 0 as 7×1g.10gb and GPU 1 as 2×3g.40gb; GPUs 2-7 whole."""
    mig = {
        0: [_mig("1g.10gb", 7 + k, k, 1, 9728, host, 0) for k in range(7)],
        1: [
            _mig("3g.40gb", 1, 4, 4, 40192, host, 1),
            _mig("3g.40gb", 2, 0, 4, 40192, host, 1),
        ],
    }
    return _two_socket_8gpu(
        host,
        links=_uniform(8, "NV12"),
        product="NVIDIA-A100-SXM4-80GB",
        memory_mib=81920,
        cpus_per_socket=64,
        gib_per_socket=512,
        nvswitch=True,
        mig=mig,
    )


def gpu_node(
    name: str,
    topo: NodeTopology | None,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    pods: Iterable[PodInfo] = (),
    cpu: int | None = None,
    memory_gib: int | None = None,
    gpus: int | None = None,
    extra: Mapping[str, int] | None = None,
    **kw: Any,
) -> NodeInfo:
    """A node whose allocatable matches its topology (what the device plugin would report)."""
    devices: dict[str, int] = {}
    if topo is not None:
        derived = allocatable_from_topology(topo)
        devices = {
            k: v
            for k, v in derived.items()
            if k == GPU_RESOURCE or k.startswith(MIG_RESOURCE_PREFIX)
        }
        cpu = cpu if cpu is not None else (topo.cpu_count or 0)
        memory_gib = memory_gib if memory_gib is not None else (topo.memory_mib or 0) // 1024
    alloc = {
        "cpu": (cpu if cpu is not None else 64) * 1000,
        "memory": (memory_gib if memory_gib is not None else 256) * GiB,
        "pods": KUBELET_MAX_PODS,
        "ephemeral-storage": 500 * GiB,
        **devices,
    }
    if gpus is not None:
        alloc[GPU_RESOURCE] = gpus
    alloc.update(extra or {})
    base = {"kubernetes.io/hostname": name}
    if topo is not None and topo.gpus:
        base["nvidia.com/gpu.product"] = topo.gpus[0].product or ""
        base["topos.io/gpu.product"] = topo.gpus[0].product or ""
    base.update(labels or {})
    return NodeInfo.build(
        name, labels=base, allocatable=alloc, taints=taints, topology=topo, pods=pods, **kw
    )


def plain_node(name: str, **kw: Any) -> NodeInfo:
    return gpu_node(name, None, **kw)


def bound_info(obj: Mapping[str, Any], *, node: str = "node") -> PodInfo | None:
    """A pod object as the running coordinator counts it once bound (``None`` when it has
    ended): the inventory's translation, then the one bound-pod converter, as in production."""
    spec = dict(obj.get("spec") or {})
    spec.setdefault("nodeName", node)
    bound = bound_pod({**obj, "spec": spec})
    return None if bound is None else bound_pod_info(bound)


def running(obj: Mapping[str, Any], **placement: Any) -> PodInfo:
    """An existing pod on a node (as the inventory would have it)."""
    info = bound_info(obj)
    assert info is not None
    if placement:
        from dataclasses import replace

        info = replace(info, placement=Placement(**placement))
    return info


def request(obj: Mapping[str, Any]) -> PodRequest:
    parsed = parse_pod(obj)
    assert isinstance(parsed, PodRequest), parsed
    return parsed


def run(
    obj: Mapping[str, Any],
    nodes: Iterable[NodeInfo],
    *,
    config: SchedulerConfig | None = None,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> ScheduleResult:
    return schedule_one(
        obj, Snapshot(nodes, namespaces=namespaces), build_framework(config or SchedulerConfig())
    )


def place_all(
    objs: Iterable[Mapping[str, Any]], snapshot: Snapshot, framework: Framework | None = None
) -> list[ScheduleResult]:
    """Schedule pods one after another, assuming each decision (as the coordinator does)."""
    fw = framework or build_framework()
    out = []
    for obj in objs:
        result = schedule_one(obj, snapshot, fw)
        from coordinator.core.framework.results import Decision

        if isinstance(result, Decision):
            snapshot.assume(request(obj), result.node, result.placement)
        out.append(result)
    return out


def pin_to_node(obj: dict[str, Any], node: str) -> dict[str, Any]:
    """``obj`` (a Pod) pinned to ``node`` as a DaemonSet's pod is: a required node affinity term
    of ``matchFields`` ``metadata.name In [node]``, beside any pod (anti-)affinity it has."""
    pin = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    obj["spec"].setdefault("affinity", {})["nodeAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [pin]}
    }
    return obj
