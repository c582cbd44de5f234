"""GPU-sharing baselines as framework profiles: the FGD paper's policies (Weng et al., "Beware of
Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX
ATC'23), run by the engine like any profile (``benchmarks/sharing_trace.py``).

``random``     any node that fits, any GPUs there that fit.
``first-fit``  the first node (name order) that fits, its lowest-index GPUs that fit.
``best-fit``   the node left with the least after placement: CPU and GPU thousandths left, each
               over the largest node's, weighted ½ and ½ (the paper's Best-fit); a share goes on
               the GPU there with the least room that still holds it.
``packing``    the paper's GPU packing: a GPU pod first onto GPUs already shared (the least room
               left first), then onto a node already in use, then onto an idle node (the
               smallest first); CPU-only pods anywhere.
``fgd``        Fragmentation Gradient Descent: the node and GPU where the expected fragmentation
               (:class:`Fgd`) grows least.

Each is one plugin (:class:`SharingRule`): its Filter chooses the GPUs inside a node (whole GPUs
wholly free; a share on one GPU with room for it, ``NodeInfo.share_room``), its Score ranks the
nodes; every node is looked at (``percentageOfNodesToScore: 100``); ties between equally good
nodes are broken at random (seeded), as kube-scheduler does, except first-fit's. Before it,
kube-scheduler's node gates and ``NodeResourcesFit`` (CPU, memory, ``nvidia.com/gpu``, pods).
None of Topos's own scorers count.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from common.podkeys import GPU_RESOURCE
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import PLACEMENTS, Plugin
from coordinator.core.framework.profile import Framework
from coordinator.core.plugins import noderesources
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.sharing import WHOLE
from coordinator.core.registry import PLUGINS, build_framework, weights_of
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SUCCESS, Reason, Status

__all__ = ["SHARING_RULES", "Fgd", "Shape", "SharingRule", "shape_of", "sharing_framework"]

SHARING_RULES: Final = ("random", "first-fit", "best-fit", "packing", "fgd")
_JITTER: Final = 1e-9  # breaks ties only: below any difference of the rules' keys


@dataclass(frozen=True, slots=True)
class Shape:
    """What FGD's measure reads of a pod: ``gpus`` GPUs of ``milli`` thousandths each (a share
    when below 1,000), and its CPU in millicores."""

    gpus: int
    milli: int
    cpu_milli: int


def shape_of(pod: PodRequest) -> Shape:
    cpu = pod.requests.get("cpu", 0)
    if pod.share is not None:
        return Shape(1, pod.share.milli or WHOLE, cpu)
    return Shape(pod.gpus, WHOLE if pod.gpus else 0, cpu)


def _free(node: NodeInfo) -> list[int]:
    """Free thousandths of each GPU of ``node`` (0: held whole, or full)."""
    count = len(node.topology.gpus) if node.topology is not None else 0
    return [node.share_room.get(i, (0, None))[0] for i in range(count)]


def _cpu_left(node: NodeInfo) -> int:
    return node.allocatable.get("cpu", 0) - node.requested.get("cpu", 0)


_State = tuple[tuple[int, ...], int]  # sorted free thousandths per GPU, free CPU (millicores)


class Fgd:
    """FGD's measure for one target workload, ``target``: (shape, popularity), popularities
    summing to 1. A node's free GPU capacity is fragmented *for a shape* when that shape cannot
    use it: all of it when the shape cannot run there (too little CPU left, too few GPUs with
    the room it asks per GPU) or asks for no GPU; otherwise the free part of each GPU with less
    room than the shape asks per GPU. Memory is not part of the measure (as in the paper).

    Fragmentation and growth are remembered per node state (nodes in one state share them)."""

    def __init__(self, target: Sequence[tuple[Shape, float]]) -> None:
        self.cpu_steps = sorted({s.cpu_milli for s, _ in target})
        groups: dict[tuple[int, int], list[tuple[int, float]]] = {}
        cpu_only = 0.0
        for shape, share in target:
            if shape.gpus == 0:
                cpu_only += share
            else:
                step = bisect.bisect_left(self.cpu_steps, shape.cpu_milli)
                groups.setdefault((shape.gpus, shape.milli), []).append((step, share))
        self.cpu_only = cpu_only
        self.groups = [(g, m, sorted(v)) for (g, m), v in sorted(groups.items())]
        self._frag: dict[tuple[tuple[int, ...], int], float] = {}
        self._growth: dict[tuple[_State, Shape], tuple[float, int]] = {}

    def fragmentation(self, free: tuple[int, ...], cpu_left: int) -> float:
        """Expected fragmented GPU thousandths of a node with ``free`` (sorted), ``cpu_left``."""
        covered = bisect.bisect_right(self.cpu_steps, cpu_left)  # CPU steps the node still has
        key = (free, covered)
        value = self._frag.get(key)
        if value is None:
            value = self._frag[key] = self._measure(free, covered)
        return value

    def _measure(self, free: tuple[int, ...], covered: int) -> float:
        total = sum(free)
        if total == 0:
            return 0.0
        value = self.cpu_only * total
        for gpus, milli, shapes in self.groups:
            below = bisect.bisect_left(free, milli)  # GPUs with less than milli free
            usable = len(free) - below >= gpus
            lost = float(sum(free[:below])) if usable else float(total)
            for step, share in shapes:
                value += share * (lost if step < covered else total)
        return value

    def growth(self, free: Sequence[int], cpu_left: int, shape: Shape) -> tuple[float, int]:
        """How much placing ``shape`` on a node with ``free`` and ``cpu_left`` grows its
        fragmentation, and the free thousandths of the GPU a share should take there (0 for
        whole GPUs: any wholly free ones). The node must hold the shape."""
        state = (tuple(sorted(free)), cpu_left)
        memo = (state, shape)
        found = self._growth.get(memo)
        if found is not None:
            return found
        now, _ = state
        before = self.fragmentation(now, cpu_left)
        cpu_after = cpu_left - shape.cpu_milli
        if shape.gpus == 0:
            result = (self.fragmentation(now, cpu_after) - before, 0)
        elif shape.milli == WHOLE:
            after = list(now)
            for _ in range(shape.gpus):
                after.remove(WHOLE)
            grown = self.fragmentation(tuple(sorted([*after, *[0] * shape.gpus])), cpu_after)
            result = (grown - before, 0)
        else:
            best: tuple[float, int] | None = None
            for value in sorted(set(now)):
                if value < shape.milli:
                    continue
                after = list(now)
                after.remove(value)
                grown = self.fragmentation(tuple(sorted([*after, value - shape.milli])), cpu_after)
                if best is None or grown - before < best[0]:
                    best = (grown - before, value)
            assert best is not None, "growth on a node that cannot hold the pod"
            result = best
        self._growth[memo] = result
        return result


class SharingRule(Plugin):
    """One of :data:`SHARING_RULES`: the GPUs inside a node (Filter) and the node (Score).
    Not node-local: random draws and ties are per cycle."""

    name = "SharingRule"

    def __init__(self, rule: str, *, seed: int = 0, fgd: Fgd | None = None) -> None:
        if rule not in SHARING_RULES:
            raise KeyError(f"unknown sharing rule {rule!r} (known: {', '.join(SHARING_RULES)})")
        if rule == "fgd" and fgd is None:
            raise ValueError("fgd needs its target workload (an Fgd)")
        self.rule = rule
        self.rng = random.Random(seed)
        self.fgd = fgd
        self._max: tuple[int, int] | None = None  # largest node's CPU and GPU thousandths

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if self._max is None:  # the cluster's nodes never change in a replay
            nodes = snapshot.nodes
            cpu = max((n.allocatable.get("cpu", 0) for n in nodes), default=1) or 1
            gpu = max((n.allocatable.get(GPU_RESOURCE, 0) for n in nodes), default=1) or 1
            self._max = (cpu, gpu * WHOLE)
        return SUCCESS

    # --- inside the node ----------------------------------------------------------------------

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        if not pod.wants_devices:
            return SUCCESS
        topo = node.topology
        if topo is None:
            return Status.unschedulable(Reason.insufficient(GPU_RESOURCE))
        share = pod.share
        if share is None:
            idle = node.free_gpus
            if len(idle) < pod.gpus:
                return Status.unschedulable(Reason.insufficient(GPU_RESOURCE))
            if self.rule == "random":
                gpus = tuple(self.rng.sample(idle, pod.gpus))
            else:
                gpus = tuple(idle[: pod.gpus])
            state.read(PLACEMENTS)[node.name] = Placement(gpus=gpus)
            return SUCCESS
        fits = []  # (GPU, its free thousandths, what the share holds of it)
        for i, (milli, mib) in sorted(node.share_room.items()):
            held = share.on_gpu(topo.gpus[i].memory_total_mib)
            if held is None or held.milli > milli or (mib is not None and held.memory_mib > mib):
                continue
            fits.append((i, milli, held))
        if not fits:
            return Status.unschedulable(Reason.SHARE_NO_ROOM)
        if self.rule == "random":
            gpu, _, held = self.rng.choice(fits)
        elif self.rule == "first-fit":
            gpu, _, held = fits[0]
        elif self.rule == "fgd":
            assert self.fgd is not None
            _, value = self.fgd.growth(_free(node), _cpu_left(node), shape_of(pod))
            gpu, _, held = next(f for f in fits if f[1] == value)
        else:  # best-fit, packing: the tightest fit, the lowest index first
            gpu, _, held = min(fits, key=lambda f: f[1])
        state.read(PLACEMENTS)[node.name] = Placement(gpus=(gpu,), share=held)
        return SUCCESS

    # --- the node -----------------------------------------------------------------------------

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        if self.rule == "first-fit":
            return 0.0  # the first node by name wins
        if self.rule == "random":
            return self.rng.random()
        jitter = self.rng.random() * _JITTER
        shape = shape_of(pod)
        if self.rule == "fgd":
            assert self.fgd is not None
            grown, _ = self.fgd.growth(_free(node), _cpu_left(node), shape)
            return -grown + jitter
        if self.rule == "best-fit":
            assert self._max is not None
            max_cpu, max_gpu = self._max
            cpu = (_cpu_left(node) - shape.cpu_milli) / max_cpu
            gpu = (sum(_free(node)) - shape.milli * shape.gpus) / max_gpu
            return 100.0 * (1.0 - (0.5 * cpu + 0.5 * gpu)) + jitter
        return -_packing_key(node, shape) + jitter

    def __repr__(self) -> str:
        return f"SharingRule({self.rule!r})"


def _packing_key(node: NodeInfo, shape: Shape) -> float:
    """Lower first: onto a GPU already shared (the least room left first), then a node in use,
    then an idle node (the fewest GPUs first); CPU-only pods: all alike."""
    if shape.gpus == 0:
        return 0.0
    free = _free(node)
    if all(f == WHOLE for f in free):  # an idle node
        return 20_000.0 + len(free)
    if shape.milli < WHOLE:
        shared = [f for f in free if shape.milli <= f < WHOLE]
        if shared:
            return float(min(shared))
    return 10_000.0


#: kube-scheduler's node gates and NodeResourcesFit, then the rule.
_FILTERS: Final = (
    *(spec.name for spec in PLUGINS if spec.plugin.node_gate),
    noderesources.PLUGIN.name,
)


def sharing_framework(rule: str, *, seed: int = 0, fgd: Fgd | None = None) -> Framework:
    """The profile of ``rule`` (:data:`SHARING_RULES`), its random draws from ``seed``; FGD
    measures against ``fgd``'s target workload."""
    plugin = SharingRule(rule, seed=seed, fgd=fgd)
    spec = PluginSpec[None](plugin=SharingRule, weight=1, factory=lambda _args, _ctx: plugin)
    weights = dict.fromkeys(weights_of(SchedulerConfig()), 0)
    # every node looked at, as the paper's policies do (kube's adaptive sampling would make
    # first-fit the first of a sample from a rotating start, best-fit the best of a sample)
    config = SchedulerConfig(weights=weights, percentage_of_nodes_to_score=100)
    return build_framework(config, plugins=(*PLUGINS, spec), profile=(*_FILTERS, SharingRule.name))
