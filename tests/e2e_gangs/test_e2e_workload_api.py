"""Kubernetes' Workload API (``scheduling.k8s.io/v1alpha2``, alpha in 1.36) as the fourth gang
vocabulary, on the real control plane: pods join a standalone PodGroup through
``spec.schedulingGroup.podGroupName``, bind all or nothing, and the PodGroup's
``PodGroupScheduled`` condition says what happened; a PodGroup's topology constraint
(``spec.schedulingConstraints.topology``) keeps its gang inside one domain of that node label. On
a control plane that does not serve the API the coordinator schedules as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from common.kube import NAMESPACES, KubeClient
from coordinator.adapters.kube.objects import WORKLOAD_POD_GROUPS
from devcluster import pods
from devcluster.controlplane import ControlPlane
from devcluster.kube_wait import wait_for_object
from tests.support.gang_cluster import LEAF, SPINE, GangCluster, gang_pod

RACK = "e2e.topos.io/rack"


def workload_pod(name: str, group: str) -> dict[str, Any]:
    """An 8-GPU worker that joins the Workload-API PodGroup ``group``."""
    return pods.pod(
        name,
        namespace=None,
        gpus=8,
        cpu="8",
        memory="8Gi",
        labels={"e2e/group": group},
        spec={"schedulingGroup": {"podGroupName": group}},
    )


def pod_group(name: str, min_count: int, *, topology: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": topology}]}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


async def scheduled_condition(
    cluster: GangCluster, name: str, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    """The PodGroup's ``PodGroupScheduled`` condition once ``check`` holds for it."""

    def condition(obj: dict[str, Any]) -> dict[str, Any] | None:
        found = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in found if c.get("type") == "PodGroupScheduled"), None)

    obj = await wait_for_object(
        cluster.kube,
        WORKLOAD_POD_GROUPS,
        name,
        lambda o: (c := condition(o)) is not None and check(c),
        namespace=cluster.namespace,
        what=f"PodGroup {name}'s PodGroupScheduled condition {what}",
    )
    found = condition(obj)
    assert found is not None
    return found


async def test_a_workload_api_gang_binds_all_or_nothing_and_its_podgroup_says_so(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    async with cluster.gang_coordinator() as coord:
        for k in range(2):
            await cluster.create(workload_pod(f"w-{k}", "train"))
        message = await cluster.condition("w-0", "does not exist yet")
        assert f"waiting for PodGroup {cluster.namespace}/train (scheduling.k8s.io/v1alpha2)" in (
            message
        )
        await cluster.kube.create(
            WORKLOAD_POD_GROUPS, pod_group("train", 3), namespace=cluster.namespace
        )
        # 2 of 3 members exist: nothing binds, and the PodGroup says why.
        await cluster.condition("w-1", "waiting for all 3 pods to exist")
        waiting = await scheduled_condition(
            cluster, "train", lambda c: c["status"] == "False", "False"
        )
        assert waiting["reason"] == "Unschedulable"
        assert "2 of 3 pods exist" in waiting["message"]
        assert all(n is None for n in (await cluster.placement("e2e/group=train")).values())
        await cluster.create(workload_pod("w-2", "train"))
        placed = await cluster.all_bound("e2e/group=train", 3)
        assert len(set(placed.values())) == 3
        assert len({cluster.leaf_of[n] for n in placed.values()}) == 1
        done = await scheduled_condition(cluster, "train", lambda c: c["status"] == "True", "True")
        assert done["reason"] == "Scheduled"
        assert done["message"] == "3 members bound (minimum 3)"
        assert done["lastTransitionTime"]
        statuses = coord.gangs.step.manager.statuses()
        assert [(s.name, s.source, s.phase) for s in statuses] == [("train", "workload", "Bound")]


async def test_a_workload_api_gang_that_cannot_fit_binds_nothing_and_says_why(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    await cluster.kube.create(WORKLOAD_POD_GROUPS, pod_group("big", 4), namespace=cluster.namespace)
    async with cluster.gang_coordinator():
        for k in range(4):  # 4 × 8 GPUs on 3 nodes of 8
            await cluster.create(workload_pod(f"big-{k}", "big"))
        refused = await scheduled_condition(
            cluster, "big", lambda c: "nodes are available" in c["message"], "to say why"
        )
        assert refused["status"] == "False"
        assert refused["reason"] == "Unschedulable"
        assert refused["message"].startswith("waiting for pod group big: 0/4 members placed")
        assert all(n is None for n in (await cluster.placement("e2e/group=big")).values())


async def test_a_podgroups_topology_constraint_keeps_the_gang_in_one_domain(
    cluster: GangCluster,
) -> None:
    # Two leaves of two 8-GPU nodes; the racks cut across the leaves (node 0 of each leaf in
    # rack-a, node 1 in rack-b). Left alone, a gang of two 8-GPU pods packs into one leaf, over
    # two racks; its PodGroup asks for one rack, so it goes over two leaves.
    rack_of: dict[str, str] = {}
    for leaf in (1, 2):
        for k in (0, 1):
            rack = "rack-a" if k == 0 else "rack-b"
            labels = {LEAF: f"leaf-{leaf}", SPINE: "spine-1", RACK: rack}
            name = await cluster.add_node(f"n{leaf}x{k}", "dgx-a100", labels_extra=labels)
            cluster.leaf_of[name], rack_of[name] = f"leaf-{leaf}", rack
    for name, topology in (("loose", ""), ("racked", RACK), ("nowhere", "e2e.topos.io/row")):
        group = pod_group(name, 2, topology=topology)
        await cluster.kube.create(WORKLOAD_POD_GROUPS, group, namespace=cluster.namespace)
    created = await cluster.kube.get(WORKLOAD_POD_GROUPS, "racked", namespace=cluster.namespace)
    assert created["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    async with cluster.gang_coordinator():
        for k in range(2):
            await cluster.create(workload_pod(f"loose-{k}", "loose"))
        loose = await cluster.all_bound("e2e/group=loose", 2)
        assert len({cluster.leaf_of[n] for n in loose.values()}) == 1
        assert len({rack_of[n] for n in loose.values()}) == 2  # what the constraint prevents
        await cluster.delete_pods("e2e/group=loose")
        await cluster.none_left("e2e/group=loose")

        for k in range(2):
            await cluster.create(workload_pod(f"racked-{k}", "racked"))
        racked = await cluster.all_bound("e2e/group=racked", 2)
        assert len({rack_of[n] for n in racked.values()}) == 1
        assert len({cluster.leaf_of[n] for n in racked.values()}) == 2

        # A key no node carries: the PodGroup and its pods say which field and value; nothing
        # of it binds, and the next gang is placed as before.
        for k in range(2):
            await cluster.create(workload_pod(f"nowhere-{k}", "nowhere"))
        field = (
            f"PodGroup {cluster.namespace}/nowhere (scheduling.k8s.io/v1alpha2) "
            "spec.schedulingConstraints.topology[0].key='e2e.topos.io/row': "
            "no node carries the label 'e2e.topos.io/row'"
        )
        await cluster.condition("nowhere-0", field)
        refused = await scheduled_condition(
            cluster, "nowhere", lambda c: field in c["message"], "to name the field"
        )
        assert refused["status"] == "False"
        await cluster.delete_pods("e2e/group=racked")
        await cluster.none_left("e2e/group=racked")
        for k in range(2):
            await cluster.create(gang_pod(f"after-{k}", "after", 2))
        await cluster.all_bound("topos.io/gang=after", 2)
        assert all(n is None for n in (await cluster.placement("e2e/group=nowhere")).values())


async def test_a_member_beyond_the_minimum_joins_its_groups_domain_or_waits_there(
    cluster: GangCluster,
) -> None:
    # Racks across leaves as above. The PodGroup asks for one rack and a minimum of 2: its two
    # 8-GPU members fill one rack. A third member created later has a whole free rack beside
    # it, yet waits for room in its group's rack (as kube-scheduler's TopologyPlacement keeps
    # it), saying so; a node added to that rack takes it.
    rack_of: dict[str, str] = {}
    for leaf in (1, 2):
        for k in (0, 1):
            rack = "rack-a" if k == 0 else "rack-b"
            labels = {LEAF: f"leaf-{leaf}", SPINE: "spine-1", RACK: rack}
            name = await cluster.add_node(f"m{leaf}x{k}", "dgx-a100", labels_extra=labels)
            cluster.leaf_of[name], rack_of[name] = f"leaf-{leaf}", rack
    group = pod_group("racked", 2, topology=RACK)
    await cluster.kube.create(WORKLOAD_POD_GROUPS, group, namespace=cluster.namespace)
    async with cluster.gang_coordinator():
        for k in range(2):
            await cluster.create(workload_pod(f"racked-{k}", "racked"))
        placed = await cluster.all_bound("e2e/group=racked", 2)
        (rack,) = {rack_of[n] for n in placed.values()}
        await cluster.create(workload_pod("racked-2", "racked"))
        message = await cluster.condition("racked-2", f"stays in {RACK}={rack}")
        assert message.startswith(
            f"pod group racked stays in {RACK}={rack}, where its members run (PodGroup "
            f"{cluster.namespace}/racked (scheduling.k8s.io/v1alpha2) "
            "spec.schedulingConstraints.topology[0].key): 0/4 nodes are available"
        ), message
        assert (await cluster.placement("e2e/group=racked"))["racked-2"] is None
        extra = await cluster.add_node(
            "m3x0", "dgx-a100", labels_extra={LEAF: "leaf-3", SPINE: "spine-1", RACK: rack}
        )
        after = await cluster.all_bound("e2e/group=racked", 3)
        assert after["racked-2"] == extra


async def test_a_basic_policy_podgroup_schedules_each_pod_alone(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    group = {**pod_group("solo", 1), "spec": {"schedulingPolicy": {"basic": {}}}}
    await cluster.kube.create(WORKLOAD_POD_GROUPS, group, namespace=cluster.namespace)
    async with cluster.gang_coordinator() as coord:
        await cluster.create(workload_pod("one", "solo"))
        await cluster.bound("one")
        assert coord.gangs.step.manager.statuses() == []


async def test_a_pod_naming_two_pod_groups_is_refused_with_the_reason(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator():
        both = gang_pod("both", "train", 2)
        both["spec"]["schedulingGroup"] = {"podGroupName": "other"}
        await cluster.create(both)
        await cluster.create(gang_pod("fine", "fine", 1))
        message = await cluster.condition("both", "names two pod groups")
        assert "spec.schedulingGroup.podGroupName" in message
        await cluster.bound("fine")  # the bad pod harms nothing else


# --- a control plane that does not serve the Workload API -------------------------------------


@pytest.fixture
async def plain(uncached_plane: ControlPlane) -> AsyncIterator[tuple[KubeClient, Path]]:
    async with await KubeClient.connect(uncached_plane.kubeconfig) as client:
        yield client, uncached_plane.kubeconfig


async def test_without_the_workload_api_gangs_still_schedule(
    plain: tuple[KubeClient, Path], unique_name: Callable[[str], str]
) -> None:
    client, kubeconfig = plain
    namespace = unique_name("t-no-workload-api")
    await client.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    cluster = GangCluster(client, kubeconfig, namespace)
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=4)
    async with cluster.gang_coordinator():
        for k in range(3):
            await cluster.create(gang_pod(f"w-{k}", "g", 3))
        placed = await cluster.all_bound("topos.io/gang=g", 3)
        assert len(set(placed.values())) == 3
        await cluster.create(gang_pod("single", "solo", 1))
        await cluster.bound("single")
