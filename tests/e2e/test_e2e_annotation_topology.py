"""A cluster whose agents run only as `topos agent --once` (no capacity stream), on the real control
plane: the coordinator schedules from the topology each agent published on its Node
(``topos.io/topology``) — a single-NUMA pod gets GPUs of one NUMA node, an NVLink pod avoids the
PCIe-only node — and a restarted coordinator places the next pod at once, around the GPUs the
first pods hold (read back from their annotations)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import ClientSession, web

from agent.devices import discover_profile
from common.kube import PODS, KubeClient
from common.labels import LEAF
from coordinator.api.keys import INVENTORY
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from devcluster.kube_wait import scheduled_message, wait_for_bound, wait_for_object
from devcluster.nodes import SimNode, register
from devcluster.pods import gpu_pod
from devcluster.subprocess_env import subprocess_env
from tests.support.gpu_cluster import assignment, gpu_indices
from tests.support.inventory_wait import until

pytestmark = pytest.mark.kube

REPO = Path(__file__).resolve().parents[2]
SINGLE_NUMA = {"topos.io/numa-policy": "single-numa"}
NVLINK = {"topos.io/gpu-locality": "nvlink"}


async def _agent_once(kubeconfig: Path, node: SimNode) -> None:
    """`topos agent --once` for ``node``: discover (its profile's fake NVML), publish, exit."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        "agent",
        "--once",
        "--profile",
        node.profile,
        "--node",
        node.name,
        "--kubeconfig",
        str(kubeconfig),
        cwd=REPO,
        env=subprocess_env({"PATH": os.environ.get("PATH", "/usr/bin:/bin")}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    assert "patched" in out.decode()


@contextlib.asynccontextmanager
async def _coordinator(
    kubeconfig: Path, namespace: str, leaf: str
) -> AsyncIterator[tuple[web.Application, str]]:
    config = parse_config(
        {
            "auth": {"enabled": False},
            # the defaults otherwise: no agent grace
            "scheduler": {"namespace": namespace, "nodeSelector": {LEAF: leaf}},
        }
    )
    app = wire(config, KubeBackend(str(kubeconfig)))
    async with running(app) as url:
        yield app, url


async def test_agent_once_cluster_gets_numa_and_nvlink_placement_and_restarts_schedule_at_once(
    kube: KubeClient, kubeconfig: Path, namespace: str, unique_name: Callable[[str], str]
) -> None:
    leaf = unique_name("leaf")
    nodes = []
    for profile in ("dgx-h100", "pcie-8x"):
        name = unique_name(profile)
        topo = discover_profile(profile, hostname=name)
        nodes.append(SimNode(name=name, profile=profile, leaf=leaf, spine="s", topology=topo))
    dgx, _pcie = nodes
    await register(kube, nodes)
    for node in nodes:
        await _agent_once(kubeconfig, node)

    async with _coordinator(kubeconfig, namespace, leaf) as (app, url):
        inv = app[INVENTORY]
        await until(inv, lambda: all(inv.node(n.name) is not None for n in nodes))
        async with ClientSession() as http:
            async with http.get(f"{url}/v1/nodes/{dgx.name}") as resp:
                shown = await resp.json()
            async with http.get(f"{url}/metrics") as resp:
                metrics = await resp.text()
        counted = re.search(r'topos_inventory_nodes\{state="annotation_topology"\} (\S+)', metrics)
        assert counted is not None
        assert float(counted.group(1)) >= 2  # these two (the control plane is shared)
        assert shown["topology_source"] == "annotation"
        assert not shown["connected"]
        assert not shown["stale"]
        assert shown["schedulable"]
        assert len(shown["topology"]["gpus"]) == 8

        await kube.create(PODS, gpu_pod("fill", 4, annotations=SINGLE_NUMA), namespace=namespace)
        fill = await wait_for_bound(kube, namespace, "fill")
        await kube.create(PODS, gpu_pod("nvlink", 2, annotations=NVLINK), namespace=namespace)
        nvlink = await wait_for_bound(kube, namespace, "nvlink")
        # Six NVLink-joined GPUs: the DGX has two left, the PCIe node eight with no NVLink.
        await kube.create(PODS, gpu_pod("too-wide", 6, annotations=NVLINK), namespace=namespace)
        too_wide = await wait_for_object(
            kube,
            PODS,
            "too-wide",
            lambda p: (
                bool(p["spec"].get("nodeName")) or scheduled_message(p, status="False") is not None
            ),
            namespace=namespace,
        )
        assert not too_wide["spec"].get("nodeName"), too_wide["spec"]["nodeName"]
        await kube.delete(PODS, "too-wide", namespace=namespace, grace_period_seconds=0)
    node, fill_gpus, fill_numa = assignment(fill)
    assert node == dgx.name
    assert len(fill_numa) == 1, fill_numa  # single-numa: four GPUs of one NUMA node
    assert {dgx.topology.gpus[i].numa_node for i in gpu_indices(dgx.topology, fill_gpus)} == {
        fill_numa[0]
    }
    assert assignment(nvlink)[0] == dgx.name
    taken = set(fill_gpus) | set(assignment(nvlink)[1])

    # No coordinator runs; a pod arrives. The next coordinator places it at once — no agent will
    # ever reconnect — on the GPUs the others do not hold.
    await kube.create(PODS, gpu_pod("after", 2, annotations=SINGLE_NUMA), namespace=namespace)
    async with _coordinator(kubeconfig, namespace, leaf) as (app, _url):
        inv = app[INVENTORY]
        assert inv.grace_left_s() == 0
        after = await wait_for_bound(kube, namespace, "after")
        state = inv.node(dgx.name)
        assert state is not None
        assert state.topology_source == "annotation"
    node, after_gpus, after_numa = assignment(after)
    assert node == dgx.name
    assert len(after_numa) == 1
    assert not taken & set(after_gpus), f"{after_gpus} reuses GPUs of {sorted(taken)}"
