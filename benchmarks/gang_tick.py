"""CPU of the gang runtime's ticker on a big, busy cluster, where most pods belong to no gang.

Every half second the gang step looks at the bound pods to count gang members (those a
predecessor bound, or another scheduler). In one process, no API server: ``--nodes`` KWOK-like
DGX H100 Node objects and ``--per-node`` bound single-GPU pods on each (no gang; 40,000 at
5,000 × 8, a full cluster of 1-GPU pods) are listed into the inventory through the API-server
sync's own handlers, and one 2-member gang is bound among them. Then, timed (process CPU, median
of ``--ticks``):

- **idle tick** — nothing changed since the last tick;
- **tick after a bind** — one more pod bound somewhere since the last tick (its node's pods
  are looked at again);
- **the walks of before** — the baseline, in the same run: the tick forced to look at every
  node's pods (as the ticker did on every tick before it followed the inventory's changes, and
  still does once at start and after a PodGroup changes), plus the walk of every pod that
  finding gone members took before each member was looked up by its UID (still taken while a
  member's UID is unknown).

    .venv/bin/python -m benchmarks.gang_tick [--nodes 5000] [--per-node 8] [--ticks 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.kwok_pods import pod_body
from benchmarks.watch_events import _nodes
from common.kube import KubeClient
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.core.gangs.identity import GangKey
from coordinator.engine.gangs.service import GangRuntime
from coordinator.inventory.store import Inventory


def _pod(i: int, node: str, *, gang: bool = False) -> dict[str, Any]:
    body = pod_body(f"p-{i:06d}", "topos")
    body["metadata"].update(namespace="bench", uid=f"uid-{i}", resourceVersion=str(i + 1))
    if gang:
        body["metadata"]["labels"] = {"topos.io/gang": "g", "topos.io/gang-min": "2"}
    body["spec"]["nodeName"] = node
    body["status"] = {"phase": "Pending"}
    return body


def _median_ms(ticks: int, before: Callable[[int], None], tick: Callable[[], None]) -> float:
    spent = []
    for i in range(ticks):
        before(i)
        t0 = time.process_time()
        tick()
        spent.append(time.process_time() - t0)
    return 1000 * statistics.median(spent)


def measure(nodes: int, per_node: int, ticks: int) -> dict[str, float]:
    inventory = Inventory(stale_ttl_s=3600)
    sync = KubeSync(KubeClient.__new__(KubeClient), inventory)  # handlers only: never run
    node_handler, pod_handler = (r._handler for r in sync._reflectors)
    node_handler.replace(_nodes(nodes))
    names = [f"kwok-gpu-{i:04d}" for i in range(nodes)]
    pods = [_pod(i, names[i % nodes]) for i in range(nodes * per_node)]
    pods += [_pod(len(pods) + j, names[j], gang=True) for j in range(2)]
    pod_handler.replace(pods)
    runtime = memory_runtime(inventory, MemoryCluster(inventory))
    gangs = GangRuntime(runtime)
    step, membership = gangs.step, gangs.step.membership
    step.start()  # the first look: every node
    status = step.manager.status(GangKey("bench", "g"))
    if status is None or status.bound != 2:
        raise RuntimeError(f"the bound gang was not counted at start: {status}")

    def bind(i: int) -> None:
        pod_handler.apply("ADDED", _pod(10**7 + i, names[i * 997 % nodes]))

    def everything(_: int) -> None:
        membership._everything = True

    def walks_of_before() -> None:
        membership._present()
        step.tick()

    out = {
        "idle tick": _median_ms(ticks, lambda _: None, step.tick),
        "tick after a bind": _median_ms(ticks, bind, step.tick),
        "the walks of before": _median_ms(ticks, everything, walks_of_before),
    }
    membership.close()
    runtime.scheduler.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--ticks", type=int, default=30)
    args = ap.parse_args(argv)
    if args.nodes < 2 or args.per_node < 0 or args.ticks < 1:
        ap.error("--nodes ≥ 2, --per-node ≥ 0 and --ticks ≥ 1")
    figures = measure(args.nodes, args.per_node, args.ticks)
    pods = args.nodes * args.per_node + 2
    print(f"{args.nodes:,} nodes, {pods:,} bound pods (one 2-member gang); CPU per gang tick:")
    base = figures["the walks of before"]
    for name, ms in figures.items():
        share = 100 * ms / 1000 / 0.5
        print(f"  {name:24s} {1000 * ms:10,.1f} µs  ({share:.3f} % of a core, a tick every 0.5 s)")
    idle = figures["idle tick"]
    if idle > 0:
        print(f"  an idle tick costs {base / idle:,.0f}× less than the walks of before")
    return 0


if __name__ == "__main__":
    sys.exit(main())
