"""One policy over one seed's arrivals, and the paper's metric.

Pods arrive one at a time and never leave; each is placed or dropped (never retried). After each
arrival: arrived GPU demand and allocated GPU demand (milli asked by the pods placed so far). The
metric is the share of the cluster's GPU milli left unallocated, read where the arrived demand
equals 100 % of capacity (linear between the arrivals on either side); the curve reads it at
every whole percent of arrived demand from 0 to 130 %.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from benchmarks.sharing.cluster import Cluster
from benchmarks.sharing.policies import Policy
from benchmarks.sharing.trace import MILLI, Workload

__all__ = ["CURVE_POINTS", "Run", "check", "curve", "replay_baseline"]

CURVE_POINTS: Final = 131  # 0 … 130 % of capacity


@dataclass(frozen=True, slots=True)
class Run:
    policy: str
    seed: int
    arrived: int  # pods
    placed: int
    seconds: float  # deciding (and holding the choice), all pods
    curve: tuple[float, ...]  # unallocated share at 0 … 130 % arrived
    violations: tuple[str, ...] = ()

    @property
    def at_capacity(self) -> float:
        return self.curve[100]

    @property
    def us_per_decision(self) -> float:
        return 1e6 * self.seconds / self.arrived if self.arrived else 0.0


def curve(demands: Sequence[int], allocated: Sequence[int], capacity: int) -> tuple[float, ...]:
    """Unallocated share of ``capacity`` at each whole percent of arrived demand, from each
    arrival's demand and the allocated total after it; flat past the last arrival."""
    points: list[float] = []
    arrived_prev, unalloc_prev = 0.0, 1.0
    arrived = 0
    for demand, alloc in zip(demands, allocated, strict=True):
        arrived += demand
        x, u = arrived / capacity, 1.0 - alloc / capacity
        while len(points) < CURVE_POINTS and len(points) / 100 <= x:
            at = len(points) / 100
            if x == arrived_prev:
                points.append(u)
            else:
                points.append(
                    unalloc_prev + (u - unalloc_prev) * (at - arrived_prev) / (x - arrived_prev)
                )
        arrived_prev, unalloc_prev = x, u
    while len(points) < CURVE_POINTS:
        points.append(unalloc_prev)
    return tuple(points)


def check(cluster: Cluster) -> list[str]:
    """What would make the figures wrong: GPU milli not conserved, a node over-committed, more
    allocated than held."""
    problems = []
    free = 0
    for node in cluster.nodes:
        free += sum(node.free)
        if node.cpu_left < 0 or node.mem_left < 0 or any(not 0 <= f <= MILLI for f in node.free):
            problems.append(f"node {node.index} over-committed")
        if node.free_total != sum(node.free) or node.full != node.free.count(MILLI):
            problems.append(f"node {node.index}: counters out of step")
    if cluster.capacity - free != cluster.held:
        problems.append(f"GPU milli not conserved: {cluster.capacity} - {free} != {cluster.held}")
    if cluster.allocated > cluster.held or (
        not cluster.whole and cluster.allocated != cluster.held
    ):
        problems.append(f"allocated {cluster.allocated} against {cluster.held} held")
    return problems


def replay_baseline(name: str, policy: Policy, work: Workload, *, whole: bool = False) -> Run:
    cluster = Cluster(work.nodes, whole=whole)
    rng = random.Random(work.seed)
    allocated: list[int] = []
    placed = 0
    spent = 0.0
    for shape in work.pods:
        t0 = time.perf_counter()
        choice = policy(cluster, shape, rng)
        if choice is not None:
            cluster.place(shape, choice)
            placed += 1
        spent += time.perf_counter() - t0
        allocated.append(cluster.allocated)
    demands = [p.demand for p in work.pods]
    return Run(
        name,
        work.seed,
        len(work.pods),
        placed,
        spent,
        curve(demands, allocated, cluster.capacity),
        tuple(check(cluster)),
    )
