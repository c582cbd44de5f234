"""Gangs on the real control plane: all or nothing, waiting for members, not fitting without
blocking smaller work, timing out, racing each other, the PodGroup vocabulary, and a restart
that finds a gang partly bound.

Fabric: one spine, two leaves of four DGX A100 nodes (8 GPUs each). Members ask for 8 GPUs, so
one member fills one node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from common.kube import EVENTS, NAMESPACES, POD_GROUPS, PODS
from devcluster.kube_wait import wait_for_pods
from tests.support.gang_cluster import GangCluster, gang_pod
from tests.support.polling import eventually


async def test_a_gang_that_fits_binds_every_member_inside_one_leaf(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator() as coord:
        for k in range(4):
            await cluster.create(gang_pod(f"w-{k}", "train-1", 4))
        placed = await cluster.all_bound("topos.io/gang=train-1", 4)
        assert len(set(placed.values())) == 4  # one 8-GPU member per node
        assert len({cluster.leaf_of[n] for n in placed.values()}) == 1  # a leaf's worth: one leaf
        pod = await cluster.pod("w-0")
        assert len(pod["metadata"]["annotations"]["topos.io/assigned-gpus"].split(",")) == 8
        # The pods' nodeName is seen by the test's read before the coordinator's watch brings
        # the last bind back, so the manager may still say Reserved 3/4 for a moment.
        await eventually(
            lambda: (
                [(s.name, s.phase, s.bound) for s in coord.gangs.step.manager.statuses()]
                == [("train-1", "Bound", 4)]
            ),
            what="the gang manager saw all four members bound",
        )


async def test_members_wait_until_min_exist_then_bind_together(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        for k in range(3):
            await cluster.create(gang_pod(f"w-{k}", "train-1", 4))
        message = await cluster.condition("w-0", "waiting for all 4 pods to exist")
        assert message.startswith("waiting for pod group train-1: 0/4 members placed")
        event = await cluster.event("FailedScheduling", name="w-1")
        assert "waiting for pod group train-1" in event["message"]
        assert all(n is None for n in (await cluster.placement("topos.io/gang")).values())
        await cluster.create(gang_pod("w-3", "train-1", 4))
        placed = await cluster.all_bound("topos.io/gang=train-1", 4)
        assert len(set(placed.values())) == 4


async def test_a_gang_that_cannot_fit_holds_nothing_and_smaller_work_still_runs(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        for k in range(10):  # 10 × 8 GPUs on 8 nodes of 8 GPUs: never fits
            await cluster.create(gang_pod(f"big-{k}", "big", 10))
        message = await cluster.condition("big-0", "nodes are available")
        assert message.startswith("waiting for pod group big: 0/10 members placed; 0/8 nodes")
        assert "80 nvidia.com/gpu" in message  # the numbers that do not add up
        # The waiting gang holds no capacity: a small job submitted after it runs at once.
        for k in range(2):
            await cluster.create(gang_pod(f"small-{k}", "small", 2))
        placed = await cluster.all_bound("topos.io/gang=small", 2)
        assert len({cluster.leaf_of[n] for n in placed.values()}) == 1  # two nodes: one leaf
        assert all(n is None for n in (await cluster.placement("topos.io/gang=big")).values())


async def test_a_gang_past_its_timeout_is_released_whole_and_says_so(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        for k in range(9):
            await cluster.create(
                gang_pod(f"late-{k}", "late", 9, annotations={"topos.io/gang-timeout": "2s"})
            )
        event = await cluster.event("GangTimeout", name="late-0")
        assert event["message"] == "pod group late timed out after 2s: 0/9 members placed"
        assert event["type"] == "Warning"
        # `kubectl describe pod late-0` shows it: it names the pod's UID.
        assert event["involvedObject"]["uid"] == (await cluster.pod("late-0"))["metadata"]["uid"]
        message = await cluster.condition("late-3", "timed out")
        assert "pod group late timed out after 2s" in message
        assert all(n is None for n in (await cluster.placement("topos.io/gang=late")).values())


async def test_two_gangs_that_fit_alone_but_not_together_do_not_deadlock(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator() as coord:
        # Interleaved arrivals, as two Jobs submitted at the same moment would create them.
        for k in range(6):
            await cluster.create(gang_pod(f"a-{k}", "a", 6))
            await cluster.create(gang_pod(f"b-{k}", "b", 6))

        def whole_gang(pods: Sequence[dict[str, Any]]) -> str | None:
            for gang in ("a", "b"):
                members = [p for p in pods if p["metadata"]["labels"]["topos.io/gang"] == gang]
                if len(members) == 6 and all(p["spec"].get("nodeName") for p in members):
                    return gang
            return None

        winner = await wait_for_pods(
            cluster.kube,
            cluster.namespace,
            whole_gang,
            label_selector="topos.io/gang in (a,b)",
            what="one whole gang bound",
        )
        loser_name = "b" if winner == "a" else "a"
        # The loser had its chance and says so; it holds nothing, and its members wait for the
        # cluster to change.
        await cluster.condition(f"{loser_name}-0", f"waiting for pod group {loser_name}: 0/6")
        loser = await cluster.placement(f"topos.io/gang={loser_name}")
        assert all(n is None for n in loser.values()), loser
        queue = coord.runtime.scheduler.queue
        members = [f"{cluster.namespace}/{loser_name}-{k}" for k in range(6)]
        await eventually(
            lambda: all(getattr(queue.named(m), "where", None) == "unschedulable" for m in members),
            what="the loser's members back in the unschedulable queue",
        )
        # The winner finishes: the loser gets the room and completes.
        await cluster.delete_pods(f"topos.io/gang={winner}")
        await cluster.all_bound(f"topos.io/gang={loser_name}", 6)


async def test_scheduler_plugins_podgroup_members_wait_for_their_podgroup(
    cluster: GangCluster, podgroup_crd: None
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        for k in range(3):
            pod = gang_pod(f"pg-{k}", "unused", 1)
            pod["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "pg-1"}
            await cluster.create(pod)
        message = await cluster.condition("pg-0", "does not exist yet")
        assert f"waiting for PodGroup {cluster.namespace}/pg-1" in message
        await cluster.kube.create(
            POD_GROUPS,
            {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": "pg-1"},
                "spec": {"minMember": 3, "scheduleTimeoutSeconds": 60},
            },
            namespace=cluster.namespace,
        )
        placed = await cluster.all_bound("scheduling.x-k8s.io/pod-group=pg-1", 3)
        assert len({cluster.leaf_of[n] for n in placed.values()}) == 1


async def test_a_gang_found_partly_bound_at_start_up_completes(cluster: GangCluster) -> None:
    """A coordinator crashed after binding 2 of 4 members: the new one binds the other 2."""
    nodes = await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    for k in range(4):
        await cluster.create(gang_pod(f"w-{k}", "crashed", 4))
    for k in range(2):
        await cluster.kube.bind(namespace=cluster.namespace, pod=f"w-{k}", node=nodes[k])
    async with cluster.gang_coordinator():
        placed = await cluster.all_bound("topos.io/gang=crashed", 4)
        assert len(set(placed.values())) == 4


async def test_a_gang_found_partly_bound_that_cannot_complete_is_released(
    cluster: GangCluster,
) -> None:
    """2 of 4 members of a Job bound before a crash, and no room for the rest: the 2 are evicted
    (their Job makes them again; bare pods are kept, see test_e2e_gang_reruns.py)."""
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    owner = await cluster.job("stuck")
    for k in range(4):
        await cluster.create(gang_pod(f"w-{k}", "stuck", 4, owner=owner))
    for k in range(2):
        await cluster.kube.bind(namespace=cluster.namespace, pod=f"w-{k}", node=nodes[k])
    async with cluster.gang_coordinator():
        event = await cluster.event("GangReleased", name="w-0")
        assert "partly bound" in event["message"]

        def evicted(pods: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
            by_name = {p["metadata"]["name"]: p for p in pods}
            # the eviction starts a graceful delete (no kubelet finishes it here)
            done = all(by_name[f"w-{k}"]["metadata"].get("deletionTimestamp") for k in range(2))
            return by_name if done else None

        pods = await wait_for_pods(
            cluster.kube, cluster.namespace, evicted, what="the 2 bound members evicted"
        )
        assert all(not pods[f"w-{k}"]["spec"].get("nodeName") for k in (2, 3))


async def test_a_partly_bound_gang_of_another_namespace_is_left_alone(
    cluster: GangCluster, unique_name: Callable[[str], str]
) -> None:
    """A coordinator scheduling one namespace neither completes nor releases a partly bound
    gang of another namespace at start-up: that gang is another scheduler's to handle."""
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    other = unique_name("t-elsewhere")
    await cluster.kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}}
    )
    for k in range(2):  # 2 of its 4 members exist, both bound
        await cluster.kube.create(PODS, gang_pod(f"w-{k}", "theirs", 4), namespace=other)
        await cluster.kube.bind(namespace=other, pod=f"w-{k}", node=nodes[k])
    async with cluster.gang_coordinator() as coord:
        await coord.runtime.settle()
        coord.gangs.step.tick()
        await coord.runtime.scheduler.drain()  # any eviction and Event written
    theirs = (await cluster.kube.list(PODS, namespace=other))["items"]
    assert [p["metadata"].get("deletionTimestamp") for p in theirs] == [None, None]
    assert not (await cluster.kube.list(EVENTS, namespace=other))["items"]
