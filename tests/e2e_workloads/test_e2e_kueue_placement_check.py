"""The placement admission check on the real control plane with the real Kueue: Topos answers
Kueue's AdmissionCheck ``topos.io/placement`` for each Workload that reserved quota, from the
whole workload's pods placed by the what-if. A Job whose quota fits but whose 8-GPU pod has no
node with 8 free GPUs stays not admitted (the check Pending, the message saying why, the Job
suspended); once a node is free the check says Ready, Kueue admits and starts it, and its pod is
bound where the check placed it. A Ready workload whose room is lost before its pods bind (its
node cordoned or not Ready), or whose pods are not bound within the check's deadline, is answered
Retry: Kueue evicts and requeues it, and the check waits (Pending) until room returns. An
AdmissionCheck with parameters Topos does not know is refused with a condition naming them; a
Topology level no node has gets an Event naming it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from common.kube import NODES, PODS, NotFound
from coordinator.adapters.kube.admissioncheck import (
    ADMISSION_CHECKS,
    BIND_DEADLINE,
    TOPOLOGIES,
    PlacementCheckController,
)
from coordinator.app.scheduler import what_if
from devcluster import pods
from devcluster.kube_wait import wait_for_event, wait_for_object, wait_for_pods
from tests.support.gang_cluster import Controllers, Coordinator, GangCluster
from tests.support.kueue import JOBS, WORKLOADS, condition, is_true, job, queues, workload_of
from tests.support.polling import eventually


def check_of(workload: dict[str, Any], name: str) -> dict[str, Any]:
    for check in (workload.get("status") or {}).get("admissionChecks") or []:
        if check.get("name") == name:
            return dict(check)
    return {}


@contextlib.asynccontextmanager
async def admission_check(
    cluster: GangCluster,
    *,
    parameters: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> AsyncIterator[str]:
    """An AdmissionCheck for topos.io/placement (deleted at the end)."""
    name = f"{cluster.namespace}-placement"
    spec: dict[str, Any] = {"controllerName": "topos.io/placement"}
    if parameters:
        spec["parameters"] = parameters
    await cluster.kube.create(
        ADMISSION_CHECKS,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": name, "annotations": dict(annotations or {})},
            "spec": spec,
        },
    )
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            await cluster.kube.delete(ADMISSION_CHECKS, name)


@contextlib.asynccontextmanager
async def answering(
    cluster: GangCluster, coordinator: Coordinator
) -> AsyncIterator[PlacementCheckController]:
    """Topos's controller for the check, on ``coordinator``'s scheduler and what-if."""
    runtime, gangs = coordinator.runtime, coordinator.gangs
    controller = PlacementCheckController(
        cluster.kube,
        runtime.scheduler,
        lambda: what_if(runtime, gangs),
        namespace=cluster.namespace,
        interval_s=0.5,
        controllers=runtime.controller,
    )
    await controller.start()
    try:
        yield controller
    finally:
        await controller.stop()


def active(obj: dict[str, Any]) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Active":
            return dict(c)
    return None


async def test_a_workload_that_cannot_be_placed_waits_and_one_that_can_is_admitted_and_bound_there(
    kueue_controller: object, cluster: GangCluster
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with (
        cluster.gang_coordinator() as coordinator,
        Controllers(cluster),
        admission_check(cluster) as check,
        answering(cluster, coordinator) as controller,
    ):
        await wait_for_object(
            cluster.kube,
            ADMISSION_CHECKS,
            check,
            lambda c: (active(c) or {}).get("status") == "True",
            what="the AdmissionCheck Active",
        )
        # Half of each node is taken by pods Kueue does not manage: 8 GPUs free, none together.
        for i in range(2):
            await cluster.create(
                pods.pod(
                    f"half-{i}",
                    gpus=4,
                    namespace=None,
                    labels={"app": "half"},
                    node_selector={"kubernetes.io/hostname": nodes[i]},
                )
            )
        for i in range(2):
            await cluster.bound(f"half-{i}")
        async with queues(
            cluster.kube, cluster.namespace, gpus_each=16, admission_checks=(check,)
        ) as made:
            created = await cluster.kube.create(
                JOBS, job("whole-node", "team-a", pods=1, gpus=8), namespace=cluster.namespace
            )
            uid = created["metadata"]["uid"]
            workload = await workload_of(cluster.kube, cluster.namespace, uid)
            name = workload["metadata"]["name"]
            waiting = await wait_for_object(
                cluster.kube,
                WORKLOADS,
                name,
                lambda w: "cannot place" in check_of(w, check).get("message", ""),
                namespace=cluster.namespace,
                what="the placement check's message",
            )
            said = check_of(waiting, check)
            assert said["state"] == "Pending", said
            assert "Insufficient nvidia.com/gpu" in said["message"], said
            # the Job the user applied, not the Workload Kueue made for it (job-whole-node-<hash>)
            assert said["message"].startswith(
                f"Job {cluster.namespace}/whole-node: cannot place all 1 pods now: "
            ), said
            assert is_true(waiting, "QuotaReserved")  # the quota fits…
            assert not is_true(waiting, "Admitted")  # …but it is not admitted
            assert (await cluster.kube.get(JOBS, "whole-node", namespace=cluster.namespace))[
                "spec"
            ]["suspend"]
            assert await cluster.pods("job-name=whole-node") == []
            # Neither the workload nor the cluster changes: later rounds place nothing again.
            decided, rounds = controller.decisions, controller.rounds
            await eventually(lambda: controller.rounds >= rounds + 3, what="three more rounds")
            assert controller.decisions == decided
            # A node frees up: the check says Ready, Kueue admits, the pod binds where it said.
            await cluster.delete_pods("app=half")
            admitted = await workload_of(cluster.kube, cluster.namespace, uid, admitted=True)
            ready = check_of(admitted, check)
            assert ready["state"] == "Ready", ready
            assert ready["message"].startswith(
                f"Job {cluster.namespace}/whole-node: all 1 pods fit"
            )
            assert admitted["status"]["admission"]["clusterQueue"] == made.cluster_queues["team-a"]
            (update,) = ready["podSetUpdates"]
            (reserved,) = update["annotations"]["topos.io/placement-nodes"].split(",")
            assert reserved in nodes
            placed = await cluster.all_bound("job-name=whole-node", 1)
            assert list(placed.values()) == [reserved]
            assert controller.idle is None


async def test_a_bad_key_written_on_the_job_is_rejected_before_any_pod_exists(
    kueue_controller: object, cluster: GangCluster
) -> None:
    """The key on the Job, not its pod template: its pods would inherit it and fail one by one
    after admission, holding the quota. The check reads it as they would and says Rejected,
    naming the Job, the key and the value; Kueue deactivates the workload and makes no pod. A
    good Job in the same queue is admitted as before."""
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with (
        cluster.gang_coordinator() as coordinator,
        Controllers(cluster),
        admission_check(cluster) as check,
        answering(cluster, coordinator),
        queues(cluster.kube, cluster.namespace, gpus_each=16, admission_checks=(check,)),
    ):
        bad = job("packed", "team-a", pods=2, gpus=8)
        bad["metadata"]["annotations"] = {"topology.scheduler/placement-strategy": "packed"}
        created = await cluster.kube.create(JOBS, bad, namespace=cluster.namespace)
        workload = await workload_of(cluster.kube, cluster.namespace, created["metadata"]["uid"])
        refused = await wait_for_object(
            cluster.kube,
            WORKLOADS,
            workload["metadata"]["name"],
            lambda w: check_of(w, check).get("state") == "Rejected",
            namespace=cluster.namespace,
            what="the placement check Rejected",
        )
        said = check_of(refused, check)["message"]
        assert said.startswith(f"Job {cluster.namespace}/packed, inherited by its pods: "), said
        assert "topology.scheduler/placement-strategy" in said, said
        assert "'packed'" in said, said
        deactivated = await wait_for_object(
            cluster.kube,
            WORKLOADS,
            workload["metadata"]["name"],
            lambda w: w["spec"].get("active") is False,
            namespace=cluster.namespace,
            what="Kueue deactivating the workload",
        )
        assert not is_true(deactivated, "Admitted")
        assert await cluster.pods("job-name=packed") == []
        # nothing else harmed: a Job with a good key on it is admitted and bound
        good = job("fine", "team-a", pods=2, gpus=8)
        good["metadata"]["annotations"] = {"topology.scheduler/placement-strategy": "distributed"}
        made = await cluster.kube.create(JOBS, good, namespace=cluster.namespace)
        await workload_of(cluster.kube, cluster.namespace, made["metadata"]["uid"], admitted=True)
        placed = await cluster.all_bound("job-name=fine", 2)
        assert len(set(placed.values())) == 2  # distributed: one per node


async def test_an_admission_check_with_parameters_topos_does_not_know_is_not_active(
    kueue_controller: object, cluster: GangCluster
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    async with (
        cluster.gang_coordinator() as coordinator,
        admission_check(
            cluster,
            parameters={"apiGroup": "example.com", "kind": "PlacementConfig", "name": "fast"},
        ) as check,
        answering(cluster, coordinator),
    ):
        refused = await wait_for_object(
            cluster.kube,
            ADMISSION_CHECKS,
            check,
            lambda c: active(c) is not None,
            what="the AdmissionCheck's Active condition",
        )
    condition = active(refused)
    assert condition is not None
    assert condition["status"] == "False"
    assert condition["reason"] == "UnknownParameters"
    assert "example.com/PlacementConfig/fast" in condition["message"]


async def test_room_a_ready_check_holds_survives_a_coordinator_restart_before_the_bind(
    kueue_controller: object, cluster: GangCluster
) -> None:
    """The check says Ready and the coordinator goes (its memory with it) before the pod is
    bound — the pod is held back by a scheduling gate another controller lifts later. The next
    coordinator holds the room again from the check's podSetUpdates: a pod of the same priority
    created meanwhile does not get it, and the workload's pod binds where the check said."""
    (node,) = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    spec = job("gated", "team-a", pods=1, gpus=8)
    spec["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    # The queues outlive the first coordinator (their ClusterQueue is Active once the check is).
    async with admission_check(cluster) as check, contextlib.AsyncExitStack() as queued:
        async with cluster.gang_coordinator() as first, answering(cluster, first):
            await queued.enter_async_context(
                queues(cluster.kube, cluster.namespace, admission_checks=(check,))
            )
            created = await cluster.kube.create(JOBS, spec, namespace=cluster.namespace)
            uid = created["metadata"]["uid"]
            admitted = await workload_of(cluster.kube, cluster.namespace, uid, admitted=True)
            assert check_of(admitted, check)["state"] == "Ready"
            (gated,) = await wait_for_pods(
                cluster.kube,
                cluster.namespace,
                lambda found: found or None,
                label_selector="job-name=gated",
                what="the Job's gated pod",
            )
        # The first coordinator is gone here (its memory with it): Ready said, nothing bound.
        async with cluster.gang_coordinator() as second, answering(cluster, second):
            group = f"{cluster.namespace}/{admitted['metadata']['name']}"
            await eventually(
                lambda: second.runtime.scheduler.nominations.reserved(group),
                what="the room held again",
            )
            await cluster.create(pods.pod("stranger", gpus=8, namespace=None))
            assert "Insufficient nvidia.com/gpu" in await cluster.unschedulable("stranger")
            await cluster.kube.patch(
                PODS,
                gated["metadata"]["name"],
                {"spec": {"schedulingGates": None}},
                namespace=cluster.namespace,
            )
            placed = await cluster.all_bound("job-name=gated", 1)
    assert list(placed.values()) == [node]
    assert not (await cluster.pod("stranger"))["spec"].get("nodeName")


async def test_a_topology_naming_a_label_no_node_has_gets_an_event_naming_it(
    kueue_controller: object, cluster: GangCluster
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    name = f"{cluster.namespace}-racks"
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": "topos.io/leaf"}, {"nodeLabel": "example.com/rack"}]},
    }
    async with cluster.gang_coordinator() as coordinator, answering(cluster, coordinator):
        await cluster.kube.create(TOPOLOGIES, body)
        try:
            event = await wait_for_event(
                cluster.kube, "default", reason="UnknownNodeLabel", name=name
            )
        finally:
            await cluster.kube.delete(TOPOLOGIES, name)
    assert event["type"] == "Warning"
    assert "'example.com/rack' is on none of the 1 nodes" in event["message"]
    assert "topos.io/leaf" not in event["message"]  # that level is on the node


def gated_job(name: str) -> dict[str, Any]:
    """A Job of one 8-GPU pod held back by a scheduling gate another controller lifts."""
    spec = job(name, "team-a", pods=1, gpus=8)
    spec["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    return spec


async def lift_gates(cluster: GangCluster, selector: str) -> None:
    (pod,) = await wait_for_pods(
        cluster.kube,
        cluster.namespace,
        lambda found: [p for p in found if not p["metadata"].get("deletionTimestamp")] or None,
        label_selector=selector,
        what=f"the gated pod of {selector}",
    )
    await cluster.kube.patch(
        PODS,
        pod["metadata"]["name"],
        {"spec": {"schedulingGates": None}},
        namespace=cluster.namespace,
    )


def retried(workload: dict[str, Any], check: str) -> bool:
    """Kueue evicted the workload for a Retry answer (and reset the check, counting it)."""
    evicted = condition(workload, "Evicted") or {}
    return (
        int(check_of(workload, check).get("retryCount") or 0) >= 1
        and evicted.get("status") == "True"
    )


def losses(cluster: GangCluster, node: str) -> dict[str, tuple[Callable[[], Awaitable[Any]], ...]]:
    """How the room on ``node`` is lost, and how it comes back."""
    return {
        "cordoned": (
            lambda: cluster.kube.patch(NODES, node, {"spec": {"unschedulable": True}}),
            lambda: cluster.kube.patch(NODES, node, {"spec": {"unschedulable": None}}),
        ),
        "not Ready": (
            lambda: cluster.set_node_ready(node, False),
            lambda: cluster.set_node_ready(node, True),
        ),
    }


@pytest.mark.parametrize("loss", ["cordoned", "not Ready"])
async def test_a_ready_workload_whose_node_is_lost_before_its_pods_bind_is_retried(
    kueue_controller: object, cluster: GangCluster, loss: str
) -> None:
    """Ready on n0 (n1 is full); n0 is cordoned (or turns not Ready) before the pod binds: the
    check answers Retry, Kueue evicts the workload (reason AdmissionCheck), releases its quota and
    queues it again; asked again, the check says Pending with the reason, and Ready once n0 is
    back."""
    first, second = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    lose, regain = losses(cluster, first)[loss]
    async with (
        cluster.gang_coordinator() as coordinator,
        Controllers(cluster),
        admission_check(cluster) as check,
        answering(cluster, coordinator) as controller,
    ):
        await cluster.create(
            pods.pod(
                "full", gpus=8, namespace=None, node_selector={"kubernetes.io/hostname": second}
            )
        )
        await cluster.bound("full")
        async with queues(cluster.kube, cluster.namespace, gpus_each=16, admission_checks=(check,)):
            created = await cluster.kube.create(
                JOBS, gated_job("gated"), namespace=cluster.namespace
            )
            uid = created["metadata"]["uid"]
            admitted = await workload_of(cluster.kube, cluster.namespace, uid, admitted=True)
            name = admitted["metadata"]["name"]
            ready = check_of(admitted, check)
            assert ready["podSetUpdates"][0]["annotations"]["topos.io/placement-nodes"] == first
            await wait_for_pods(
                cluster.kube,
                cluster.namespace,
                lambda found: found or None,
                label_selector="job-name=gated",
                what="the Job's gated pod",
            )
            await lose()
            evicted = await wait_for_object(
                cluster.kube,
                WORKLOADS,
                name,
                lambda w: retried(w, check),
                namespace=cluster.namespace,
                what="Kueue's eviction for the Retry",
            )
            assert controller.retries == 1
            why = condition(evicted, "Evicted")
            assert (why or {}).get("reason") == "AdmissionCheck", why
            assert "Previously: Retry" in check_of(evicted, check)["message"]
            assert not coordinator.runtime.scheduler.nominations.reserved(
                f"{cluster.namespace}/{name}"
            )
            # Requeued: its quota reserved again, the check waits with the reason, no pods.
            waiting = await wait_for_object(
                cluster.kube,
                WORKLOADS,
                name,
                lambda w: (
                    is_true(w, "QuotaReserved")
                    and "cannot place" in check_of(w, check).get("message", "")
                ),
                namespace=cluster.namespace,
                what="the check Pending again after the requeue",
            )
            assert check_of(waiting, check)["state"] == "Pending"
            assert "Insufficient nvidia.com/gpu" in check_of(waiting, check)["message"]
            assert not is_true(waiting, "Admitted")
            await cluster.none_left("job-name=gated")
            job_now = await cluster.kube.get(JOBS, "gated", namespace=cluster.namespace)
            assert job_now["spec"]["suspend"]
            # n0 is back: Ready again, admitted, and the pod binds there.
            await regain()
            await wait_for_object(
                cluster.kube,
                WORKLOADS,
                name,
                lambda w: is_true(w, "Admitted"),
                namespace=cluster.namespace,
                what="the workload admitted again",
            )
            await lift_gates(cluster, "job-name=gated")
            placed = await cluster.all_bound("job-name=gated", 1)
    assert list(placed.values()) == [first]
    assert controller.retries == 1


async def test_pods_not_bound_within_the_checks_deadline_are_retried(
    kueue_controller: object, cluster: GangCluster
) -> None:
    """A check with ``topos.io/bind-deadline-seconds: "2"``: the Ready workload's pod is still
    gated after 2 s — Retry, Kueue evicts and requeues it. With the deadline raised the next
    Ready holds, and the pod, its gate lifted, binds."""
    (node,) = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    async with (
        cluster.gang_coordinator() as coordinator,
        Controllers(cluster),
        admission_check(cluster, annotations={BIND_DEADLINE: "2"}) as check,
        answering(cluster, coordinator) as controller,
        queues(cluster.kube, cluster.namespace, admission_checks=(check,)),
    ):
        created = await cluster.kube.create(JOBS, gated_job("late"), namespace=cluster.namespace)
        uid = created["metadata"]["uid"]
        workload = await workload_of(cluster.kube, cluster.namespace, uid, admitted=True)
        name = workload["metadata"]["name"]
        evicted = await wait_for_object(
            cluster.kube,
            WORKLOADS,
            name,
            lambda w: retried(w, check),
            namespace=cluster.namespace,
            what="Kueue's eviction for the Retry",
        )
        assert controller.retries >= 1
        why = condition(evicted, "Evicted")
        assert (why or {}).get("reason") == "AdmissionCheck", why
        await cluster.kube.patch(
            ADMISSION_CHECKS, check, {"metadata": {"annotations": {BIND_DEADLINE: "300"}}}
        )
        await eventually(lambda: controller.rounds > 0 and controller.retries >= 1, what="a round")
        retries = controller.retries
        await wait_for_object(
            cluster.kube,
            WORKLOADS,
            name,
            lambda w: is_true(w, "Admitted") and check_of(w, check).get("state") == "Ready",
            namespace=cluster.namespace,
            what="the workload admitted again",
        )
        await lift_gates(cluster, "job-name=late")
        placed = await cluster.all_bound("job-name=late", 1)
    assert list(placed.values()) == [node]
    assert controller.retries <= retries + 1  # at most one more in flight as the deadline rose
