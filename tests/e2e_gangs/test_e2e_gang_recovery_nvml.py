"""Gang recovery driven by the hardware, end to end on the real control plane: every node runs
the real ``topos agent`` process on the real ``pynvml`` loading the C NVML library
(``devcluster/nvmlfake``), streaming to a coordinator. One GPU under a running gang member turns
bad in that node's NVML (uncorrected ECC errors, written to the library's state file as a
failing GPU would show them); the agent's next cycle judges it unhealthy, the Node's
``ToposGPUHealthy`` condition turns False naming it, the coordinator moves only that member, and
the replacement lands inside the gang's own leaf, on healthy GPUs (docs/health.md, "Recovery
inside the domain")."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from common import labels as L
from common.kube import NODES
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from devcluster.kube_wait import wait_for_object
from tests.support.gang_cluster import Controllers, GangCluster, gang_pod
from tests.support.gpu_cluster import RUN_LABEL
from tests.support.nvml_agents import nvml_agents
from tests.support.polling import eventually

pytestmark = pytest.mark.kube

PROFILE = "dgx-a100"


@contextlib.asynccontextmanager
async def coordinator(cluster: GangCluster) -> AsyncIterator[str]:
    config = parse_config(
        {
            "auth": {"enabled": False},
            "scheduler": {"namespace": cluster.namespace, "nodeSelector": {RUN_LABEL: cluster.run}},
        }
    )
    async with running(wire(config, KubeBackend(str(cluster.kubeconfig)))) as url:
        yield url


def health(node: dict[str, Any]) -> tuple[str, str, str] | None:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == L.GPU_HEALTH_CONDITION:
            return str(c["status"]), str(c["reason"]), str(c.get("message", ""))
    return None


async def test_a_gpu_turning_bad_in_nvml_moves_only_its_member_inside_the_leaf(
    cluster: GangCluster, tmp_path: Path
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=3, profile=PROFILE)
    async with coordinator(cluster) as url, Controllers(cluster):
        with nvml_agents(cluster.kubeconfig, url, nodes, tmp_path, PROFILE) as machines:
            async with aiohttp.ClientSession() as http:
                for name in nodes:  # every agent streams its node to the coordinator

                    async def connected(name: str = name) -> bool | None:
                        async with http.get(f"{url}/v1/nodes/{name}") as resp:
                            return (await resp.json()).get("connected") or None

                    await eventually(connected, what=f"{name}'s agent to connect")
            owner = await cluster.job("train")
            for k in range(2):
                await cluster.create(gang_pod(f"w-{k}", "train", 2, recreate=True, owner=owner))
            before = await cluster.all_bound("topos.io/gang=train", 2)
            leaf = cluster.leaf_of[before["w-0"]]
            assert cluster.leaf_of[before["w-1"]] == leaf  # one leaf, one node free in it
            victim = await cluster.pod("w-1")
            node = victim["spec"]["nodeName"]
            original = victim["metadata"]["uid"]
            await wait_for_object(
                cluster.kube,
                NODES,
                node,
                lambda n: (health(n) or ("",))[0] == "True",
                what=f"{node}'s agent to report its GPUs healthy",
            )

            # GPU 3 under w-1 starts failing: uncorrected ECC errors, read by the next cycle.
            m = machines[node]
            m.fake.set_health(3, ecc_uncorrected=2)
            m.write()

            sick = await wait_for_object(
                cluster.kube,
                NODES,
                node,
                lambda n: (health(n) or ("",))[0] == "False",
                what=f"{node}'s ToposGPUHealthy to turn False",
            )
            after = await cluster.all_bound("topos.io/gang=train", 2, replaced={"w-1": original})
            event = await cluster.event("Rescheduled", name="w-1")
    assert health(sick) == (
        "False",
        "GPUUnhealthy",
        "GPU3 unhealthy: 2 uncorrected ECC errors since the driver loaded",
    )
    assert after["w-0"] == before["w-0"]  # the healthy member stayed
    assert after["w-1"] != node  # 7 healthy GPUs are too few for 8
    assert cluster.leaf_of[after["w-1"]] == leaf  # the gang's own leaf, not the empty one
    uuid = m.fake.gpu_uuids()[3]
    assert f"GPU {uuid} on node {node} is unhealthy" in event["message"], event["message"]
    assert "1 of 2 members move" in event["message"], event["message"]
    assert f"goes to {after['w-1']}, inside the gang's own leaf {leaf}" in event["message"]
