"""A coordinator that starts on a cluster where pods already share GPUs scores against that
cluster's mix of pod shapes from its first decision (docs/sharing.md): it reads the shapes of
the pods running, instead of starting from the default mix until enough new pods are seen."""

from __future__ import annotations

from typing import Any

import pytest

from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.inventory.store import Inventory
from devcluster.pods import pod
from tests.support.polling import eventually


def placed(name: str, node: str, **kw: Any) -> dict[str, Any]:
    obj: dict[str, Any] = pod(name, **kw)
    obj["spec"]["nodeName"] = node  # bound by an earlier coordinator
    obj["spec"]["schedulerName"] = "topos"
    return obj


def cluster(*, shares_running: bool) -> MemoryCluster:
    """Three 8-GPU nodes: "tight" has just the cores its GPUs need at 16 per GPU, "roomy" more
    free, and the running pods fill "work"'s cores."""
    inventory = Inventory(stale_ttl_s=3600)
    memory = MemoryCluster(inventory)
    for name, cpu in (("tight", "128"), ("roomy", "256"), ("work", "100")):
        topo = discover_profile("pcie-8x", hostname=name)
        memory.add_node(name, topology=topo, allocatable={"cpu": cpu, "memory": "1Ti"})
    memory.create_pod(placed("busy", "roomy", cpu="100"))
    for i in range(12):
        if shares_running:  # halves of a GPU asking 8 cores each: 16 cores per GPU
            held = {"topos.io/gpu-share": "fraction=0.5"}
            memory.create_pod(placed(f"h{i}", "work", cpu="8", annotations=held))
        else:
            memory.create_pod(placed(f"w{i}", "work", cpu="8", gpus=1))
    return memory


def node_of(memory: MemoryCluster, name: str) -> str | None:
    obj = memory.pod("default", name)
    assert obj is not None
    node: str | None = obj["spec"].get("nodeName")
    return node


@pytest.mark.parametrize(
    ("shares_running", "expected"),
    [
        # "tight"'s cores are left to the GPUs the running shares' mix will want
        (True, "roomy"),
        # only whole-GPU pods running: placed as it always was
        (False, "tight"),
    ],
)
async def test_the_pods_running_at_start_set_the_mix_of_the_first_decision(
    shares_running: bool, expected: str
) -> None:
    memory = cluster(shares_running=shares_running)
    async with memory_runtime(memory.inventory, memory):
        memory.create_pod(pod("batch", cpu="32"))
        await eventually(lambda: node_of(memory, "batch"), what="batch bound", timeout_s=10)
    assert node_of(memory, "batch") == expected
