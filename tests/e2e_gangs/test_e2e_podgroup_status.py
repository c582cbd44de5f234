"""scheduler-plugins PodGroup status on the real control plane: what ``kubectl get podgroups``
shows as a gang waits for members, binds, runs and fails, written only when it changes.

No kubelet runs here: the test sets member pods' phase through ``pods/status``, as a kubelet would.
"""

from __future__ import annotations

from typing import Any

from common.kube import POD_GROUPS, PODS
from devcluster.kube_wait import wait_for_object
from tests.support.gang_cluster import GangCluster, gang_pod

LABEL = "scheduling.x-k8s.io/pod-group"


def member(name: str, group: str) -> dict[str, Any]:
    pod = gang_pod(name, "unused", 1)
    pod["metadata"]["labels"] = {LABEL: group}
    return pod


async def create_group(cluster: GangCluster, name: str, min_member: int, **spec: Any) -> None:
    await cluster.kube.create(
        POD_GROUPS,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"minMember": min_member, **spec},
        },
        namespace=cluster.namespace,
    )


async def status_when(cluster: GangCluster, name: str, **want: Any) -> dict[str, Any]:
    """The PodGroup's status once every field in ``want`` has that value."""
    obj = await wait_for_object(
        cluster.kube,
        POD_GROUPS,
        name,
        lambda o: all((o.get("status") or {}).get(k) == v for k, v in want.items()),
        namespace=cluster.namespace,
        what=f"PodGroup {name} status {want}",
    )
    return dict(obj["status"])


def scheduled(status: dict[str, Any]) -> dict[str, Any]:
    [condition] = [c for c in status["conditions"] if c["type"] == "PodGroupScheduled"]
    return dict(condition)


async def set_phase(cluster: GangCluster, name: str, phase: str) -> None:
    await cluster.kube.patch(
        PODS, name, {"status": {"phase": phase}}, namespace=cluster.namespace, subresource="status"
    )


async def test_podgroup_status_follows_its_gang_from_pending_to_running_and_failed(
    cluster: GangCluster, podgroup_crd: None
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    await create_group(cluster, "train", 3)
    async with cluster.gang_coordinator():
        for k in range(2):
            await cluster.create(member(f"w-{k}", "train"))
        pending = await status_when(cluster, "train", phase="Pending")
        assert (pending["scheduled"], pending["running"]) == (0, 0)
        waiting = scheduled(pending)
        assert (waiting["status"], waiting["reason"]) == ("False", "Unschedulable")
        assert "2 of 3 pods exist" in waiting["message"]

        await cluster.create(member("w-2", "train"))
        await cluster.all_bound(f"{LABEL}=train", 3)
        bound = await status_when(cluster, "train", phase="Scheduled", scheduled=3)
        assert scheduled(bound)["status"] == "True"
        assert scheduled(bound)["reason"] == "Scheduled"
        assert bound["scheduleStartTime"]

        for k in range(3):
            await set_phase(cluster, f"w-{k}", "Running")
        running = await status_when(cluster, "train", phase="Running", running=3)
        assert (running["succeeded"], running["failed"]) == (0, 0)

        # Steady: nothing is written while nothing changes.
        before = (await cluster.kube.get(POD_GROUPS, "train", namespace=cluster.namespace))[
            "metadata"
        ]["resourceVersion"]
        # A pass of the writer since then: the status it writes for a group created later and
        # named after "train" (looked at after it in every pass).
        await create_group(cluster, "z-marker", 2)
        await cluster.create(member("m-0", "z-marker"))
        await status_when(cluster, "z-marker", phase="Pending")
        after = await cluster.kube.get(POD_GROUPS, "train", namespace=cluster.namespace)
        assert after["metadata"]["resourceVersion"] == before

        await set_phase(cluster, "w-1", "Failed")
        failed = await status_when(cluster, "train", phase="Failed", failed=1)
        assert (failed["running"], failed["scheduled"]) == (2, 3)


async def test_podgroup_that_cannot_be_placed_says_why_in_its_status(
    cluster: GangCluster, podgroup_crd: None
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    await create_group(cluster, "big", 4)
    async with cluster.gang_coordinator():
        for k in range(4):  # 4 × 8 GPUs on 3 nodes of 8
            await cluster.create(member(f"big-{k}", "big"))
        obj = await wait_for_object(
            cluster.kube,
            POD_GROUPS,
            "big",
            lambda o: "nodes are available" in str((o.get("status") or {}).get("conditions") or ""),
            namespace=cluster.namespace,
            what="PodGroup big to say why it does not fit",
        )
        status = obj["status"]
        assert status["phase"] == "Scheduling"  # all members exist; the gang is being placed
        assert status["scheduled"] == 0
        refused = scheduled(status)
        assert (refused["status"], refused["reason"]) == ("False", "Unschedulable")
        assert refused["message"].startswith("waiting for pod group big: 0/4 members placed")
        assert all(n is None for n in (await cluster.placement(f"{LABEL}=big")).values())


async def test_podgroups_of_another_scheduler_are_left_alone(
    cluster: GangCluster, podgroup_crd: None
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    await create_group(cluster, "theirs", 1)
    await create_group(cluster, "ours", 1)
    async with cluster.gang_coordinator():
        other = member("x-0", "theirs")
        other["spec"]["schedulerName"] = "scheduler-plugins-scheduler"
        await cluster.create(other)
        await cluster.create(member("o-0", "ours"))
        await status_when(cluster, "ours", phase="Scheduled")
        theirs = await cluster.kube.get(POD_GROUPS, "theirs", namespace=cluster.namespace)
        assert not theirs.get("status")
