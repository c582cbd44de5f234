"""Pods bound per second by the Topos scheduler runtime on a real control plane.

Starts the test harness's etcd + kube-apiserver, registers ``--nodes`` Ready DGX H100 Nodes
through the API (no kubelets; the agents' hellos go straight into the inventory), then, for each
pipelining depth, creates ``--pods`` single-GPU pods in a fresh namespace *before* starting a
fresh coordinator runtime (inventory synced from the API server), and times from start to the
last successful bind. Baseline in the same run: depth 1 (each bind waits for the previous).

    .venv/bin/python benchmarks/binding_throughput.py --nodes 200 --pods 500 [--event-loop asyncio]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid

from agent.devices import discover_profile
from common.kube import NAMESPACES, NODES, PODS, KubeClient
from common.labeling import labels
from common.model import NodeTopology
from common.podkeys import GPU_RESOURCE
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.adapters.kube.runtime import kube_runtime
from coordinator.app.main import event_loop
from coordinator.engine.loop import RuntimeSettings
from coordinator.inventory.store import Inventory
from devcluster.binaries import ensure
from devcluster.controlplane import ControlPlane
from devcluster.nodes import SimNode, node_status

RUN = uuid.uuid4().hex[:6]


async def register(kube: KubeClient, count: int) -> dict[str, NodeTopology]:
    topologies: dict[str, NodeTopology] = {}
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        name = f"bench-{RUN}-{i:04d}"
        topo = discover_profile("dgx-h100", hostname=name)
        published = labels(topo)
        async with sem:
            await kube.create(
                NODES,
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {**published.labels, "kubernetes.io/hostname": name},
                    },
                },
            )
            sim = SimNode(name=name, profile="dgx-h100", leaf="", spine="", topology=topo)
            await kube.patch(NODES, name, node_status(sim), subresource="status")
            await kube.patch(NODES, name, {"spec": {"taints": None}})
        topologies[name] = topo

    await asyncio.gather(*(one(i) for i in range(count)))
    return topologies


async def create_pods(kube: KubeClient, namespace: str, count: int) -> None:
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p-{i:05d}"},
            "spec": {
                "schedulerName": "topos",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {
                            "requests": {"cpu": "1", "memory": "1Gi"},
                            "limits": {GPU_RESOURCE: "1"},
                        },
                    }
                ],
            },
        }
        async with sem:
            await kube.create(PODS, body, namespace=namespace)

    await asyncio.gather(*(one(i) for i in range(count)))


async def measure(
    plane: ControlPlane, topologies: dict[str, NodeTopology], pods: int, depth: int
) -> tuple[float, float, float]:
    """(pods bound per second, seconds, this process's CPU ms per pod from the runtime's start
    until the last bind's Event and watch events are through) for one pipelining depth."""
    admin = await KubeClient.connect(plane.kubeconfig)
    namespace = f"bench-{RUN}-d{depth}"
    await create_pods(admin, namespace, pods)
    await admin.close()
    client = await KubeClient.connect(plane.kubeconfig)
    inventory = Inventory(stale_ttl_s=3600)
    synced = asyncio.Event()
    sync = KubeSync(client, inventory, on_synced=synced.set)
    for name, topo in topologies.items():
        inventory.apply_hello(
            name, agent_id=name, agent_version="bench", seq=0, topology=topo, allocations=()
        )
    sync_task = asyncio.create_task(sync.run())
    runtime = kube_runtime(
        client,
        inventory,
        inventory_synced=synced,
        namespace=namespace,
        settings=RuntimeSettings(max_binds_in_flight=depth),
    )
    async with runtime:
        await runtime.started.wait()
        started, cpu = time.perf_counter(), time.process_time()
        while runtime.scheduler.stats.bound < pods:  # noqa: ASYNC110 (a counter, no event)
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started
        await runtime.scheduler.drain()
        await asyncio.sleep(0.5)  # the Scheduled Events and the watch events of the last binds
        cpu = time.process_time() - cpu
    sync_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sync_task
    await client.close()
    return pods / elapsed, elapsed, 1e3 * cpu / pods


async def main(args: argparse.Namespace) -> None:
    plane = ControlPlane.start(binaries=ensure())
    try:
        kube = await KubeClient.connect(plane.kubeconfig)
        t0 = time.perf_counter()
        topologies = await register(kube, args.nodes)
        await kube.close()
        print(f"registered {args.nodes} Nodes in {time.perf_counter() - t0:.1f}s")
        results = []
        for depth in (1, args.depth):
            rate, secs, cpu_ms = await measure(plane, topologies, args.pods, depth)
            results.append((depth, rate, secs))
            print(
                f"depth {depth:>3}: {args.pods} pods bound in {secs:6.2f}s = {rate:7.1f} pods/s, "
                f"coordinator CPU {cpu_ms:.2f} ms/pod"
            )
        base = results[0][1]
        print(
            f"pipelined binding (depth {args.depth}) vs one bind at a time: "
            f"{results[1][1] / base:.2f}x  ({args.nodes} nodes, {args.nodes * 8} GPUs)"
        )
    finally:
        plane.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200, help="Nodes to register (100-1000)")
    parser.add_argument("--pods", type=int, default=500, help="single-GPU pods per run")
    parser.add_argument("--depth", type=int, default=64, help="binds in flight when pipelined")
    parser.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the loop the runtime runs on (the coordinator's coordinator.eventLoop)",
    )
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=event_loop(args.event_loop)) as runner:
        runner.run(main(args))
