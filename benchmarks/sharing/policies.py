"""The baseline policies, as the FGD paper describes them, over :mod:`.cluster`.

``random``     any node that fits, any GPUs there that fit.
``first-fit``  the first node (trace order) that fits, its lowest-index GPUs that fit.
``best-fit``   the node left with the least after placement: CPU and GPU milli left, each over the
               largest node's, weighted ½ and ½ (the paper's Best-fit); a fractional pod goes on
               the GPU there with the least free milli that still holds it.
``packing``    the paper's GPU packing: a GPU pod first onto GPUs already shared (the least free
               left first), then onto a node already in use, then onto an idle node (the smallest
               first); CPU-only pods anywhere.
``fgd``        :mod:`.fgd`.

Ties between equally good nodes are broken at random (seeded), as kube-scheduler does.
A policy returns a :class:`~.cluster.Choice` or ``None`` (the pod is dropped, never retried).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

from benchmarks.sharing.cluster import Choice, Cluster, NodeState
from benchmarks.sharing.trace import MILLI, PodShape

__all__ = ["BASELINES", "Policy", "best_fit", "first_fit", "packing", "random_fit"]

Policy = Callable[[Cluster, PodShape, random.Random], Choice | None]
_Key = Callable[[Cluster, NodeState, PodShape, int], tuple[float, float]]


def _lowest(node: NodeState, shape: PodShape, per: int) -> tuple[int, ...]:
    return tuple(node.usable(per)[: shape.gpus])


def _tightest(node: NodeState, shape: PodShape, per: int) -> tuple[int, ...]:
    """A fractional pod: the fitting GPU with the least free milli; whole GPUs: lowest first."""
    if per == MILLI or shape.gpus != 1:
        return _lowest(node, shape, per)
    best = min(node.usable(per), key=lambda g: node.free[g])
    return (best,)


def random_fit(cluster: Cluster, shape: PodShape, rng: random.Random) -> Choice | None:
    per = cluster.per_gpu(shape)
    feasible = [n for n in cluster.nodes if n.fits(shape, per)]
    if not feasible:
        return None
    node = rng.choice(feasible)
    return Choice(node.index, tuple(rng.sample(node.usable(per), shape.gpus)))


def first_fit(cluster: Cluster, shape: PodShape, rng: random.Random) -> Choice | None:
    per = cluster.per_gpu(shape)
    for node in cluster.nodes:
        if node.fits(shape, per):
            return Choice(node.index, _lowest(node, shape, per))
    return None


def _pick(cluster: Cluster, shape: PodShape, rng: random.Random, key: _Key) -> Choice | None:
    """The node with the lowest ``key`` (ties at random), GPUs chosen tightest."""
    per = cluster.per_gpu(shape)
    best: list[NodeState] = []
    best_key: tuple[float, float] | None = None
    for node in cluster.nodes:
        if not node.fits(shape, per):
            continue
        k = key(cluster, node, shape, per)
        if best_key is None or k < best_key:
            best_key, best = k, [node]
        elif k == best_key:
            best.append(node)
    if not best:
        return None
    node = best[0] if len(best) == 1 else rng.choice(best)
    return Choice(node.index, _tightest(node, shape, per))


def _best_fit_key(
    cluster: Cluster, node: NodeState, shape: PodShape, per: int
) -> tuple[float, float]:
    cpu = (node.cpu_left - shape.cpu_milli) / cluster.max_cpu
    gpu = (node.free_total - per * shape.gpus) / cluster.max_gpu
    return (0.5 * cpu + 0.5 * gpu, 0.0)


def _packing_key(
    cluster: Cluster, node: NodeState, shape: PodShape, per: int
) -> tuple[float, float]:
    if shape.gpus == 0:
        return (0.0, 0.0)
    gpus = len(node.free)
    if node.full == gpus:  # an idle node: the smallest first
        return (2.0, gpus)
    if per < MILLI:
        shared = [f for f in node.free if per <= f < MILLI]
        if shared:  # onto a GPU already shared: the least left first
            return (0.0, min(shared))
    return (1.0, 0.0)  # onto a node in use, taking idle GPUs there


def best_fit(cluster: Cluster, shape: PodShape, rng: random.Random) -> Choice | None:
    return _pick(cluster, shape, rng, _best_fit_key)


def packing(cluster: Cluster, shape: PodShape, rng: random.Random) -> Choice | None:
    return _pick(cluster, shape, rng, _packing_key)


BASELINES: Final[dict[str, Policy]] = {
    "random": random_fit,
    "first-fit": first_fit,
    "best-fit": best_fit,
    "packing": packing,
}
