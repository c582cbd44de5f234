"""Slice placement benchmark: multi-level slices on 1,000 nodes, with and without slice keys.

A 64-pod gang of 8 slices is planned on 1,000 DGX H100 nodes (8 GPUs each; 2 spines × 16 leaves;
NVLink domains, ``nvidia.com/gpu.clique``, of 8 nodes) that are about 60 % busy (seeded), through
the whole gang cycle (``schedule_gang``: slice keys read, planning, every member confirmed by the
per-pod core). Two shapes:

- **leaf**: 64 pods × 8 GPUs, slices of 8 pods each inside one leaf (``topos.io/slice-topology:
  leaf``), the gang inside one spine (``topos.io/gang-topology: spine``);
- **nvlink**: 64 pods × 4 GPUs, slices of 8 pods (32 GPUs) each inside one NVLink domain
  (``nvidia.com/gpu.clique``).

Each is planned with the slice keys, without them (the same planner: the gang's network rules
alone), and by a naive per-pod first-fit; reported: the share of slices (8 consecutive ranks)
inside one domain of their level, and the decision time (median and p90; goal < 100 ms).

Run: ``.venv/bin/python -m benchmarks.slice_placement [--runs N] [--seed S]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Mapping

from agent.devices import discover_profile
from common import podkeys
from coordinator.core.domains.capacity import node_states
from coordinator.core.gangs.cycle import GangDecision, member_of, schedule_gang
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.sim.baselines.gangs import first_fit_members

NODES, SPINES, LEAVES_PER_SPINE, CLIQUE_NODES, GPUS = 1000, 2, 16, 8, 8
LEAF, SPINE, CLIQUE = "topos.io/leaf", "topos.io/spine", "nvidia.com/gpu.clique"
PODS, SLICE = 64, 8
GOAL_MS = 100.0
GiB = 2**30


def cluster(seed: int) -> Snapshot:
    """1,000 nodes about 60 % busy: a third full, a third partly used, a third idle."""
    rng = random.Random(seed)
    leaves = SPINES * LEAVES_PER_SPINE
    topo = discover_profile("dgx-h100", hostname="node")
    nodes = []
    for i in range(NODES):
        name = f"node-{i:04d}"
        leaf = i * leaves // NODES
        busy = rng.choice((GPUS, rng.randint(1, GPUS - 1), 0))
        pods = []
        if busy:
            pods.append(
                PodInfo(
                    namespace="batch",
                    name=f"old-{i}",
                    requests={
                        "cpu": 4000 * busy,
                        "memory": 16 * GiB * busy,
                        podkeys.GPU_RESOURCE: busy,
                    },
                    placement=Placement(gpus=tuple(range(busy))),
                )
            )
        labels = {
            LEAF: f"leaf-{leaf + 1}",
            SPINE: f"spine-{leaf // LEAVES_PER_SPINE + 1}",
            CLIQUE: f"clique-{i // CLIQUE_NODES}",
        }
        alloc = {"cpu": 224_000, "memory": 2048 * GiB, "pods": 110, podkeys.GPU_RESOURCE: GPUS}
        nodes.append(
            NodeInfo.build(name, labels=labels, allocatable=alloc, topology=topo, pods=pods)
        )
    return Snapshot(nodes, namespaces={"default": {}, "batch": {}, "ml": {}})


def gang(gpus: int, annotations: Mapping[str, str]) -> list[PodRequest]:
    out = []
    for i in range(PODS):
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"w-{i}",
                "namespace": "ml",
                "labels": {
                    "topos.io/gang": "train",
                    "topos.io/gang-min": str(PODS),
                    "batch.kubernetes.io/job-completion-index": str(i),
                },
                "annotations": dict(annotations),
            },
            "spec": {
                "schedulerName": "topos",
                "containers": [
                    {
                        "name": "w",
                        "image": "w",
                        "resources": {"limits": {podkeys.GPU_RESOURCE: str(gpus)}},
                    }
                ],
            },
        }
        parsed = parse_pod(obj)
        assert isinstance(parsed, PodRequest), parsed
        out.append(parsed)
    return out


def share_inside(assignments: Mapping[str, str], snapshot: Snapshot, label: str) -> float:
    """The share of slices (8 consecutive ranks) whose nodes all carry one value of ``label``."""
    values: dict[int, set[str]] = {}
    for pod, node in assignments.items():
        info = snapshot.get(node)
        assert info is not None
        values.setdefault(int(pod.rsplit("-", 1)[1]) // SLICE, set()).add(info.labels[label])
    return sum(len(v) == 1 for v in values.values()) / (PODS // SLICE)


def run_case(
    name: str, gpus: int, level: str, keys: Mapping[str, str], runs: int, seed: int
) -> None:
    snapshot = cluster(seed)
    framework = build_framework()
    slices = PODS // SLICE
    print(f"{name}: {PODS} pods × {gpus} GPUs, {slices} slices of {SLICE}, each inside one {level}")
    for label, written in (("slice keys", keys), ("no keys", {})):
        pods = gang(gpus, written)
        samples = []
        decided: GangDecision | None = None
        for _ in range(runs):
            t0 = time.perf_counter()
            result = schedule_gang(pods, snapshot, framework, min_member=PODS)
            samples.append((time.perf_counter() - t0) * 1000)
            assert isinstance(result, GangDecision), result
            decided = result
        assert decided is not None
        samples.sort()
        median, p90 = statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]
        placed = {d.pod_key.split("/")[1]: d.node for d in decided.decisions}
        verdict = "OK" if median < GOAL_MS else "MISSED"
        share = share_inside(placed, snapshot, level)
        print(
            f"  topos {label:10s} slices inside one {level}: {share:6.1%}  decision median"
            f" {median:6.1f} ms, p90 {p90:6.1f} ms [{verdict} vs goal {GOAL_MS:.0f} ms]"
        )
    members = [member_of(p) for p in gang(gpus, {})]
    naive = first_fit_members(members, node_states(snapshot))
    assert naive is not None
    naive_placed = {k.split("/")[1]: v for k, v in naive.items()}
    share = share_inside(naive_placed, snapshot, level)
    print(f"  naive first-fit       slices inside one {level}: {share:6.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    run_case(
        "leaf",
        8,
        LEAF,
        {
            "topos.io/slice-size": str(SLICE),
            "topos.io/slice-topology": "leaf",
            "topos.io/gang-topology": "spine",
        },
        args.runs,
        args.seed,
    )
    run_case(
        "nvlink",
        4,
        CLIQUE,
        {"topos.io/slice-size": str(SLICE), "topos.io/slice-topology": CLIQUE},
        args.runs,
        args.seed,
    )


if __name__ == "__main__":
    main()
