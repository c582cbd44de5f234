"""Gathering a gang into one NVLink clique on the real control plane, where
kube-controller-manager's ReplicaSet and Deployment controllers recreate what is moved.

Two GB200 NVL72 racks of four trays (KWOK nodes, ``nvidia.com/gpu.clique``) in one leaf. Two
trays of rack 1 run one 4-GPU Deployment pod each (movable); two trays of rack 2 run bare pods
(never moved). A 4-tray gang has room only split over both racks (2 + 2). With gathering on (the
default with defragmentation), Topos moves the two Deployment pods out of rack 1, the gang binds
on the four trays of rack 1, the recreated Deployment pods run in rack 2, and the Events say why;
with ``defragmentation.gather: false`` the gang runs split and nothing moves.
"""

from __future__ import annotations

from typing import Any

from common.kube import NODES
from coordinator.core.preemption.defrag import DefragSettings
from coordinator.engine.gangs.service import GangSettings
from tests.support.gang_cluster import Controllers, GangCluster, gang_pod, hold_trays, two_racks
from tests.support.nvl72 import CLUSTER_UUID
from tests.support.polling import eventually
from tests.support.workloads import apply


def service(name: str) -> dict[str, Any]:
    """A Deployment of one 4-GPU pod (a whole tray)."""
    resources = {"cpu": "8", "memory": "1Gi", "nvidia.com/gpu": "4"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "svc", "svc": name}},
            "template": {
                "metadata": {"labels": {"app": "svc", "svc": name}},
                "spec": {
                    "schedulerName": "topos",
                    "containers": [
                        {
                            "name": "serve",
                            "image": "serve:1",
                            "resources": {
                                "requests": resources,
                                "limits": {"nvidia.com/gpu": "4"},
                            },
                        }
                    ],
                },
            },
        },
    }


async def set_up(cluster: GangCluster, inventory: Any) -> dict[str, int]:
    """The two racks, rack 2's two bare pods and rack 1's two Deployment pods; node → rack."""
    rack_of = await two_racks(cluster)
    nodes = sorted(rack_of)
    one = [n for n in nodes if rack_of[n] == 1]
    two = [n for n in nodes if rack_of[n] == 2]
    await hold_trays(cluster, two[:2])
    for k, node in enumerate(one[:2]):  # each Deployment's pod on its tray: the others cordoned
        for n in nodes:
            await cluster.kube.patch(NODES, n, {"spec": {"unschedulable": n != node}})
        await eventually(
            lambda node=node: all(inventory.node(n).unschedulable == (n != node) for n in nodes),
            what="the cordons seen",
            timeout_s=30,
        )
        await apply(cluster, service(f"svc-{k}"))
        placed = await cluster.all_bound(f"svc=svc-{k}", 1)
        assert set(placed.values()) == {node}
    for n in nodes:
        await cluster.kube.patch(NODES, n, {"spec": {"unschedulable": False}})
    await eventually(
        lambda: not any(inventory.node(n).unschedulable for n in nodes),
        what="the nodes uncordoned",
        timeout_s=30,
    )
    return rack_of


async def gang(cluster: GangCluster) -> dict[str, str]:
    for k in range(4):
        await cluster.create(gang_pod(f"train-{k}", "train", 4, gpus=4, cpu="8"))
    return await cluster.all_bound("topos.io/gang=train", 4, timeout_s=120)


async def test_a_gang_that_would_be_split_over_two_racks_is_gathered_into_one(
    cluster: GangCluster,
) -> None:
    async with Controllers(cluster), cluster.gang_coordinator() as coord:
        rack_of = await set_up(cluster, coord.inventory)
        before = await cluster.placement("app=svc")
        placed = await gang(cluster)
        assert {rack_of[n] for n in placed.values()} == {1}
        assert len(set(placed.values())) == 4
        # the Deployments' pods were moved, recreated by their ReplicaSets, and run in rack 2
        after = await cluster.all_bound("app=svc", 2, timeout_s=120)
        assert not set(after) & set(before)
        assert {rack_of[n] for n in after.values()} == {2}
        # (written in the background after each eviction: wait for each one's)
        moved = [await cluster.event("Moved", name=name) for name in sorted(before)]
        assert len(await cluster.events(reason="Moved")) == len(before)
        # what kubectl describe shows: the moved pods, then the gang's members
        rack1 = ", ".join(sorted(n for n, r in rack_of.items() if r == 1))
        unit = f"gang:{cluster.namespace}/train"
        why = f"gathering it inside NVLink clique {CLUSTER_UUID}.1 rather than split over 2 NVLink"
        for e in moved:
            assert e["type"] == "Warning"
            assert e["message"].startswith(
                f"Moved to make room for {unit} (priority 0) on {rack1}: {why} domains; its "
                "controller recreates it (it fits on r2-t"
            ), e["message"]
        told = await cluster.event("Defragmenting", name="train-0")
        assert told["message"].startswith(f"{unit} defragments: moving 2 pods ("), told["message"]
        assert told["message"].endswith(f"; {why} domains"), told["message"]
        scheduled = await cluster.event("GangScheduled", name="train-0")
        assert scheduled["message"].startswith(
            f"pod group train: 4/4 members bound on clique {CLUSTER_UUID}.1 (4 nodes"
        ), scheduled["message"]


async def test_with_gathering_off_the_gang_runs_split_and_nothing_moves(
    cluster: GangCluster,
) -> None:
    settings = GangSettings(backoff_s=2.0, defrag=DefragSettings(gather=False))
    async with Controllers(cluster), cluster.gang_coordinator(gang_settings=settings) as coord:
        rack_of = await set_up(cluster, coord.inventory)
        before = await cluster.placement("app=svc")
        placed = await gang(cluster)
        assert sorted(rack_of[n] for n in placed.values()) == [1, 1, 2, 2]
        assert await cluster.placement("app=svc") == before
        assert not await cluster.events(reason="Moved")
