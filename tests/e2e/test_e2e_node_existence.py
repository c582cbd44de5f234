"""The API server decides which nodes exist, on the real control plane with a whole coordinator
(authentication off, as in the README's try-it flow) and agents streaming to it: a deleted Node
whose agent still streams takes no pod, a hello for a made-up node is never a target nor one of
the "0/N nodes"; and after a restart, GPU pods wait for the agents (or, after the grace, use the
topology published on the Node) and are never bound without their GPUs chosen."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
from aiohttp import web

from agent.devices import discover_profile
from common.kube import NODES, PODS, KubeClient
from common.labeling import LabelingSettings, labels
from common.labels import LEAF
from coordinator.api.keys import INVENTORY
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from coordinator.app.scheduler import RUNNING
from coordinator.inventory.state import NodeState
from devcluster.kube_wait import (
    scheduled_message,
    wait_for_bound,
    wait_for_object,
    wait_for_pods,
)
from devcluster.nodes import SimNode, register
from devcluster.pods import gpu_pod
from tests.support.gpu_cluster import assignment
from tests.support.inventory_wait import until
from tests.support.sim_agent import SimAgent

pytestmark = pytest.mark.kube

NO_TOPOLOGY = "node(s) had no GPU topology from a Topos agent yet"


async def _nodes(
    kube: KubeClient, unique_name: Callable[[str], str], leaf: str, profiles: Sequence[str]
) -> list[SimNode]:
    nodes = []
    for profile in profiles:
        name = unique_name(profile)
        topo = discover_profile(profile, hostname=name)
        nodes.append(SimNode(name=name, profile=profile, leaf=leaf, spine="s", topology=topo))
    await register(kube, nodes)
    return nodes


async def _publish_topology(kube: KubeClient, node: SimNode) -> None:
    """What the node's agent writes on its Node (``topos.io/topology`` and friends)."""
    published = labels(node.topology, LabelingSettings())
    await kube.patch(NODES, node.name, {"metadata": {"annotations": dict(published.annotations)}})


@contextlib.asynccontextmanager
async def _coordinator(
    kubeconfig: Any, namespace: str, leaf: str, *, grace_s: float = 0
) -> AsyncIterator[tuple[web.Application, str]]:
    config = parse_config(
        {
            "coordinator": {"sweepIntervalSeconds": 0.2},
            "auth": {"enabled": False},
            "scheduler": {
                "namespace": namespace,
                "nodeSelector": {LEAF: leaf},
                "agentGraceSeconds": grace_s,
            },
        }
    )
    app = wire(config, KubeBackend(str(kubeconfig)))
    async with running(app) as url:
        yield app, url


async def _unschedulable(kube: KubeClient, namespace: str, name: str) -> str:
    pod = await wait_for_object(
        kube,
        PODS,
        name,
        lambda p: (
            bool(p["spec"].get("nodeName")) or scheduled_message(p, status="False") is not None
        ),
        namespace=namespace,
        what=f"pod {name} to be explained",
    )
    assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec']['nodeName']}"
    return str(scheduled_message(pod, status="False"))


async def test_deleted_node_and_made_up_node_take_no_pods_though_their_agents_stream(
    kube: KubeClient, kubeconfig: Any, namespace: str, unique_name: Callable[[str], str]
) -> None:
    leaf = unique_name("leaf")
    pcie, small = await _nodes(kube, unique_name, leaf, ["pcie-8x", "l40s-4x"])
    ghost = SimNode(
        name=unique_name("ghost-dgx"),
        profile="dgx-a100",
        leaf=leaf,
        spine="s",
        topology=discover_profile("dgx-a100"),
    )
    async with _coordinator(kubeconfig, namespace, leaf) as (app, url):
        inv = app[INVENTORY]
        agents = [SimAgent(url, n) for n in (pcie, small, ghost)]
        for agent in agents:
            await agent.start()
        await until(inv, lambda: all(inv.node(n.name) is not None for n in (pcie, small, ghost)))
        # Even a node filter that would admit the made-up node by name finds no such node.
        runtime = app[RUNNING].runtime
        assert runtime is not None

        def ours(node: NodeState) -> bool:
            return node.labels.get(LEAF) == leaf or node.name == ghost.name

        runtime.scheduler.view.node_filter = ours

        await kube.create(PODS, gpu_pod("before", 8), namespace=namespace)
        assert (await wait_for_bound(kube, namespace, "before"))["spec"]["nodeName"] == pcie.name
        await kube.delete(PODS, "before", namespace=namespace, grace_period_seconds=0)

        await kube.delete(NODES, pcie.name)  # kubectl delete node, its agent still running
        await until(inv, lambda: inv.node(pcie.name).ready is None)  # type: ignore[union-attr]
        assert agents[0].client.connected.is_set()
        await kube.create(PODS, gpu_pod("after", 8), namespace=namespace)
        message = await _unschedulable(kube, namespace, "after")
        # Only the node the API server has is counted: not the deleted one, not the ghost.
        assert message.startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu"), message

        # The Node is back: the agent's report and the Node object together take the pod.
        await register(kube, [pcie])
        assert (await wait_for_bound(kube, namespace, "after"))["spec"]["nodeName"] == pcie.name
        for agent in agents:
            await agent.stop()


async def test_restart_waits_for_agents_or_uses_the_published_topology_never_binds_blind(
    kube: KubeClient, kubeconfig: Any, namespace: str, unique_name: Callable[[str], str]
) -> None:
    leaf = unique_name("leaf")
    published, returning, silent = await _nodes(
        kube, unique_name, leaf, ["pcie-8x", "pcie-8x", "l40s-4x"]
    )
    await _publish_topology(kube, published)
    # First life: every agent streams; two 4-GPU pods are bound with their GPUs chosen.
    async with _coordinator(kubeconfig, namespace, leaf) as (_app, url):
        agents = [SimAgent(url, n) for n in (published, returning)]
        for agent in agents:
            await agent.start()
        for i in range(2):
            await kube.create(PODS, gpu_pod(f"first-{i}", 4), namespace=namespace)
        for i in range(2):
            await wait_for_bound(kube, namespace, f"first-{i}")
        for agent in agents:
            await agent.stop()
    # While no coordinator runs, the cluster fills up: 4 more pods for the 8 free GPUs left on
    # the two 8-GPU nodes (each pod fits only with GPUs chosen around those already held), and
    # one pod pinned to the node whose agent never reported anything.
    for i in range(3):
        await kube.create(PODS, gpu_pod(f"second-{i}", 2 + (i == 0) * 2), namespace=namespace)
    pinned = gpu_pod("pinned", 1, node_selector={"kubernetes.io/hostname": silent.name})
    await kube.create(PODS, pinned, namespace=namespace)
    # Second life, agents slow to come back: only `returning`'s agent does, a moment later.
    async with _coordinator(kubeconfig, namespace, leaf, grace_s=10) as (_app, url):
        # The coordinator has looked at the pods before this agent is back (on a slow machine
        # the grace may have ended and the Node's published topology taken a pod already).
        await wait_for_object(
            kube,
            PODS,
            "second-0",
            lambda p: bool(p["spec"].get("nodeName")) or scheduled_message(p) is not None,
            namespace=namespace,
        )
        late = SimAgent(url, returning)
        await late.start()
        pods = await wait_for_pods(
            kube,
            namespace,
            lambda items: (
                items if sum(bool(p["spec"].get("nodeName")) for p in items) == 5 else None
            ),
            what="the first and second pods to be bound",
        )
        assert NO_TOPOLOGY in await _unschedulable(kube, namespace, "pinned")
        await late.stop()
    held: dict[str, list[str]] = {}
    for pod in pods:
        if not pod["spec"].get("nodeName"):
            continue
        node, gpus, _ = assignment(pod)
        want = int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        assert len(gpus) == want, f"{pod['metadata']['name']} bound without its GPUs chosen"
        held.setdefault(node, []).extend(gpus)
    assert set(held) == {published.name, returning.name}
    for node, gpus in held.items():
        assert len(gpus) == len(set(gpus)) == 8, f"{node}: {gpus}"
