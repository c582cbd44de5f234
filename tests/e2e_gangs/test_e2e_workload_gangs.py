"""Gangs without a PodGroup, on the real control plane with the controllers' own CRDs (JobSet
v0.10.1, LeaderWorkerSet v0.7.0, KubeRay v1.5.0, from their Go modules): the test creates the
workload objects and then the Jobs, StatefulSets and pods as each controller would (labels,
annotations, ownerReferences as in its source), so what is checked is what Topos makes of them,
whoever created the pods:

- a JobSet is one gang: with one member missing none binds; a restart (the controller's
  ``restart-attempt`` + 1, its Jobs recreated) is a new run, all or nothing again;
- a JobSet with exclusive placement (by affinity): its Jobs' leaders are one gang, and the
  followers, which JobSet's webhook admits only once their leader is scheduled, another;
- a TrainJob's JobSet (Trainer's ``dependsOn`` chain): the initializer is placed without waiting
  for the training nodes, which the controller creates only once it completed; the nodes are a
  gang;
- an LWS group (leader + workers) is one gang; a second group is a gang of its own; a group the
  controller recreates is a new run;
- a RayCluster's head and its worker groups' ``minReplicas`` are one gang; a worker the
  autoscaler adds is placed alone;
- ``topos.io/gang-opt-out: "true"`` on a JobSet: its pods are placed one by one;
- an unusable ``topos.io/gang-min`` on a JobSet, an LWS pod of size 0: the pod's condition and
  Event name the key and the value, and the other workloads run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from common.kube import PODS, Resource
from coordinator.adapters.kube.owners import WORKLOAD_KINDS
from devcluster import pods
from devcluster.kube_wait import wait_for, wait_for_pods
from tests.support.gang_cluster import MANAGED_BY, GangCluster
from tests.support.workload_crds import install_workload_crds, remove_workload_crds
from tests.support.workloads import JOBS, STATEFULSETS

JOBSETS: Resource = WORKLOAD_KINDS["JobSet"]
LWSS: Resource = WORKLOAD_KINDS["LeaderWorkerSet"]
RAYCLUSTERS: Resource = WORKLOAD_KINDS["RayCluster"]
TRAINJOBS = Resource(
    "trainer.kubeflow.org", "v1alpha1", "trainjobs", namespaced=True, kind="TrainJob"
)
CONTAINER = {"name": "main", "image": "busybox"}


@pytest.fixture(scope="module", autouse=True)
def workload_crds(kubectl: Callable[..., Any]) -> Iterator[None]:
    kinds = ("JobSet", "TrainJob", "LeaderWorkerSet", "RayCluster")
    install_workload_crds(kubectl, *kinds)
    yield
    remove_workload_crds(kubectl, *kinds)


def _ref(obj: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def _member(
    name: str, *, labels: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod of 8 GPUs (a whole DGX) with the controller's labels and annotations."""
    return pods.pod(name, namespace=None, gpus=8, labels=labels, annotations=annotations)


# --- JobSet ---------------------------------------------------------------------------------------


def replicated_job(name: str, replicas: int = 1, **extra: Any) -> dict[str, Any]:
    template = {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}
    return {
        "name": name,
        "replicas": replicas,
        "template": {"spec": {"parallelism": 1, "template": template}},
        **extra,
    }


def jobset(name: str, replicas: int, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicatedJobs": [replicated_job("workers", replicas)]},
    }


async def jobset_pods(
    cluster: GangCluster,
    js: dict[str, Any],
    attempt: int,
    indexes: range,
    *,
    rjob: str = "workers",
) -> list[str]:
    """The Jobs ``<jobset>-<rjob>-<i>`` of restart ``attempt`` and their pods, as the JobSet and
    Job controllers make them (the Job controller keeps off: ``managedBy``)."""
    name, uid = js["metadata"]["name"], js["metadata"]["uid"]
    made = []
    for i in indexes:
        labels = {
            "jobset.sigs.k8s.io/jobset-name": name,
            "jobset.sigs.k8s.io/jobset-uid": uid,
            "jobset.sigs.k8s.io/replicatedjob-name": rjob,
            "jobset.sigs.k8s.io/restart-attempt": str(attempt),
            "jobset.sigs.k8s.io/job-index": str(i),
        }
        template = {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}
        job = await cluster.kube.create(
            JOBS,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"{name}-{rjob}-{i}-a{attempt}",
                    "labels": labels,
                    "ownerReferences": [_ref(js, "jobset.x-k8s.io/v1alpha2", "JobSet")],
                },
                "spec": {"managedBy": MANAGED_BY, "template": template},
            },
            namespace=cluster.namespace,
        )
        pod = _member(f"{name}-{rjob}-{i}-0-a{attempt}", labels={**labels, "app": name})
        pod["metadata"]["ownerReferences"] = [_ref(job, "batch/v1", "Job")]
        await cluster.create(pod)
        made.append(pod["metadata"]["name"])
    return made


async def test_a_jobset_is_one_gang_and_a_restart_is_a_new_run(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3, profile="dgx-h100")
    async with cluster.gang_coordinator():
        js = await cluster.kube.create(JOBSETS, jobset("train", 3), namespace=cluster.namespace)
        first = await jobset_pods(cluster, js, 0, range(2))
        message = await cluster.condition(first[0], "waiting for pod group train")
        assert "(waiting for all 3 pods to exist)" in message
        assert set((await cluster.placement("app=train")).values()) == {None}
        first += await jobset_pods(cluster, js, 0, range(2, 3))
        await cluster.all_bound("app=train", 3)
        pod = await cluster.kube.get(PODS, first[0], namespace=cluster.namespace)
        assert pod["metadata"]["labels"]["topos.io/gang-min"] == "3"
        assert pod["metadata"]["labels"]["topos.io/gang-run"] == f"{js['metadata']['uid']}-0"

        # The controller restarts the JobSet: attempt 0's Jobs go, attempt 1's come one by one.
        await cluster.delete_pods("jobset.sigs.k8s.io/restart-attempt=0")
        await cluster.none_left("jobset.sigs.k8s.io/restart-attempt=0")
        second = await jobset_pods(cluster, js, 1, range(2))
        await cluster.condition(second[0], "waiting for pod group train")
        assert set((await cluster.placement("app=train")).values()) == {None}
        await jobset_pods(cluster, js, 1, range(2, 3))
        placed = await cluster.all_bound("app=train", 3)
    assert len(set(placed.values())) == 3


async def test_exclusive_placement_leaders_then_followers(cluster: GangCluster) -> None:
    # (room for both Jobs in one leaf: which leaf each Job gets is not this test's business)
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=4, profile="dgx-h100")
    exclusive = {"alpha.jobset.sigs.k8s.io/exclusive-topology": "topos.io/leaf"}
    async with cluster.gang_coordinator():
        body = jobset("ex", 2)
        body["metadata"]["annotations"] = exclusive
        body["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 2
        js = await cluster.kube.create(JOBSETS, body, namespace=cluster.namespace)
        jobs = []
        for i in range(2):
            labels = {
                "jobset.sigs.k8s.io/jobset-name": "ex",
                "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"],
                "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "jobset.sigs.k8s.io/restart-attempt": "0",
            }
            template = {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}}
            jobs.append(
                await cluster.kube.create(
                    JOBS,
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "metadata": {
                            "name": f"ex-workers-{i}",
                            "labels": labels,
                            "annotations": exclusive,
                            "ownerReferences": [_ref(js, "jobset.x-k8s.io/v1alpha2", "JobSet")],
                        },
                        "spec": {"managedBy": MANAGED_BY, "template": template},
                    },
                    namespace=cluster.namespace,
                )
            )

        async def pod(job: int, index: int, node_selector: dict[str, str] | None = None) -> str:
            annotations = {**exclusive, "batch.kubernetes.io/job-completion-index": str(index)}
            obj = _member(
                f"ex-workers-{job}-{index}",
                labels={**jobs[job]["metadata"]["labels"], "app": "ex"},
                annotations=annotations,
            )
            obj["metadata"]["ownerReferences"] = [_ref(jobs[job], "batch/v1", "Job")]
            if node_selector:
                obj["spec"]["nodeSelector"] = node_selector
            await cluster.create(obj)
            return str(obj["metadata"]["name"])

        first = await pod(0, 0)
        await cluster.condition(first, "waiting for pod group ex-leaders")
        await pod(1, 0)
        leaders = await cluster.all_bound("app=ex", 2)
        # JobSet's webhook now admits each Job's followers, pinned to its leader's domain
        pinned = [{"topos.io/leaf": cluster.leaf_of[leaders[f"ex-workers-{j}-0"]]} for j in (0, 1)]
        follower = await pod(0, 1, pinned[0])
        await cluster.condition(follower, "waiting for pod group ex-followers")
        await pod(1, 1, pinned[1])
        placed = await cluster.all_bound("app=ex", 4)
    assert {k: v for k, v in placed.items() if k.endswith("-0")} == leaders


async def test_a_trainjobs_initializer_goes_first_and_its_nodes_are_a_gang(
    cluster: GangCluster,
) -> None:
    """Trainer's runtimes: ``node`` depends on ``model-initializer`` being Complete, so the JobSet
    controller creates the nodes' Job only then. One gang of all three would never form."""
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3, profile="dgx-h100")
    async with cluster.gang_coordinator():
        trainjob = await cluster.kube.create(
            TRAINJOBS,
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "llama"},
                "spec": {"runtimeRef": {"name": "torch-distributed"}},
            },
            namespace=cluster.namespace,
        )
        owner = _ref(trainjob, "trainer.kubeflow.org/v1alpha1", "TrainJob")
        spec = {
            "replicatedJobs": [
                replicated_job("model-initializer"),
                replicated_job(
                    "node",
                    2,
                    dependsOn=[{"name": "model-initializer", "status": "Complete"}],
                ),
            ]
        }
        js = await cluster.kube.create(
            JOBSETS,
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "llama", "ownerReferences": [owner]},
                "spec": spec,
            },
            namespace=cluster.namespace,
        )
        (init,) = await jobset_pods(cluster, js, 0, range(1), rjob="model-initializer")
        await cluster.all_bound("jobset.sigs.k8s.io/replicatedjob-name=model-initializer", 1)
        await cluster.delete_pods("jobset.sigs.k8s.io/replicatedjob-name=model-initializer")
        (first,) = await jobset_pods(cluster, js, 0, range(1), rjob="node")
        await cluster.condition(first, "waiting for pod group llama-node")
        await jobset_pods(cluster, js, 0, range(1, 2), rjob="node")
        placed = await cluster.all_bound("jobset.sigs.k8s.io/replicatedjob-name=node", 2)
    assert len(placed) == 2
    assert init not in placed


async def test_a_jobset_opted_out_places_its_pods_one_by_one(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2, profile="dgx-h100")
    async with cluster.gang_coordinator():
        body = jobset("solo", 3, **{"topos.io/gang-opt-out": "true"})
        js = await cluster.kube.create(JOBSETS, body, namespace=cluster.namespace)
        names = await jobset_pods(cluster, js, 0, range(3))
        waiting = await cluster.event("FailedScheduling")  # 2 nodes, 3 pods: one waits
        await wait_for_pods(
            cluster.kube,
            cluster.namespace,
            lambda found: sum(bool(p["spec"].get("nodeName")) for p in found) == 2 or None,
            label_selector="app=solo",
            what="two of the three pods bound",
        )
        placement = await cluster.placement("app=solo")
    assert sorted(node is not None for node in placement.values()) == [False, True, True]
    assert placement[waiting["involvedObject"]["name"]] is None
    assert "pod group" not in waiting["message"]
    pod = await cluster.kube.get(PODS, names[0], namespace=cluster.namespace)
    assert "topos.io/gang" not in pod["metadata"]["labels"]


async def test_an_unusable_gang_min_on_a_jobset_stops_only_its_pods(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2, profile="dgx-h100")
    async with cluster.gang_coordinator():
        bad = await cluster.kube.create(
            JOBSETS,
            jobset("bad", 1, **{"topos.io/gang-min": "two"}),
            namespace=cluster.namespace,
        )
        good = await cluster.kube.create(JOBSETS, jobset("good", 2), namespace=cluster.namespace)
        (stopped,) = await jobset_pods(cluster, bad, 0, range(1))
        await jobset_pods(cluster, good, 0, range(2))
        await cluster.all_bound("app=good", 2)
        want = f"JobSet {cluster.namespace}/bad metadata.labels[topos.io/gang-min]: must be"
        message = await cluster.condition(stopped, want)
        event = await cluster.warning(stopped)
    assert "got 'two'" in message
    assert want in event["message"]
    assert set((await cluster.placement("app=bad")).values()) == {None}


# --- LeaderWorkerSet ------------------------------------------------------------------------------


def lws(name: str, size: int) -> dict[str, Any]:
    template = {"spec": {"containers": [CONTAINER]}}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {"size": size, "workerTemplate": template},
        },
    }


def _sts(name: str, labels: dict[str, str], owner: dict[str, Any]) -> dict[str, Any]:
    template = {"metadata": {"labels": labels}, "spec": {"containers": [CONTAINER]}}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "ownerReferences": [owner]},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template},
    }


async def lws_group(
    cluster: GangCluster, obj: dict[str, Any], group: int, workers: range, *, size: str = ""
) -> list[str]:
    """Group ``group`` as LWS makes it: the leader (a pod of the leader StatefulSet) and, owned
    by the worker StatefulSet the leader owns, the workers ``workers``."""
    name = obj["metadata"]["name"]
    size = size or str(obj["spec"]["leaderWorkerTemplate"]["size"])
    base = {"leaderworkerset.sigs.k8s.io/name": name}
    key = {**base, "leaderworkerset.sigs.k8s.io/group-index": str(group)}
    annotations = {"leaderworkerset.sigs.k8s.io/size": size}
    leader_name = f"{name}-{group}"
    made = []
    existing = await cluster.kube.list(
        PODS, namespace=cluster.namespace, field_selector=f"metadata.name={leader_name}"
    )
    if not existing["items"]:
        leaders = await cluster.kube.list(
            STATEFULSETS, namespace=cluster.namespace, field_selector=f"metadata.name={name}"
        )
        sts = (leaders["items"] or [None])[0] or await cluster.kube.create(
            STATEFULSETS,
            _sts(name, base, _ref(obj, "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")),
            namespace=cluster.namespace,
        )
        leader = _member(
            leader_name,
            labels={**key, "leaderworkerset.sigs.k8s.io/worker-index": "0", "app": name},
            annotations=annotations,
        )
        leader["metadata"]["ownerReferences"] = [_ref(sts, "apps/v1", "StatefulSet")]
        await cluster.create(leader)
        made.append(leader_name)
    leader_pod = await cluster.kube.get(PODS, leader_name, namespace=cluster.namespace)
    found = await cluster.kube.list(
        STATEFULSETS, namespace=cluster.namespace, field_selector=f"metadata.name={leader_name}"
    )
    worker_sts = (found["items"] or [None])[0] or await cluster.kube.create(
        STATEFULSETS,
        _sts(leader_name, key, _ref(leader_pod, "v1", "Pod")),
        namespace=cluster.namespace,
    )
    for w in workers:
        labels = {**key, "leaderworkerset.sigs.k8s.io/worker-index": str(w), "app": name}
        pod = _member(
            f"{leader_name}-{w}",
            labels=labels,
            annotations={**annotations, "leaderworkerset.sigs.k8s.io/leader-name": leader_name},
        )
        pod["metadata"]["ownerReferences"] = [_ref(worker_sts, "apps/v1", "StatefulSet")]
        await cluster.create(pod)
        made.append(pod["metadata"]["name"])
    return made


async def test_an_lws_group_is_one_gang_and_each_group_its_own(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=3, profile="dgx-h100")
    async with cluster.gang_coordinator():
        obj = await cluster.kube.create(LWSS, lws("vllm", 3), namespace=cluster.namespace)
        group0 = await lws_group(cluster, obj, 0, range(1, 3))
        await cluster.all_bound("leaderworkerset.sigs.k8s.io/group-index=0", 3)
        # group 1: its leader and one worker exist; the leader does not go ahead alone
        group1 = await lws_group(cluster, obj, 1, range(1, 2))
        await cluster.condition(group1[0], "waiting for pod group vllm-1")
        assert set(
            (await cluster.placement("leaderworkerset.sigs.k8s.io/group-index=1")).values()
        ) == {None}
        await lws_group(cluster, obj, 1, range(2, 3))
        placed = await cluster.all_bound("leaderworkerset.sigs.k8s.io/group-index=1", 3)
        pod = await cluster.kube.get(PODS, group0[-1], namespace=cluster.namespace)
        leader = await cluster.kube.get(PODS, group0[0], namespace=cluster.namespace)
    assert pod["metadata"]["labels"]["topos.io/gang"] == "vllm-0"
    assert pod["metadata"]["labels"]["topos.io/gang-run"] == leader["metadata"]["uid"]
    assert len({cluster.leaf_of[n] for n in placed.values()}) == 1  # a group inside one leaf


async def test_a_recreated_lws_group_is_a_new_run(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3, profile="dgx-h100")
    async with cluster.gang_coordinator():
        obj = await cluster.kube.create(LWSS, lws("vllm", 3), namespace=cluster.namespace)
        old = await lws_group(cluster, obj, 0, range(1, 3))
        await cluster.all_bound("app=vllm", 3)
        was = await cluster.kube.get(PODS, old[0], namespace=cluster.namespace)
        # A worker failed: LWS deletes the leader, and with it the worker StatefulSet and workers.
        await cluster.delete_pods("app=vllm")
        await cluster.none_left("app=vllm")
        await wait_for(  # the garbage collector takes the leader's worker StatefulSet
            cluster.kube,
            STATEFULSETS,
            lambda found: True if not found else None,
            namespace=cluster.namespace,
            name="vllm-0",
            what="the old group's worker StatefulSet gone",
        )
        new = await lws_group(cluster, obj, 0, range(1, 2))
        await cluster.condition(new[0], "waiting for pod group vllm-0")
        assert set((await cluster.placement("app=vllm")).values()) == {None}
        await lws_group(cluster, obj, 0, range(2, 3))
        await cluster.all_bound("app=vllm", 3)
        leader = await cluster.kube.get(PODS, new[0], namespace=cluster.namespace)
    run = leader["metadata"]["labels"]["topos.io/gang-run"]
    assert run == leader["metadata"]["uid"] != was["metadata"]["uid"]


async def test_an_lws_pod_of_size_0_is_refused_by_name(cluster: GangCluster) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2, profile="dgx-h100")
    async with cluster.gang_coordinator():
        obj = await cluster.kube.create(LWSS, lws("zero", 2), namespace=cluster.namespace)
        good = await cluster.kube.create(LWSS, lws("good", 2), namespace=cluster.namespace)
        (leader,) = await lws_group(cluster, obj, 0, range(0), size="0")
        await lws_group(cluster, good, 0, range(1, 2))
        await cluster.all_bound("app=good", 2)
        want = "pod metadata.annotations[leaderworkerset.sigs.k8s.io/size]"
        message = await cluster.condition(leader, want)
        event = await cluster.warning(leader)
    assert "got '0'" in message
    assert want in event["message"]


# --- RayCluster -----------------------------------------------------------------------------------


def raycluster(name: str, replicas: int) -> dict[str, Any]:
    template = {"spec": {"containers": [CONTAINER]}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": replicas,
                    "minReplicas": 2,
                    "maxReplicas": 4,
                    "rayStartParams": {},
                    "template": template,
                }
            ],
        },
    }


async def ray_pod(cluster: GangCluster, obj: dict[str, Any], name: str, kind: str) -> str:
    group = "headgroup" if kind == "head" else "gpu"
    labels = {
        "ray.io/cluster": obj["metadata"]["name"],
        "ray.io/node-type": kind,
        "ray.io/group": group,
        "app": obj["metadata"]["name"],
    }
    pod = _member(name, labels=labels)
    pod["metadata"]["ownerReferences"] = [_ref(obj, "ray.io/v1", "RayCluster")]
    await cluster.create(pod)
    return name


async def test_a_rayclusters_head_and_minimum_are_one_gang_autoscaled_workers_join_alone(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=4, profile="dgx-h100")
    async with cluster.gang_coordinator():
        obj = await cluster.kube.create(
            RAYCLUSTERS, raycluster("rc", 2), namespace=cluster.namespace
        )
        head = await ray_pod(cluster, obj, "rc-head-x1", "head")
        await ray_pod(cluster, obj, "rc-gpu-worker-a1", "worker")
        await cluster.condition(head, "waiting for pod group rc")
        assert set((await cluster.placement("app=rc")).values()) == {None}
        await ray_pod(cluster, obj, "rc-gpu-worker-b2", "worker")
        await cluster.all_bound("app=rc", 3)
        # the autoscaler asks for one more worker: KubeRay raises replicas and makes its pod
        await cluster.kube.patch(
            RAYCLUSTERS,
            "rc",
            {"spec": {"workerGroupSpecs": [{**obj["spec"]["workerGroupSpecs"][0], "replicas": 3}]}},
            namespace=cluster.namespace,
        )
        extra = await ray_pod(cluster, obj, "rc-gpu-worker-c3", "worker")
        placed = await cluster.all_bound("app=rc", 4)
        event = await cluster.event("Scheduled", name=extra)
        # a worker dies and KubeRay makes another: it joins the running cluster
        await cluster.delete_pods("ray.io/node-type=worker,app=rc")
        await cluster.none_left("ray.io/node-type=worker,app=rc")
        await ray_pod(cluster, obj, "rc-gpu-worker-d4", "worker")
        await ray_pod(cluster, obj, "rc-gpu-worker-e5", "worker")
        again = await cluster.all_bound("app=rc", 3)
    assert placed[extra]
    assert "pod group" not in event["message"]  # placed as a pod of its own
    assert again[head] == placed[head]  # the head ran on throughout
