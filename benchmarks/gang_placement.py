"""Gang placement benchmark: decision time and fragmentation, against a naive baseline.

1. **Decision time** — a 64-pod gang (8 GPUs each) on 1,000 nodes of 8 GPUs in 2 spines × 16
   leaves, on an idle cluster and on a cluster already 60 % busy (seeded), timed over several runs
   (target: < 100 ms per decision). A naive per-pod first-fit of the same gang is timed in the
   same run for reference.
2. **Fragmentation after a long mixed run** — the same cluster replays a seeded stream of jobs
   (single pods of 1–8 GPUs, multi-node gangs of 8-GPU members, small-member gangs) arriving and
   finishing over many steps, once with Topos' planner (default ``balanced`` strategy, the network
   rules of docs/design.md §4) and once with a naive spread baseline (each pod on the node with the
   most free GPUs, gangs all-or-nothing but without domains). Reported: idle GPUs on partly-used
   nodes (mean over the run and at the end), jobs that could not be placed, and how many leaves /
   spines the multi-node gangs span.
3. **GPU link class** — the same stream on the same fabric where odd leaves hold PCIe nodes and
   even leaves NVSwitch nodes, once link-aware (the planner sees each node's class) and once
   link-blind (the same planner, classes hidden). Reported: the share of the GPUs of multi-node
   and multi-GPU gangs that landed on NVSwitch nodes, fragmentation and unplaced jobs.

Run: ``.venv/bin/python -m benchmarks.gang_placement [--steps N] [--seed S]``.
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from coordinator.core.domains.capacity import GPU, NodeState, subtract
from coordinator.core.domains.layout import Layout, build_layout
from coordinator.core.domains.packing import Member, Placement
from coordinator.core.domains.select import place_members
from coordinator.core.domains.strategy import PlacementIntent, Strategy
from coordinator.core.domains.summary import fragmentation
from coordinator.core.gangs.plan import GangPlan, plan_gang
from coordinator.sim.baselines.gangs import first_fit_members, spread_members

SPINES, LEAVES_PER_SPINE, NODES, GPUS = 2, 16, 1000, 8

T = TypeVar("T")


def cluster() -> list[NodeState]:
    leaves = SPINES * LEAVES_PER_SPINE
    out = []
    for i in range(NODES):
        leaf = i * leaves // NODES  # contiguous blocks of 31–32 nodes
        spine = leaf // LEAVES_PER_SPINE
        out.append(
            NodeState(
                name=f"node-{i:04d}",
                labels={
                    "topos.io/leaf": f"leaf-{leaf + 1}",
                    "topos.io/spine": f"spine-{spine + 1}",
                },
                allocatable={GPU: GPUS, "cpu": 128_000, "pods": 110},
                free={GPU: GPUS, "cpu": 128_000, "pods": 110},
            )
        )
    return out


def gang(n: int, gpus: int, tag: str) -> list[Member]:
    return [
        Member(name=f"{tag}-{i}", requests={GPU: gpus, "cpu": 1000, "pods": 1}) for i in range(n)
    ]


def timed(fn: Callable[[], T], runs: int) -> tuple[float, float, T]:
    samples = []
    for _ in range(max(runs, 1)):
        t0 = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))], result


def decision_time(runs: int, seed: int) -> None:
    idle = cluster()
    rng = random.Random(seed)
    busy = []
    for n in cluster():
        used = rng.choice((0, 0, 0, 2, 4, 6, 8, 8))
        busy.append(
            NodeState(
                name=n.name,
                labels=n.labels,
                allocatable=n.allocatable,
                free={**n.free, GPU: GPUS - used},
            )
        )
    job = gang(64, 8, "train")
    layout_idle, layout_busy = build_layout(idle), build_layout(busy)
    print("1. decision time: 64-pod gang × 8 GPUs on 1,000 nodes (2 spines × 16 leaves)")
    for label, nodes, layout in (("idle", idle, layout_idle), ("60% busy", busy, layout_busy)):
        med, p90, plan = timed(functools.partial(plan_gang, job, nodes, layout=layout), runs)
        assert isinstance(plan, GangPlan), plan
        p = plan.placement
        med_l, _, _ = timed(functools.partial(plan_gang, job, nodes), max(3, runs // 4))
        base_med, _, _ = timed(functools.partial(first_fit_members, job, nodes), runs)
        verdict = "OK" if med < 100 else "SLOW"
        print(
            f"   {label:9s} topos median {med:6.1f} ms, p90 {p90:6.1f} ms [{verdict} vs 100 ms]"
            f" (incl. layout {med_l:6.1f} ms); naive first-fit {base_med:6.1f} ms"
        )
        print(
            f"             → {p.tier} tier, {len(p.nodes)} nodes, leaves {', '.join(p.leaves)}"
            f" (adjacent={p.adjacent}), spines {', '.join(p.spines)}"
        )


@dataclass
class Job:
    members: list[Member]
    duration: int
    multi_node: bool


def workload(steps: int, seed: int) -> list[list[Job]]:
    rng = random.Random(seed)
    out: list[list[Job]] = []
    seq = 0
    for _ in range(steps):
        arrivals = []
        for _ in range(rng.randint(12, 22)):
            seq += 1
            r = rng.random()
            if r < 0.55:
                arrivals.append(
                    Job(gang(1, rng.choice((1, 1, 2, 2, 4)), f"s{seq}"), rng.randint(5, 40), False)
                )
            elif r < 0.72:
                arrivals.append(Job(gang(1, 8, f"w{seq}"), rng.randint(10, 50), False))
            elif r < 0.9:
                n = rng.choice((2, 2, 4, 4, 8, 16))
                arrivals.append(Job(gang(n, 8, f"g{seq}"), rng.randint(10, 60), True))
            else:
                arrivals.append(
                    Job(gang(rng.choice((2, 4, 8)), 2, f"m{seq}"), rng.randint(5, 40), True)
                )
        out.append(arrivals)
    return out


def topos_place(
    members: Sequence[Member], nodes: Sequence[NodeState], layout: Layout | None
) -> dict[str, str] | None:
    result = place_members(
        members, nodes, layout=layout, intent=PlacementIntent(strategy=Strategy.BALANCED)
    )
    if isinstance(result, Placement):
        return dict(result.assignments)
    return None


def replay(name: str, stream: list[list[Job]], place: Callable[..., dict[str, str] | None]) -> None:
    nodes = cluster()
    layout = build_layout(nodes)
    by_name = {n.name: n for n in nodes}
    running: list[tuple[int, Job, dict[str, str]]] = []
    frag_samples: list[int] = []
    util_samples: list[float] = []
    failed = placed = 0
    failed_big = 0
    spans: list[tuple[int, int]] = []
    t0 = time.perf_counter()
    for step, arrivals in enumerate(stream):
        still = []
        for end, job, held in running:
            if end <= step:
                for m in job.members:
                    node = by_name[held[m.name]]
                    for k, v in m.requests.items():
                        node.free[k] += v  # type: ignore[index]
            else:
                still.append((end, job, held))
        running = still
        for job in arrivals:
            where = (
                place(job.members, nodes, layout) if name == "topos" else place(job.members, nodes)
            )
            if where is None:
                failed += 1
                if job.members[0].requests[GPU] == 8:
                    failed_big += 1
                continue
            placed += 1
            for m in job.members:
                subtract(by_name[where[m.name]].free, m.requests)  # type: ignore[arg-type]
            if job.multi_node:
                used = {where[m.name] for m in job.members}
                if len(used) > 1:
                    spans.append(
                        (
                            len({layout.leaf_of[n] for n in used}),
                            len({layout.spine_of[n] for n in used}),
                        )
                    )
            running.append((step + job.duration, job, where))
        frag_samples.append(fragmentation(nodes))
        used_gpus = sum(GPUS - n.free[GPU] for n in nodes)
        util_samples.append(used_gpus / (GPUS * NODES))
    elapsed = time.perf_counter() - t0
    one_leaf = sum(1 for leaves, _ in spans if leaves == 1)
    one_spine = sum(1 for _, s in spans if s == 1)
    mean_leaves = statistics.mean(leaves for leaves, _ in spans) if spans else 0.0
    print(
        f"   {name:8s} fragmentation mean {statistics.mean(frag_samples):7.1f} GPUs, "
        f"end {frag_samples[-1]:5d} | utilisation mean {100 * statistics.mean(util_samples):4.1f}% "
        f"| unplaced jobs {failed:4d} (8-GPU-member {failed_big:4d}) of {failed + placed}"
    )
    share_leaf = 100 * one_leaf / max(1, len(spans))
    share_spine = 100 * one_spine / max(1, len(spans))
    print(
        f"            multi-node gangs: {len(spans)}, in one leaf {share_leaf:5.1f}%, "
        f"in one spine {share_spine:5.1f}%, mean leaves {mean_leaves:4.2f} "
        f"| replay {elapsed:5.1f} s"
    )


def link_run(label: str, stream: list[list[Job]], *, aware: bool) -> None:
    """Replay ``stream`` on a fabric of PCIe (odd leaves) and NVSwitch (even leaves) nodes."""
    nodes = []
    for n in cluster():
        leaf = int(n.labels["topos.io/leaf"].split("-")[1])
        link = "nvswitch" if leaf % 2 == 0 else "pcie"
        nodes.append(replace(n, link=link if aware else None, free=dict(n.free)))
    nvswitch = {n.name for n in cluster() if int(n.labels["topos.io/leaf"][5:]) % 2 == 0}
    layout = build_layout(nodes)
    by_name = {n.name: n for n in nodes}
    running: list[tuple[int, Job, dict[str, str]]] = []
    frag: list[int] = []
    failed = gang_gpus = best_gpus = 0
    t0 = time.perf_counter()
    for step, arrivals in enumerate(stream):
        still = []
        for end, job, where in running:
            if end > step:
                still.append((end, job, where))
                continue
            for m in job.members:
                free = by_name[where[m.name]].free
                for k, v in m.requests.items():
                    free[k] += v  # type: ignore[index]
        running = still
        for job in arrivals:
            found = topos_place(job.members, nodes, layout)
            if found is None:
                failed += 1
                continue
            running.append((step + job.duration, job, found))
            for m in job.members:
                subtract(by_name[found[m.name]].free, m.requests)  # type: ignore[arg-type]
                if job.multi_node or m.requests[GPU] > 1:
                    gang_gpus += m.requests[GPU]
                    best_gpus += m.requests[GPU] if found[m.name] in nvswitch else 0
        frag.append(fragmentation(nodes))
    elapsed = time.perf_counter() - t0
    print(
        f"   {label:11s} gang GPUs on NVSwitch {100 * best_gpus / max(1, gang_gpus):5.1f}% "
        f"| fragmentation mean {statistics.mean(frag):6.1f} GPUs | unplaced jobs {failed:4d} "
        f"| replay {elapsed:5.1f} s"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    decision_time(args.runs, args.seed)
    print(f"2. long mixed run: {args.steps} steps, seed {args.seed}, same job stream for both")
    stream = workload(args.steps, args.seed)
    replay("topos", stream, topos_place)
    replay("spread", stream, spread_members)
    print("3. GPU link class: odd leaves PCIe, even leaves NVSwitch, the same job stream")
    link_run("link-aware", stream, aware=True)
    link_run("link-blind", stream, aware=False)


if __name__ == "__main__":
    main()
