"""Health-aware against health-blind placement on one trace, same cluster, same jobs, same run
(``coordinator.sim`` on the production engine; docs/health.md, "Placement").

The cluster: 48 nodes in 6 leaves of 8 — DGX-1 V100s (24: direct NVLink, hybrid cube-mesh) and
DGX H100s (24: NVSwitch). Injected faults, seeded: on a quarter of the nodes one NVLink is
degraded (2,341 CRC errors in 10 min, as the agent reports it): on a DGX-1 one NV2 pair, on a
DGX H100 one GPU's port to an NVSwitch (which slows every pair of that GPU). The faults are
present from the start (the replay has no mid-run failures).

Both runs pay for the faults the same way: a multi-GPU job whose GPUs include a degraded pair
runs as if that pair were its fallback class (``NODE``/``SYS``) under the cost model
(``coordinator/sim/costmodel.py``: NV 1.0, NODE 1.25, SYS 1.4). The health-blind run's scheduler
is given the topologies without the agent's verdicts (``ReplaySettings.health_blind``).

Reported: multi-GPU jobs that ran over a degraded link, their communication stretch, and the
modelled job completion time.

Run: ``.venv/bin/python -m benchmarks.health_placement [--jobs 800] [--load 0.85] [--seed 7]``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence

import msgspec

from agent.devices import discover_profile
from common.linkhealth import degraded_pairs
from common.model import GpuHealth, NodeTopology, NvLinkHealth
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.sim import (
    ReplaySettings,
    Simulator,
    build_nodes,
    cluster_shape,
    generate,
    make_policy,
    parse_cluster,
)
from coordinator.sim.metrics import RunResult
from coordinator.sim.report import format_duration

CLUSTER = """
name: health-48
layout: {nodesPerLeaf: 8, leavesPerSpine: 3}
nodes:
  - {profile: dgx1-v100, count: 24}
  - {profile: dgx-h100, count: 24}
"""
REASON = "NVLink 0 degraded: 2,341 CRC errors in 10 min"


def _sick(topology: NodeTopology, rng: random.Random) -> NodeTopology:
    """``topology`` with one NVLink degraded, as the agent would report it."""
    gpus = list(topology.gpus)
    if topology.nvswitch:
        i, peer = rng.randrange(len(gpus)), None
    else:
        pairs = [
            (i, j)
            for i in range(len(gpus))
            for j in range(i + 1, len(gpus))
            if topology.link(i, j).nvlinks >= 2
        ]
        i, j = rng.choice(pairs)
        peer = gpus[j].pci_bus_id
    port = NvLinkHealth(
        link=0, peer_bus_id=peer, status="degraded", reason=REASON, crc_in_window=2341
    )
    health = GpuHealth(nvlinks=(port,), status="degraded", reasons=(REASON,))
    gpus[i] = msgspec.structs.replace(gpus[i], health=health)
    return msgspec.structs.replace(topology, gpus=tuple(gpus))


def inject(nodes: Sequence[NodeInfo], share: float, seed: int) -> list[NodeInfo]:
    rng = random.Random(seed)
    out = []
    for n in nodes:
        if n.topology is not None and rng.random() < share:
            n = NodeInfo.build(
                n.name, labels=n.labels, allocatable=n.allocatable, topology=_sick(n.topology, rng)
            )
        out.append(n)
    return out


def on_degraded(result: RunResult) -> tuple[int, int, float]:
    """(multi-GPU jobs, of those on a degraded pair, their mean stretch)."""
    multi = [o for o in result.outcomes.values() if o.multi_gpu_pods]
    hit = [o for o in multi if o.degraded_link]
    return len(multi), len(hit), (sum(o.stretch for o in hit) / len(hit) if hit else 1.0)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=800)
    ap.add_argument("--load", type=float, default=0.85)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--faulty", type=float, default=0.25, help="share of nodes with a fault")
    args = ap.parse_args(argv)
    spec = parse_cluster(CLUSTER)
    nodes = inject(
        build_nodes(spec, lambda p: discover_profile(p, hostname=p)), args.faulty, args.seed
    )
    sick = sum(1 for n in nodes if n.topology is not None and degraded_pairs(n.topology))
    jobs = generate(cluster_shape(nodes, jobs=args.jobs, load=args.load, seed=args.seed))
    print(
        f"{len(nodes)} nodes ({sick} with a degraded NVLink), {len(jobs)} jobs at load "
        f"{args.load}, seed {args.seed}"
    )
    print(
        f"{'placement':<14}{'multi-GPU jobs':>16}{'on a degraded link':>20}"
        f"{'their stretch':>15}{'JCT mean':>10}{'JCT p95':>10}{'placed':>9}"
    )
    for blind in (False, True):
        settings = ReplaySettings(health_blind=blind)
        sim = Simulator(nodes, jobs, cost_model=spec.cost_model, settings=settings)
        result = sim.run(make_policy("topos"))
        summary = result.summary()
        multi, hit, stretch = on_degraded(result)
        print(
            f"{'health-blind' if blind else 'health-aware':<14}{multi:>16}{hit:>20}"
            f"{'×' + format(stretch, '.3f'):>15}{format_duration(summary.jct_mean_s):>10}"
            f"{format_duration(summary.jct_p95_s):>10}{summary.placed:>5}/{summary.jobs}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
