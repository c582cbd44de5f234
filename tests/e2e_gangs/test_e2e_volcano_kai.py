"""Volcano's and KAI's PodGroups on the real control plane, with the CRDs the projects publish
(deploy/crds/podgroups.scheduling.volcano.sh.yaml, podgroups.scheduling.run.ai.yaml): their
manifests, as the projects' documentation writes them with only ``schedulerName`` changed, form
gangs that bind all or nothing; the PodGroups' status says so in their own fields; the ignored
queue is told once per PodGroup; bad input is named on the pod and harms nothing else.

No kubelet runs here: the test sets member pods' phase through ``pods/status``, as a kubelet would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from common.kube import EVENTS, PODS
from coordinator.adapters.kube.foreigngroups import RESOURCES
from devcluster.kube_wait import wait_for_object
from tests.support.gang_cluster import GangCluster, gang_pod
from tests.support.polling import eventually

VOLCANO = RESOURCES["volcano"]
KAI = RESOURCES["kai"]


# Volcano's PodGroup user guide: a PodGroup, and pods naming it by annotation.
VOLCANO_GROUP = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: tf-train
spec:
  minMember: 3
  queue: research
  priorityClassName: high-priority
"""

VOLCANO_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels:
    app: tf-train
  annotations:
    scheduling.k8s.io/group-name: tf-train
spec:
  schedulerName: topos
  containers:
    - name: worker
      image: tensorflow/tensorflow:latest-gpu
      resources:
        limits:
          nvidia.com/gpu: "8"
"""

# KAI's examples/batch/external-podgroup-job.yaml: a PodGroup, and a Job's pods naming it.
KAI_GROUP = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: external-batch-job
spec:
  minMember: 2
  queue: default-queue
  subGroups:
    - name: workers
      minMember: 2
"""

KAI_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations:
    pod-group-name: external-batch-job
  labels:
    app: external-batch-job
    kai.scheduler/subgroup-name: workers
    kai.scheduler/queue: default-queue
spec:
  schedulerName: topos
  restartPolicy: Never
  containers:
    - name: main
      image: ubuntu
      args: ["sleep", "infinity"]
      resources:
        limits:
          nvidia.com/gpu: "8"
"""


async def create_group(cluster: GangCluster, manifest: str) -> dict[str, Any]:
    obj = yaml.safe_load(manifest)
    resource = VOLCANO if obj["apiVersion"].startswith("scheduling.volcano.sh") else KAI
    return await cluster.kube.create(resource, obj, namespace=cluster.namespace)


async def create_pod(cluster: GangCluster, manifest: str, name: str, owner: str = "") -> None:
    obj = yaml.safe_load(manifest.format(name=name))
    if owner:
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "external-batch-job", "uid": owner}
        obj["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
    await cluster.create(obj)


async def status_when(
    cluster: GangCluster, resource: Any, name: str, check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    obj = await wait_for_object(
        cluster.kube,
        resource,
        name,
        lambda o: check(o.get("status") or {}),
        namespace=cluster.namespace,
        what=f"PodGroup {name}'s status",
    )
    return dict(obj.get("status") or {})


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((dict(c) for c in status.get("conditions") or [] if c["type"] == kind), {})


async def set_phase(cluster: GangCluster, name: str, phase: str) -> None:
    await cluster.kube.patch(
        PODS, name, {"status": {"phase": phase}}, namespace=cluster.namespace, subresource="status"
    )


async def podgroup_events(cluster: GangCluster, name: str) -> list[dict[str, Any]]:
    listed = await cluster.kube.list(
        EVENTS,
        namespace=cluster.namespace,
        field_selector=f"involvedObject.name={name},involvedObject.kind=PodGroup",
    )
    return list(listed["items"])


async def test_a_volcano_gang_binds_all_or_nothing_and_its_podgroup_says_so(
    cluster: GangCluster, foreign_crds: None
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4)
    await create_group(cluster, VOLCANO_GROUP)
    async with cluster.gang_coordinator() as coord:
        for k in range(2):
            await create_pod(cluster, VOLCANO_POD, f"tf-{k}")
        await cluster.condition("tf-1", "waiting for all 3 pods to exist")
        pending = await status_when(cluster, VOLCANO, "tf-train", lambda s: bool(s.get("phase")))
        assert pending["phase"] == "Pending"
        waiting = condition(pending, "Unschedulable")
        assert (waiting["status"], waiting["reason"]) == ("True", "NotEnoughTasks")
        assert waiting["message"] == "2 of 3 members exist"
        assert all(n is None for n in (await cluster.placement("app=tf-train")).values())

        await create_pod(cluster, VOLCANO_POD, "tf-2")
        placed = await cluster.all_bound("app=tf-train", 3)
        assert len({cluster.leaf_of[n] for n in placed.values()}) == 1
        bound = await status_when(cluster, VOLCANO, "tf-train", lambda s: s["phase"] == "Running")
        scheduled = condition(bound, "Scheduled")
        assert scheduled["status"] == "True"
        assert scheduled["message"] == "3 members bound (minimum 3)"
        assert condition(bound, "Unschedulable")["status"] == "False"
        statuses = coord.gangs.step.manager.statuses()
        assert [(s.name, s.source, s.min_member) for s in statuses] == [("tf-train", "volcano", 3)]

        for k in range(3):
            await set_phase(cluster, f"tf-{k}", "Running")
        await status_when(cluster, VOLCANO, "tf-train", lambda s: s.get("running") == 3)
        for k in range(3):
            await set_phase(cluster, f"tf-{k}", "Succeeded")
        done = await status_when(cluster, VOLCANO, "tf-train", lambda s: s["phase"] == "Completed")
        assert (done["succeeded"], done.get("running", 0)) == (3, 0)

        # The queue was told about once, on the PodGroup, for all those status passes.
        [event] = await podgroup_events(cluster, "tf-train")
        assert (event["type"], event["reason"], event["count"]) == ("Normal", "QueueIgnored", 1)
        assert event["message"] == (
            "Topos has no queues: spec.queue='research' is ignored and the gang is placed "
            "without it"
        )

    # Nor again by the next coordinator (a restart, a new leader): a group named after it, told
    # in the same pass, shows that pass happened.
    marker = yaml.safe_load(VOLCANO_GROUP)
    marker["metadata"]["name"] = "z-marker"
    marker["spec"]["minMember"] = 1
    await create_group(cluster, yaml.safe_dump(marker))
    async with cluster.gang_coordinator():
        lone = yaml.safe_load(VOLCANO_POD.format(name="m-0"))
        lone["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "z-marker"
        await cluster.create(lone)
        await cluster.event("QueueIgnored", name="z-marker")
        [again] = await podgroup_events(cluster, "tf-train")
        assert again["count"] == 1
        # It reads the finished members it found as they are: the status stays.
        after = await cluster.kube.get(VOLCANO, "tf-train", namespace=cluster.namespace)
        assert (after["status"]["phase"], after["status"]["succeeded"]) == ("Completed", 3)


async def test_a_kai_gang_binds_all_or_nothing_and_its_scheduling_conditions_say_why(
    cluster: GangCluster, foreign_crds: None
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=2)
    await create_group(cluster, KAI_GROUP)
    owner = await cluster.job("external-batch-job")
    async with cluster.gang_coordinator() as coord:
        await create_pod(cluster, KAI_POD, "ext-0", owner)
        await cluster.condition("ext-0", "waiting for all 2 pods to exist")
        waiting = await status_when(
            cluster, KAI, "external-batch-job", lambda s: bool(s.get("schedulingConditions"))
        )
        [c] = waiting["schedulingConditions"]
        assert (c["type"], c["nodePool"], c["status"], c["reason"], c["transitionID"]) == (
            "UnschedulableOnNodePool",
            "default",
            "True",
            "Unschedulable",
            "1",
        )
        # The gang's message, or (before the gang manager has one) the members counted.
        assert "1 of 2" in c["message"]

        await create_pod(cluster, KAI_POD, "ext-1", owner)
        placed = await cluster.all_bound("app=external-batch-job", 2)
        assert len(set(placed.values())) == 2
        await status_when(
            cluster, KAI, "external-batch-job", lambda s: not s.get("schedulingConditions")
        )
        await eventually(
            lambda: (
                [(s.source, s.min_member, s.phase) for s in coord.gangs.step.manager.statuses()]
                == [("kai", 2, "Bound")]
            ),
            what="the gang manager saw both members bound",
        )

        [event] = await podgroup_events(cluster, "external-batch-job")
        assert (event["reason"], event["count"]) == ("QueueIgnored", 1)
        assert event["message"].startswith(
            "Topos has no queues: spec.queue='default-queue' is ignored"
        )
        assert (
            "spec.subGroups (their leaves' minMember are placed as one gang)" in (event["message"])
        )


# KAI's examples/external-podgroup/multi-topology-jobs.yaml: one PodGroup of two subgroups, each
# the pods of its own Job (labelled with their subgroup).
KAI_PIPELINE = """
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata:
  name: multi-topology-pipeline
  labels:
    kai.scheduler/queue: default-queue
spec:
  queue: default-queue
  minSubGroup: 2
  subGroups:
    - name: rack-workers
      minMember: 3
      topologyConstraint:
        topology: rack-topology
        requiredTopologyLevel: topos.io/leaf
    - name: zone-workers
      minMember: 3
      topologyConstraint:
        topology: zone-topology
        requiredTopologyLevel: topos.io/spine
"""

KAI_PIPELINE_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  annotations:
    pod-group-name: multi-topology-pipeline
  labels:
    app: pipeline
    kai.scheduler/queue: default-queue
    kai.scheduler/subgroup-name: {subgroup}
spec:
  schedulerName: topos
  restartPolicy: Never
  containers:
    - name: worker
      image: busybox:1.36
      command: ["sh", "-c", "sleep 3600"]
      resources:
        requests:
          cpu: "250m"
          nvidia.com/gpu: "4"
        limits:
          cpu: "250m"
          nvidia.com/gpu: "4"
"""


async def test_kais_two_subgroup_example_is_one_gang_of_both_jobs_pods(
    cluster: GangCluster, foreign_crds: None
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=2)
    await create_group(cluster, KAI_PIPELINE)
    jobs = {"rack-workers": "rack-bound-job", "zone-workers": "zone-bound-job"}
    owners = {sub: await cluster.job(job) for sub, job in jobs.items()}
    async with cluster.gang_coordinator() as coord:
        made = [(sub, k) for sub in jobs for k in range(3)]
        for sub, k in made[:5]:
            obj = yaml.safe_load(KAI_PIPELINE_POD.format(name=f"{sub}-{k}", subgroup=sub))
            ref = {"apiVersion": "batch/v1", "kind": "Job", "name": jobs[sub], "uid": owners[sub]}
            obj["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
            await cluster.create(obj)
        # 3 + 3 members: with 5 of them nothing binds.
        await cluster.condition("zone-workers-1", "waiting for all 6 pods to exist")
        assert all(n is None for n in (await cluster.placement("app=pipeline")).values())
        sub, k = made[5]
        obj = yaml.safe_load(KAI_PIPELINE_POD.format(name=f"{sub}-{k}", subgroup=sub))
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": jobs[sub], "uid": owners[sub]}
        obj["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
        await cluster.create(obj)
        await cluster.all_bound("app=pipeline", 6)
        [status] = coord.gangs.step.manager.statuses()
        assert (status.name, status.source, status.min_member) == (
            "multi-topology-pipeline",
            "kai",
            6,
        )
        event = await cluster.event("QueueIgnored", name="multi-topology-pipeline")
        assert event["message"].endswith(
            "spec.subGroups[].topologyConstraint, minSubGroup (every subgroup is required)"
        )


async def test_a_kai_gang_that_cannot_fit_binds_nothing_and_says_why(
    cluster: GangCluster, foreign_crds: None
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=1)
    await create_group(cluster, KAI_GROUP)
    owner = await cluster.job("external-batch-job")
    async with cluster.gang_coordinator():
        for k in range(2):  # 2 × 8 GPUs on one node of 8
            await create_pod(cluster, KAI_POD, f"ext-{k}", owner)
        refused = await status_when(
            cluster,
            KAI,
            "external-batch-job",
            lambda s: "nodes are available" in str(s.get("schedulingConditions")),
        )
        [c] = refused["schedulingConditions"]
        assert c["message"].startswith("waiting for pod group external-batch-job: 0/2 members")
        assert all(n is None for n in (await cluster.placement("app=external-batch-job")).values())


async def test_bad_volcano_and_kai_input_is_named_on_the_pod_and_harms_nothing_else(
    cluster: GangCluster, foreign_crds: None
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    group = yaml.safe_load(VOLCANO_GROUP)
    group["spec"]["minMember"] = 0
    await create_group(cluster, yaml.safe_dump(group))
    async with cluster.gang_coordinator():
        both = yaml.safe_load(VOLCANO_POD.format(name="both"))
        both["metadata"]["annotations"]["pod-group-name"] = "other"
        await cluster.create(both)
        await create_pod(cluster, VOLCANO_POD, "zero")
        await cluster.create(gang_pod("fine", "fine", 1))

        message = await cluster.condition("both", "names two pod groups")
        assert (
            "metadata.annotations[scheduling.k8s.io/group-name]='tf-train' and "
            "metadata.annotations[pod-group-name]='other'"
        ) in message
        warning = await cluster.warning("both")
        assert "metadata.annotations[pod-group-name]='other'" in warning["message"]

        message = await cluster.condition("zero", "spec.minMember")
        assert (
            f"PodGroup {cluster.namespace}/tf-train (scheduling.volcano.sh/v1beta1) "
            "spec.minMember: a pod group needs at least 1 member, got 0"
        ) in message
        await cluster.bound("fine")  # the bad pods harm nothing else
