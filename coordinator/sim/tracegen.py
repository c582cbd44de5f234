"""A synthetic trace with the shape published GPU-cluster traces show (Microsoft Philly, Alibaba
PAI, SenseTime Helios): most jobs take one GPU, multi-GPU jobs ask for powers of two up to a
node, a few percent are multi-node gangs that hold most of the GPU-hours, run times are
heavy-tailed (log-normal: a median of minutes, a tail of days), inference services sit on MIG
slices at high priority, and a few HPC pods pin their CPUs and GPUs to one NUMA node.

Arrivals are a Poisson process whose rate gives the requested *offered load* (GPU-seconds asked
for per GPU-second the cluster has). Seeded: the same arguments give the same trace.

The mix, per job:

============  ======  =======================================================================
kind          share   shape
============  ======  =======================================================================
MIG serving   10 %    1 instance (1g 60 %, 2g 30 %, 3g 10 % of the cluster's profiles),
                      priority 1000, median 30 min
gang           6 %    2–16 pods × 8 GPUs (15 %: × 4), priority 0 or 100, median 3 h
NUMA HPC       5 %    1–4 GPUs, ``single-numa`` (70 %) or ``restricted``, median 20 min
other         79 %    1 GPU 72 %, 2 GPUs 12 %, 4 GPUs 9 %, 8 GPUs 7 %; priority 0/100/1000
                      (70/25/5 %); median 15 min (× 2 for multi-GPU)
============  ======  =======================================================================

30 % of whole-GPU jobs name a GPU model (weighted by the cluster's GPUs of each model that has
nodes big enough for the job).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from common import podkeys
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.sim.trace import Job

__all__ = ["GpuKind", "TraceShape", "cluster_shape", "generate", "short_gpu_type"]

_MIN_S: Final = 30.0
_MAX_S: Final = 7 * 24 * 3600.0
_MIG_PREFIX: Final = podkeys.MIG_RESOURCE_PREFIX


@dataclass(frozen=True, slots=True)
class GpuKind:
    """GPUs of one model in the cluster."""

    name: str  # short model name a trace uses: "H100"
    gpus: int  # whole GPUs of this model in the cluster
    per_node: int  # largest node of this model


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceShape:
    jobs: int = 500
    load: float = 0.9
    cluster_gpus: int = 256
    max_gpus_per_node: int = 8
    gpu_kinds: Sequence[GpuKind] = ()
    mig_profiles: Mapping[str, int] = field(default_factory=dict)  # profile → instances
    mig_share: float = 0.10
    gang_share: float = 0.06
    numa_share: float = 0.05
    typed_share: float = 0.30
    seed: int = 1


def short_gpu_type(product: str) -> str:
    """``NVIDIA H100 80GB HBM3`` → ``H100``; ``Tesla V100-SXM2-16GB`` → ``V100``."""
    for token in re.split(r"[\s_-]+", product):
        if re.search(r"[A-Za-z]", token) and re.search(r"\d", token) and not token.endswith("GB"):
            return token.upper()
    return product.split()[-1].upper() if product.split() else "GPU"


def cluster_shape(
    nodes: Sequence[NodeInfo], *, jobs: int = 500, load: float = 0.9, seed: int = 1
) -> TraceShape:
    """A trace shape fitted to a cluster: its GPU models, MIG profiles and size."""
    kinds: dict[str, list[int]] = {}
    mig: dict[str, int] = {}
    total = 0
    biggest = 1
    for n in nodes:
        whole = n.allocatable.get(podkeys.GPU_RESOURCE, 0)
        total += whole
        biggest = max(biggest, whole)
        product = n.topology.gpus[0].product if n.topology and n.topology.gpus else None
        if whole and product:
            entry = kinds.setdefault(short_gpu_type(product), [0, 0])
            entry[0] += whole
            entry[1] = max(entry[1], whole)
        for k, v in n.allocatable.items():
            if k.startswith(_MIG_PREFIX):
                profile = k.removeprefix(_MIG_PREFIX)
                mig[profile] = mig.get(profile, 0) + v
    return TraceShape(
        jobs=jobs,
        load=load,
        seed=seed,
        cluster_gpus=max(total, 1),
        max_gpus_per_node=biggest,
        gpu_kinds=tuple(GpuKind(k, v[0], v[1]) for k, v in sorted(kinds.items())),
        mig_profiles=mig,
    )


def _lognormal(rng: random.Random, median_s: float, sigma: float) -> float:
    value = rng.lognormvariate(math.log(median_s), sigma)
    return round(min(_MAX_S, max(_MIN_S, value)), 1)


def _pick_int(rng: random.Random, weights: Mapping[int, float]) -> int:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def _pick_str(rng: random.Random, weights: Mapping[str, float]) -> str:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def _slices(profile: str) -> int:
    m = re.search(r"(\d+)g\.", profile)
    return int(m.group(1)) if m else 1


def _mig_pick(rng: random.Random, profiles: Mapping[str, int]) -> str:
    """Small slices are asked for most (60/30/10 % by size rank), times availability."""
    plain = {p: n for p, n in profiles.items() if "c." not in p}  # whole GPU instances only
    pool = plain or dict(profiles)
    order = sorted(pool, key=_slices)
    share = {0: 0.6, 1: 0.3, 2: 0.1}
    return _pick_str(rng, {p: share.get(i, 0.05) * math.sqrt(pool[p]) for i, p in enumerate(order)})


@dataclass(frozen=True, slots=True)
class _Draft:
    job_id: str
    duration_s: float
    gpus: int
    gang_size: int = 1
    priority: int = 0
    mig_profile: str = ""
    numa_policy: str = ""
    cpu: float | None = None
    memory_gib: float | None = None

    @property
    def gpu_seconds(self) -> float:
        per_pod = _slices(self.mig_profile) / 7 if self.mig_profile else float(self.gpus)
        return per_pod * self.gang_size * self.duration_s


def _draft(rng: random.Random, shape: TraceShape, job_id: str, mig_share: float) -> _Draft:
    cap = max(1, shape.max_gpus_per_node)
    r = rng.random()
    if r < mig_share:
        return _Draft(
            job_id,
            _lognormal(rng, 1800, 1.0),
            gpus=1,
            priority=1000,
            mig_profile=_mig_pick(rng, shape.mig_profiles),
        )
    r -= mig_share
    if r < shape.gang_share:
        per_pod = min(cap, 8 if rng.random() < 0.85 else 4)
        size = _pick_int(rng, {2: 0.5, 4: 0.3, 8: 0.15, 16: 0.05})
        while size > 2 and size * per_pod > shape.cluster_gpus // 2:
            size //= 2
        return _Draft(
            job_id,
            _lognormal(rng, 3 * 3600, 1.0),
            gpus=per_pod,
            gang_size=size,
            priority=100 if rng.random() < 0.5 else 0,
        )
    r -= shape.gang_share
    if r < shape.numa_share:
        gpus = min(cap, _pick_int(rng, {1: 0.5, 2: 0.3, 4: 0.2}))
        return _Draft(
            job_id,
            _lognormal(rng, 1200, 1.2),
            gpus=gpus,
            numa_policy="single-numa" if rng.random() < 0.7 else "restricted",
            cpu=4.0 * gpus,
            memory_gib=32.0 * gpus,
        )
    gpus = min(cap, _pick_int(rng, {1: 0.72, 2: 0.12, 4: 0.09, 8: 0.07}))
    return _Draft(
        job_id,
        _lognormal(rng, 900 * (2 if gpus > 1 else 1), 1.6),
        gpus=gpus,
        priority=_pick_int(rng, {0: 0.70, 100: 0.25, 1000: 0.05}),
    )


def generate(shape: TraceShape) -> list[Job]:
    """The trace, sorted by arrival."""
    if shape.jobs < 1:
        raise ValueError("a trace needs at least one job")
    if not 0 < shape.load <= 10:
        raise ValueError("load must be in (0, 10]")
    rng = random.Random(shape.seed)
    mig_share = shape.mig_share if shape.mig_profiles else 0.0
    drafts = [_draft(rng, shape, f"job-{n + 1:05d}", mig_share) for n in range(shape.jobs)]
    types: list[str] = []
    for d in drafts:
        kind = ""
        if not d.mig_profile and d.gpus and shape.gpu_kinds and rng.random() < shape.typed_share:
            fit = {k.name: float(k.gpus) for k in shape.gpu_kinds if k.per_node >= d.gpus}
            if fit:
                kind = _pick_str(rng, fit)
        types.append(kind)
    demand = sum(d.gpu_seconds for d in drafts)
    mean_gap = demand / (shape.load * shape.cluster_gpus) / shape.jobs
    t = 0.0
    jobs: list[Job] = []
    for d, kind in zip(drafts, types, strict=True):
        jobs.append(
            Job(
                job_id=d.job_id,
                arrival_s=round(t, 1),
                duration_s=d.duration_s,
                gpus=d.gpus,
                gpu_type=kind,
                gang_size=d.gang_size,
                priority=d.priority,
                mig_profile=d.mig_profile,
                cpu=d.cpu,
                memory_gib=d.memory_gib,
                numa_policy=d.numa_policy,
            )
        )
        t += rng.expovariate(1.0 / mean_gap) if mean_gap > 0 else 0.0
    return jobs
