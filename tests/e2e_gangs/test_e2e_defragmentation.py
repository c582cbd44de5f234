"""Defragmentation on the real control plane, where kube-controller-manager's ReplicaSet and
Deployment controllers recreate what is evicted: a 4 × 8-GPU gang waits on five 8-GPU nodes,
four of which hold one 1-GPU Deployment pod each (36 GPUs free, one whole node). Topos moves the
fewest of them — three — through the Eviction API, the gang binds on four whole nodes, and the
recreated Deployment pods run on the fifth. A PodDisruptionBudget over those pods blocks every
move, and the gang's condition names it. With ``background``, compaction empties a node while
nothing waits; a bare pod marked movable is never moved, and an Event says why."""

from __future__ import annotations

from typing import Any

from common.kube import NODES
from coordinator.adapters.kube.objects import PDBS
from coordinator.core.preemption.defrag import DefragSettings
from coordinator.engine.gangs.service import GangSettings
from devcluster import pods
from tests.support.gang_cluster import Controllers, GangCluster, gang_pod
from tests.support.polling import eventually
from tests.support.workloads import apply


def web(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web", "web": name}},
            "template": {
                "metadata": {"labels": {"app": "web", "web": name}},
                "spec": {
                    "schedulerName": "topos",
                    "containers": [
                        {
                            "name": "serve",
                            "image": "serve:1",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                                "limits": {"nvidia.com/gpu": "1"},
                            },
                        }
                    ],
                },
            },
        },
    }


async def cordon(cluster: GangCluster, inventory: Any, nodes: list[str], keep: str) -> None:
    """Only ``keep`` takes new pods (and the coordinator has seen so)."""
    for node in nodes:
        await cluster.kube.patch(NODES, node, {"spec": {"unschedulable": node != keep}})

    def seen() -> bool:
        return all(inventory.node(n).unschedulable == (n != keep) for n in nodes)

    await eventually(seen, what="the cordons seen", timeout_s=30)


async def scattered(cluster: GangCluster, inventory: Any, nodes: list[str]) -> dict[str, str]:
    """One 1-GPU Deployment pod on each of the first four nodes; every node schedulable again."""
    for k, node in enumerate(nodes[:4]):
        await cordon(cluster, inventory, nodes, keep=node)
        await apply(cluster, web(f"web-{k}"))
        await cluster.all_bound(f"web=web-{k}", 1)
    for node in nodes:
        await cluster.kube.patch(NODES, node, {"spec": {"unschedulable": False}})
    await eventually(
        lambda: not any(inventory.node(n).unschedulable for n in nodes),
        what="the nodes uncordoned",
        timeout_s=30,
    )
    placed = await cluster.all_bound("app=web", 4)
    assert sorted(placed.values()) == sorted(nodes[:4])
    return placed


async def test_a_waiting_gang_moves_the_fewest_deployment_pods_and_binds(
    cluster: GangCluster,
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=5)
    async with Controllers(cluster), cluster.gang_coordinator() as coordinator:
        before = await scattered(cluster, coordinator.inventory, nodes)
        for k in range(4):
            await cluster.create(gang_pod(f"train-{k}", "train", 4))
        gang = await cluster.all_bound("topos.io/gang=train", 4)
        assert len(set(gang.values())) == 4  # four whole nodes
        (rest,) = set(nodes) - set(gang.values())
        # The moved pods were recreated by their ReplicaSets, and run on the fifth node.
        after = await cluster.all_bound("app=web", 4)
        assert set(after.values()) == {rest}
        moved = await cluster.events(reason="Moved")
        assert len({e["involvedObject"]["name"] for e in moved}) == 3  # the fewest
        assert len(set(before) - set(after)) == 3  # three pods are new
        message = moved[0]["message"]
        assert f"Moved to make room for gang:{cluster.namespace}/train (priority 0)" in message
        assert "its controller recreates it" in message
        assert f"(it fits on {rest})" in message
        defrag = await cluster.event("Defragmenting", name="train-0")
        assert f"gang:{cluster.namespace}/train defragments: moving 3 pods" in defrag["message"]


async def test_a_disruption_budget_blocks_the_moves_and_the_gang_says_so(
    cluster: GangCluster,
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=5)
    await cluster.kube.create(
        PDBS,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "web"}}},
        },
        namespace=cluster.namespace,
    )
    async with Controllers(cluster), cluster.gang_coordinator() as coordinator:
        before = await scattered(cluster, coordinator.inventory, nodes)
        for k in range(4):
            await cluster.create(gang_pod(f"train-{k}", "train", 4))
        message = await cluster.condition("train-0", "PodDisruptionBudget")
        assert "defragmentation cannot make room" in message
        assert (
            f"only evictions the PodDisruptionBudget(s) {cluster.namespace}/web forbid would "
            "make room" in message
        )
        assert not await cluster.events(reason="Moved")
        assert await cluster.placement("app=web") == before


async def test_background_compaction_empties_a_node_and_never_moves_a_bare_pod(
    cluster: GangCluster,
) -> None:
    # Two 1-GPU Deployment pods on n1 and n2, a bare pod marked movable on n3: with nothing
    # waiting, compaction empties one of the Deployments' nodes; the bare pod stays and its
    # mark is refused with an Event.
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    settings = GangSettings(backoff_s=2.0, defrag=DefragSettings(mode="background", interval_s=1.0))
    async with Controllers(cluster), cluster.gang_coordinator(gang_settings=settings) as coord:
        for k in range(2):
            await cordon(cluster, coord.inventory, nodes, keep=nodes[k])
            await apply(cluster, web(f"web-{k}"))
            await cluster.all_bound(f"web=web-{k}", 1)
        await cordon(cluster, coord.inventory, nodes, keep=nodes[2])
        await cluster.create(
            pods.pod(
                "loner",
                namespace=None,
                gpus=1,
                cpu="1",
                memory="1Gi",
                annotations={"topos.io/movable": "true"},
            )
        )
        await cluster.bound("loner")
        for node in nodes:
            await cluster.kube.patch(NODES, node, {"spec": {"unschedulable": False}})
        refused = await cluster.event("NotMovable", name="loner")
        assert 'metadata.annotations[topos.io/movable]: "true"' in refused["message"]
        assert "no controller owns" in refused["message"]
        moved = await cluster.event("Moved")
        assert "Moved by background compaction: compaction frees" in moved["message"]
        assert moved["involvedObject"]["name"].startswith("web-")
        together = await eventually(
            _one_node(cluster), what="the Deployment pods on one node", timeout_s=60
        )
        assert together in nodes[:2]
        assert (await cluster.placement("app!=web")) == {"loner": nodes[2]}


def _one_node(cluster: GangCluster) -> Any:
    async def check() -> str | None:
        placed = await cluster.placement("app=web")
        where = set(placed.values())
        if len(placed) == 2 and len(where) == 1 and None not in where:
            return str(where.pop())
        return None

    return check
