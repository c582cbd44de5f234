"""Defragmentation on the real control plane, where kube-controller-manager's ReplicaSet and
Deployment controllers recreate what is evicted: a 4 × 8-GPU gang waits on five 8-GPU nodes,
four of which hold one 1-GPU Deployment pod each (36 GPUs free, one whole node). Topos moves the
fewest of them — three — through the Eviction API, the gang binds on four whole nodes, and the
recreated Deployment pods run on the fifth. A PodDisruptionBudget over those pods blocks every
move, and the gang's condition names it. With ``background``, compaction empties a node while
nothing waits; a bare pod marked movable is never moved, and an Event says why. Pods of Jobs
with retries left are moved too, and kube-controller-manager's Job controller recreates them
without the Job failing; a Job with no retry left keeps its pod."""

from __future__ import annotations

from typing import Any

from common.kube import NODES
from coordinator.adapters.kube.objects import PDBS
from coordinator.core.preemption.defrag import DefragSettings
from coordinator.engine.gangs.service import GangSettings
from devcluster import pods
from tests.support.gang_cluster import Controllers, GangCluster, gang_pod
from tests.support.polling import eventually
from tests.support.workloads import JOBS, apply


async def moved_events(cluster: GangCluster, count: int) -> list[Any]:
    """The ``Moved`` Events once there are ``count`` (each written once its pod's eviction was
    accepted, in the background: they may follow the gang's binds)."""
    found = await cluster.events(reason="Moved")
    return found if len(found) >= count else []


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


def batch_job(name: str, backoff_limit: int) -> dict[str, Any]:
    """A 1-GPU Job (no podFailurePolicy): an evicted pod counts as one of its failures."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": {"app": "batch", "job": name}},
                "spec": {
                    "schedulerName": "topos",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "work",
                            "image": "work:1",
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
        moved = await eventually(lambda: moved_events(cluster, 3), what="the Moved Events")
        assert len({e["involvedObject"]["name"] for e in moved}) == 3  # the fewest
        assert len(set(before) - set(after)) == 3  # three pods are new
        message = moved[0]["message"]
        assert f"Moved to make room for gang:{cluster.namespace}/train (priority 0)" in message
        assert "its controller recreates it" in message
        assert f"(it fits on {rest})" in message
        defrag = await cluster.event("Defragmenting", name="train-0")
        assert f"gang:{cluster.namespace}/train defragments: moving 3 pods" in defrag["message"]


async def test_job_pods_with_retries_left_move_and_the_job_controller_recreates_them(
    cluster: GangCluster,
) -> None:
    # Four 1-GPU Jobs on n1–n4: three may fail up to 6 times, one not at all (backoffLimit 0).
    # The gang needs four whole nodes: the three Jobs with retries left lose their pods, the
    # real Job controller counts one failure each and recreates them on the fourth Job's node.
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=5)
    limits = {"job-0": 6, "job-1": 6, "job-2": 6, "job-3": 0}
    async with Controllers(cluster), cluster.gang_coordinator() as coordinator:
        inventory = coordinator.inventory
        for k, (name, limit) in enumerate(limits.items()):
            await cordon(cluster, inventory, nodes, keep=nodes[k])
            await apply(cluster, batch_job(name, limit))
            await cluster.all_bound(f"job={name}", 1)
        for node in nodes:
            await cluster.kube.patch(NODES, node, {"spec": {"unschedulable": False}})
        await eventually(
            lambda: not any(inventory.node(n).unschedulable for n in nodes),
            what="the nodes uncordoned",
            timeout_s=30,
        )
        before = await cluster.placement("app=batch")
        kept_node = before[next(n for n in before if n.startswith("job-3-"))]
        for k in range(4):
            await cluster.create(gang_pod(f"train-{k}", "train", 4))
        gang = await cluster.all_bound("topos.io/gang=train", 4)
        assert len(set(gang.values())) == 4
        assert kept_node not in gang.values()  # the Job that may not fail kept its pod
        moved = await eventually(lambda: moved_events(cluster, 3), what="the Moved Events")
        assert {e["involvedObject"]["name"].rsplit("-", 1)[0] for e in moved} == {
            "job-0",
            "job-1",
            "job-2",
        }
        # Each moved Job counted one failure, made a new pod, and runs on: none failed.
        after = await cluster.all_bound("app=batch", 4, timeout_s=180)
        assert len(set(after) & set(before)) == 1  # three new pods, job-3's the same
        assert set(after.values()) == {kept_node}
        for name, limit in limits.items():
            job = await cluster.kube.get(JOBS, name, namespace=cluster.namespace)
            status = job.get("status") or {}
            assert status.get("failed", 0) == (1 if limit else 0), (name, status)
            ended = ("Failed", "FailureTarget")
            failed = [c for c in status.get("conditions") or () if c["type"] in ended]
            assert not failed, (name, failed)


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
