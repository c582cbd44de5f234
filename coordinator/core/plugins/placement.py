"""Where inside one node a pod goes: which GPUs, which MIG instances, which NUMA nodes.

NUMA policies (docs/design.md §4), over the resources the pod names (``cpu``, ``memory``,
``nvidia.com/gpu``; all three by default):

``best-effort``  prefer one NUMA node holding everything; otherwise place anyway.
``restricted``   use the fewest NUMA nodes whose free capacity together fits.
``single-numa``  everything from one NUMA node, or the node is rejected with
                 "no single NUMA node has sufficient capacity".
``isolated``     one NUMA node no other pod uses (and none will while this pod runs).

Without a policy the pod is not pinned; its NUMA nodes are reported as those of its GPUs.
The result is a :class:`Plan` (a :class:`~.nodeinfo.Placement` plus what scoring needs) or a
rejecting :class:`~.status.Status`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from common import gpumemory
from common.model import Link
from common.podkeys import GPU_RESOURCE
from coordinator.core.plugins.fragmentation import DEFAULT_MIX, Mix, felt, node_room
from coordinator.core.plugins.gpuchoice import GpuChoice, topology_index
from coordinator.core.plugins.sharedchoice import choose_share
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import HeldShare
from coordinator.core.snapshot.devices import NumaFree, gpu_numa
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import NumaUse, Placement
from coordinator.core.status import Reason, Status

__all__ = ["Plan", "device_key", "plan_placement"]


@dataclass(frozen=True, slots=True)
class Plan:
    placement: Placement
    choice: GpuChoice | None  # whole-GPU choice (None without whole GPUs or topology)
    numa_span: int  # NUMA nodes the pinned resources span (0: not pinned / unknown)
    aligned: bool  # everything the policy names sits on one NUMA node
    #: A share's GPU chosen among several by fragmentation growth, which reads the node's free
    #: CPU and memory and the pod's (not only its devices): remembered per those too.
    ranked: bool = False


_EMPTY_PLAN = Plan(Placement(), None, 0, False)
_DEFAULT_MIX = Mix(-1, tuple(sorted(DEFAULT_MIX.items())))
# whole-GPU choice, MIG instances, a share, whether the share's GPU was ranked among several
_Devices = tuple[GpuChoice | None, tuple[tuple[int, int], ...], HeldShare | None, bool]


def device_key(pod: PodRequest) -> tuple[object, ...]:
    """What in-node placement reads from a pod."""
    aligned = pod.numa_resources if pod.numa_policy else frozenset()
    return (
        pod.gpus,
        pod.share,
        pod.mig,
        pod.gpu_memory_min_mib,
        pod.gpu_locality,
        pod.numa_policy,
        aligned,
        pod.requests.get("cpu", 0) if "cpu" in aligned else 0,
        pod.requests.get("memory", 0) if "memory" in aligned else 0,
    )


# Plans depend only on (hardware shape, device state, device key) — and, where a share's GPU
# is ranked among several by fragmentation growth (``Plan.ranked``), on the CPU and memory the
# node has left and the pod takes, which growth reads: nodes that look alike share them. Whether
# several GPUs fit follows the devices alone. A memo of a pure function; bounded.
_PLANS: dict[tuple[object, ...], Plan | Status] = {}
_PLANS_LIMIT = 200_000


def plan_placement(
    node: NodeInfo,
    pod: PodRequest,
    key: tuple[object, ...] | None = None,
    *,
    allowed: tuple[int, ...] | None = None,
    mix: Mix | None = None,
) -> Plan | Status:
    """The plan for ``pod`` on ``node`` (``key``: :func:`device_key` of the pod, if known).

    ``allowed`` narrows the whole GPUs the pod may get to those indices (the GPUs a DRA request
    may take); by default every free GPU of the node. ``mix``: the pod shapes a fractional pod's
    GPU is chosen against (default: :data:`~.fragmentation.DEFAULT_MIX`)."""
    if node.topology is None:
        return _plan_without_topology(node, pod)
    mix = mix if mix is not None and pod.share is not None else _DEFAULT_MIX
    memo_key = (
        topology_index(node.topology).ident if node.topology.gpus else None,
        node.device_token,
        key if key is not None else device_key(pod),
        allowed,
        mix.version,
    )
    hit = _PLANS.get(memo_key)
    if hit is None:
        hit = _plan(node, pod, allowed, mix)
        _keep(memo_key, hit)
        if isinstance(hit, Plan) and hit.ranked:
            _keep((memo_key, _share_inputs(node, pod, mix)), hit)
    elif isinstance(hit, Plan) and hit.ranked:  # chosen for a node with other CPU left?
        by_room = (memo_key, _share_inputs(node, pod, mix))
        hit = _PLANS.get(by_room)
        if hit is None:
            hit = _plan(node, pod, allowed, mix)
            _keep(by_room, hit)
    return hit


def _keep(key: tuple[object, ...], plan: Plan | Status) -> None:
    if len(_PLANS) >= _PLANS_LIMIT:
        _PLANS.clear()
    _PLANS[key] = plan


def _share_inputs(node: NodeInfo, pod: PodRequest, mix: Mix) -> tuple[int, int, int, int]:
    """What ranking a share's GPUs reads besides the devices: the node's free CPU cores and
    memory (GiB, as far as :func:`~.fragmentation.growth` tells them apart) and the pod's."""
    requests = pod.requests
    cores = -(-requests.get("cpu", 0) // 1000)
    gib = -(-requests.get("memory", 0) // 2**30)
    return (*felt(node_room(node), mix, cores, gib), cores, gib)


def _plan(
    node: NodeInfo, pod: PodRequest, allowed: tuple[int, ...] | None, mix: Mix
) -> Plan | Status:
    topo = node.topology
    assert topo is not None
    policy = pod.numa_policy
    aligned_res = pod.numa_resources if policy else frozenset()
    cpu = pod.requests.get("cpu", 0) if "cpu" in aligned_res else 0
    mem = pod.requests.get("memory", 0) if "memory" in aligned_res else 0
    gpu_aligned = GPU_RESOURCE in aligned_res and pod.wants_devices

    index = topology_index(topo) if topo.gpus else None
    # a share may go to a GPU already shared, a whole-GPU pod only to a free one
    allowed_gpus = tuple(node.share_room) if pod.share is not None else node.free_gpus
    if allowed is not None:
        allowed_gpus = tuple(i for i in allowed_gpus if i in allowed)
    if pod.gpu_memory_min_mib is not None and index is not None:
        # A GPU is its size class (an "80GB" H100 reports 81,559 MiB): common/gpumemory.py.
        allowed_gpus = tuple(
            i
            for i in allowed_gpus
            if gpumemory.class_mib(index.memory[i] or 0) >= pod.gpu_memory_min_mib
        )

    # 1. Can the devices fit at all, ignoring NUMA? (the most telling reason when they can't)
    base = _devices(node, pod, allowed_gpus, None, mix)
    if isinstance(base, Status):
        return base
    if policy is None:
        return Plan(_held(base, numa=_numa_of_devices(node, base)), base[0], 0, False, base[3])
    if not node.numa_free:
        if policy == "best-effort":
            return Plan(_held(base), base[0], 0, False, base[3])
        return Status.unresolvable(Reason.NO_NUMA_TOPOLOGY)

    # 2. NUMA options in the policy's order of preference.
    numas = node.numa_free
    singles = [(n,) for n in numas]
    if policy == "isolated":
        singles = [(n,) for n in numas if not n.busy]
        if not singles:
            return Status.unschedulable(
                Reason.NUMA_ISOLATED, detail=f"every NUMA node in use ({_numa_text(numas)})"
            )
    options: list[tuple[NumaFree, ...]]
    if policy == "restricted":
        options = []
        for k in range(1, len(numas) + 1):
            options = [c for c in combinations(numas, k) if _fits(c, cpu, mem)]
            if options and any(
                not isinstance(
                    _devices(node, pod, _gpus_on(node, c, allowed_gpus, gpu_aligned), c, mix),
                    Status,
                )
                for c in options
            ):
                break
    else:
        options = list(singles)

    best: tuple[tuple[object, ...], Plan] | None = None
    for option in options:
        if not _fits(option, cpu, mem):
            continue
        devices = _devices(
            node,
            pod,
            _gpus_on(node, option, allowed_gpus, gpu_aligned),
            option if gpu_aligned else None,
            mix,
        )
        if isinstance(devices, Status):
            continue
        choice = devices[0]
        ids = tuple(sorted(n.numa for n in option))
        usage = _usage(option, cpu, mem)
        placement = _held(devices, numa=ids, numa_usage=usage, exclusive_numa=policy == "isolated")
        # (which NUMA option wins may follow a share's ranking: remembered per CPU left too)
        plan = Plan(placement, choice, len(option), len(option) == 1, pod.share is not None)
        # Prefer the better GPU set, then the tightest fit (keep roomy NUMA nodes free), then id.
        gkey: tuple[object, ...] = (
            (choice.worst.rank, tuple(-g for g in choice.groups_left)) if choice else (0, ())
        )
        leftover = sum(n.cpu_milli for n in option) - cpu
        key = (len(option), gkey, leftover, ids)
        if best is None or key < best[0]:
            best = (key, plan)
    if best is not None:
        return best[1]
    if policy == "best-effort":
        return Plan(_held(base, numa=_numa_of_devices(node, base)), base[0], 0, False, base[3])
    if policy == "restricted":
        return Status.unschedulable(Reason.NUMA_RESTRICTED, detail=_want_text(cpu, mem, pod, numas))
    return Status.unschedulable(Reason.NUMA_SINGLE, detail=_want_text(cpu, mem, pod, numas))


def _numa_text(numas: Sequence[NumaFree]) -> str:
    def amount(value: int, unit: int) -> str:
        return "?" if value >= 2**61 else str(value // unit)  # capacity the node did not report

    return "; ".join(
        f"NUMA {n.numa}: {amount(n.cpu_milli, 1000)} CPUs, {amount(n.memory, 2**30)} GiB, "
        f"{len(n.gpus)} GPUs free{' (busy)' if n.busy else ''}"
        for n in numas
    )


def _want_text(cpu: int, mem: int, pod: PodRequest, numas: Sequence[NumaFree]) -> str:
    want = f"wants {cpu / 1000:g} CPUs, {mem // 2**30} GiB, {pod.gpus} GPUs"
    return f"{want}; {_numa_text(numas)}"


def _plan_without_topology(node: NodeInfo, pod: PodRequest) -> Plan | Status:
    """A node no agent has described (and no published topology): CPU pods only. A GPU pod is
    never bound without choosing its GPUs, or the kubelet would pick devices nobody tracks."""
    if pod.gpus > 0 or pod.mig or pod.share is not None:
        return Status.unresolvable(Reason.NO_GPU_AGENT)
    if pod.numa_policy not in (None, "best-effort"):
        return Status.unresolvable(Reason.NO_NUMA_TOPOLOGY)
    return _EMPTY_PLAN


def _fits(option: Sequence[NumaFree], cpu: int, mem: int) -> bool:
    return sum(n.cpu_milli for n in option) >= cpu and sum(n.memory for n in option) >= mem


def _gpus_on(
    node: NodeInfo, option: Sequence[NumaFree], allowed: tuple[int, ...], aligned: bool
) -> tuple[int, ...]:
    if not aligned or node.topology is None:
        return allowed
    on = {n.numa for n in option}
    return tuple(i for i in allowed if gpu_numa(node.topology, i) in on)


def _held(devices: _Devices, **numa: object) -> Placement:
    """The placement of ``devices`` (whole GPUs or a share, MIG instances) with ``numa``."""
    choice, mig, share, _ = devices
    return Placement(
        gpus=choice.gpus if choice else (),
        mig=mig,
        share=share,
        **numa,  # type: ignore[arg-type]
    )


def _usage(option: Sequence[NumaFree], cpu: int, mem: int) -> tuple[NumaUse, ...]:
    out: list[NumaUse] = []
    for n in option:
        c = min(cpu, max(0, n.cpu_milli))
        m = min(mem, max(0, n.memory))
        cpu -= c
        mem -= m
        out.append(NumaUse(n.numa, c, m))
    return tuple(out)


def _devices(
    node: NodeInfo,
    pod: PodRequest,
    allowed_gpus: tuple[int, ...],
    option: Sequence[NumaFree] | None,
    mix: Mix,
) -> _Devices | Status:
    """Whole GPUs (or a share of one) and MIG instances for the pod among those allowed."""
    topo = node.topology
    assert topo is not None
    choice: GpuChoice | None = None
    if pod.share is not None:
        shared = choose_share(node, pod, allowed_gpus, mix)
        if isinstance(shared, Status):
            return Status.unschedulable(Reason.NUMA_SINGLE) if option is not None else shared
        return GpuChoice((shared[0],), Link("X"), ()), (), shared[1], shared[2]
    if pod.gpus > 0:
        usable = len(allowed_gpus) - node.unattributed_gpus
        if usable < pod.gpus:
            if option is not None:
                return Status.unschedulable(Reason.NUMA_SINGLE)
            if (
                pod.gpu_memory_min_mib is not None
                and len(node.free_gpus) - node.unattributed_gpus >= pod.gpus
            ):
                return Status.unschedulable(
                    Reason.GPU_MEMORY,
                    detail=f"{len(allowed_gpus)} free GPUs have ≥ {pod.gpu_memory_min_mib} MiB, "
                    f"{pod.gpus} requested",
                )
            return Status.unschedulable(
                Reason.insufficient(GPU_RESOURCE),
                detail=f"requested {pod.gpus}, free {max(0, usable)} whole GPUs",
            )
        mask = 0
        for i in allowed_gpus:
            mask |= 1 << i
        choice = topology_index(topo).choose(mask, pod.gpus, pod.gpu_locality)
        if choice is None:
            if option is not None:
                return Status.unschedulable(Reason.NUMA_SINGLE)
            if pod.gpu_locality == "nvlink":
                return Status.unschedulable(Reason.GPU_LOCALITY_NVLINK)
            return Status.unschedulable(Reason.GPU_LOCALITY_SOCKET)
    mig: list[tuple[int, int]] = []
    if pod.mig:
        on_numa = None if option is None else {n.numa for n in option}
        # Pack MIG pods: prefer GPUs that already have instances in use, then lower indices.
        in_use: dict[int, int] = {}
        for gpu, _ in node.mig_owner:
            in_use[gpu] = in_use.get(gpu, 0) + 1
        for profile, count in pod.mig:
            free = [
                m
                for m in node.free_mig.get(profile, ())
                if on_numa is None or gpu_numa(topo, m[0]) in on_numa
            ]
            free.sort(key=lambda m: (-in_use.get(m[0], 0), m))
            if len(free) < count:
                if option is not None:
                    return Status.unschedulable(Reason.NUMA_SINGLE)
                return Status.unschedulable(
                    Reason.MIG_PROFILE,
                    detail=f"requested {count}× {profile}, free {len(free)}",
                )
            mig.extend(free[:count])
    return choice, tuple(mig), None, False


def _numa_of_devices(node: NodeInfo, devices: _Devices) -> tuple[int, ...]:
    topo = node.topology
    assert topo is not None
    choice, mig, _, _ = devices
    ids = {gpu_numa(topo, i) for i in (choice.gpus if choice else ())}
    ids |= {gpu_numa(topo, g) for g, _ in mig}
    return tuple(sorted(i for i in ids if i is not None))
