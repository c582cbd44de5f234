"""Slices and exclusive topology on the real control plane, with pods labelled and annotated as
JobSet v0.10.1 and LeaderWorkerSet v0.7.0 make them (their webhooks' affinities included; who
creates the pods does not matter to the scheduler where their CRDs are not served: where they
are, Topos reads a pod's gang from its JobSet or LWS and holds the pod until that is seen, as
``test_e2e_workload_gangs.py`` tests — which removes those CRDs when done).

Fabric: 1 spine × 4 leaves × 2 DGX A100 nodes (8 GPUs each); leaves leaf-1…leaf-4.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from common.kube import NODES
from devcluster import pods
from tests.support.gang_cluster import GangCluster, gang_pod
from tests.support.polling import eventually
from tests.support.workloads import apply

pytestmark = pytest.mark.usefixtures("podgroup_crd")

LEAF = "topos.io/leaf"
HOSTNAME = "kubernetes.io/hostname"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
SUBGROUP_KEY = "leaderworkerset.sigs.k8s.io/subgroup-key"


def exclusive_affinity(key: str, value: str, topology: str, *, extra: Any = ()) -> dict[str, Any]:
    """The pod affinity and anti-affinity JobSet's and LWS's webhooks inject for exclusive
    placement: with the pods of ``key=value`` in one ``topology`` domain, none of the others."""
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [{"key": key, "operator": "In", "values": [value]}]
                    },
                    "topologyKey": topology,
                }
            ]
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": key, "operator": "Exists"},
                            {"key": key, "operator": "NotIn", "values": [value]},
                            *extra,
                        ]
                    },
                    "topologyKey": topology,
                }
            ]
        },
    }


def jobset_pod(
    jobset: str, job: int, index: int, jobs: int, per_job: int, **kw: Any
) -> dict[str, Any]:
    """A pod of child Job ``workers-<job>`` of JobSet ``jobset`` (Indexed, ``per_job`` pods),
    exclusive per leaf; the leader (index 0) carries the webhook's affinities, a follower the
    nodeSelector the webhook gives it once its leader is placed (``kw['leaf']``)."""
    job_key = f"{jobset}-workers-{job}-key"
    labels = {
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/jobset-uid": f"uid-{jobset}",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(jobs),
        "jobset.sigs.k8s.io/job-index": str(job),
        JOB_KEY: job_key,
        "jobset.sigs.k8s.io/priority": "0",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    annotations = {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": LEAF,
        "batch.kubernetes.io/job-completion-index": str(index),
        # the room a Job's leader is placed with: its Job's pods (parallelism)
        "topos.io/slice-size": str(per_job),
    }
    # JobSet's webhook holds a Job's followers back until its leader is scheduled: the group
    # Topos places at once is the leaders, one per Job; followers join it once it runs.
    obj = gang_pod(
        f"{jobset}-workers-{job}-{index}",
        jobset,
        jobs,
        gpus=8,
        labels=labels,
        annotations=annotations,
    )
    if index == 0:
        extra = [{"key": "jobset.sigs.k8s.io/priority", "operator": "In", "values": ["0"]}]
        obj["spec"]["affinity"] = exclusive_affinity(JOB_KEY, job_key, LEAF, extra=extra)
    else:
        obj["spec"]["nodeSelector"] = {LEAF: kw["leaf"]}
    return obj


async def run_jobset(
    cluster: GangCluster, name: str, jobs: int, per_job: int
) -> dict[int, set[str]]:
    """Create the JobSet's pods as JobSet does (leaders, then each Job's followers once its
    leader is bound); the leaves each Job's pods are bound in."""
    for j in range(jobs):
        await cluster.create(jobset_pod(name, j, 0, jobs, per_job))
    leaders = await cluster.all_bound(f"jobset.sigs.k8s.io/jobset-name={name}", jobs)
    for j in range(jobs):
        leaf = cluster.leaf_of[leaders[f"{name}-workers-{j}-0"]]
        for i in range(1, per_job):
            await cluster.create(jobset_pod(name, j, i, jobs, per_job, leaf=leaf))
    placed = await cluster.all_bound(f"jobset.sigs.k8s.io/jobset-name={name}", jobs * per_job)
    by_job: dict[int, set[str]] = defaultdict(set)
    for pod, node in placed.items():
        by_job[int(pod.split("-")[-2])].add(cluster.leaf_of[node])
    return by_job


async def test_jobset_exclusive_topology_one_child_job_per_leaf_and_other_gangs_kept_out(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=4, nodes_per_leaf=3)
    async with cluster.gang_coordinator():
        a = await run_jobset(cluster, "js-a", 2, 2)
        assert all(len(leaves) == 1 for leaves in a.values()), a
        assert len(set().union(*a.values())) == 2  # each child Job alone in a leaf
        event = await cluster.event("GangScheduled", name="js-a-workers-0-0")
        assert f"2 slices, each inside its own {LEAF} domain" in event["message"]
        b = await run_jobset(cluster, "js-b", 2, 1)
        assert set().union(*a.values()).isdisjoint(set().union(*b.values())), (a, b)

        # Every leaf is now some child Job's own: a gang with no keys at all, which a free node
        # of any leaf could hold, waits and is told why; once js-a is gone it binds there.
        await cluster.create(gang_pod("plain-0", "plain", 1))
        message = await cluster.condition("plain-0", "holds exclusively")
        assert "node(s) were in a topology domain another workload holds exclusively" in message
        await cluster.delete_pods("jobset.sigs.k8s.io/jobset-name=js-a")
        placed = await cluster.all_bound("topos.io/gang=plain", 1)
        assert cluster.leaf_of[placed["plain-0"]] in set().union(*a.values())


async def test_jobset_leader_waits_for_a_leaf_with_room_for_its_whole_job(
    cluster: GangCluster,
) -> None:
    # Three leaves have one node cordoned: room for a leader, not for its Job of two 8-GPU pods.
    names = await cluster.fabric(spines=1, leaves_per_spine=4, nodes_per_leaf=2)
    for node in names:
        if node.startswith(("n1x1", "n2x1", "n4x1")):
            await cluster.kube.patch(NODES, node, {"spec": {"unschedulable": True}})
    async with cluster.gang_coordinator():
        placed = await run_jobset(cluster, "js-c", 1, 2)
        assert placed == {0: {"leaf-3"}}


def lws_pod(group: int, worker: int, *, size: int = 4, subgroup: int = 2) -> dict[str, Any]:
    """A pod of LWS ``vllm`` group ``group`` as LWS v0.7.0's webhook makes it: subgroups of
    ``subgroup`` pods, each exclusive per node (``subgroup-exclusive-topology: hostname``)."""
    leader = f"vllm-{group}"
    name = leader if worker == 0 else f"{leader}-{worker}"
    index = worker // subgroup if (size - 1) % subgroup else (worker - 1) // subgroup
    index = max(index, 0)
    key = f"{leader}-sg{index}"
    labels = {
        "leaderworkerset.sigs.k8s.io/name": "vllm",
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/group-key": f"g{group}",
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/subgroup-index": str(index),
        SUBGROUP_KEY: key,
    }
    annotations = {
        "leaderworkerset.sigs.k8s.io/size": str(size),
        "leaderworkerset.sigs.k8s.io/subgroup-size": str(subgroup),
        "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": HOSTNAME,
    }
    obj = gang_pod(name, leader, size, gpus=4, cpu="4", labels=labels, annotations=annotations)
    obj["spec"]["affinity"] = exclusive_affinity(SUBGROUP_KEY, key, HOSTNAME)
    return obj


async def test_lws_subgroup_exclusive_topology_gives_each_subgroup_a_node(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=2)
    async with cluster.gang_coordinator():
        for group in range(2):
            for worker in range(4):
                await cluster.create(lws_pod(group, worker))
        placed = await cluster.all_bound("leaderworkerset.sigs.k8s.io/name=vllm", 8)
        nodes: dict[str, set[str]] = defaultdict(set)
        for pod in await cluster.pods("leaderworkerset.sigs.k8s.io/name=vllm"):
            nodes[pod["metadata"]["labels"][SUBGROUP_KEY]].add(placed[pod["metadata"]["name"]])
        assert all(len(n) == 1 for n in nodes.values()), nodes
        assert len(set().union(*nodes.values())) == 4  # four subgroups, four nodes


async def test_a_slice_size_that_does_not_divide_the_gang_is_named_and_others_still_bind(
    cluster: GangCluster,
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=2)
    odd = {"topos.io/slice-size": "3", "topos.io/slice-topology": "leaf"}
    async with cluster.gang_coordinator():
        for k in range(4):
            await cluster.create(gang_pod(f"odd-{k}", "odd", 4, gpus=1, cpu="1", annotations=odd))
        for k in range(2):
            await cluster.create(gang_pod(f"fine-{k}", "fine", 2))
        message = await cluster.condition("odd-0", "topos.io/slice-size")
        expected = "annotation topos.io/slice-size='3': a slice size of 3 does not divide"
        assert expected in message

        async def named() -> list[Any]:
            events = await cluster.events("odd-0", "FailedScheduling")
            return [e for e in events if expected in e.get("message", "")]

        await eventually(named, what="a FailedScheduling Event naming the key and the value")
        await cluster.all_bound("topos.io/gang=fine", 2)


async def test_kueue_slice_keys_on_an_indexed_job_reach_its_pods_and_keep_each_slice_on_a_node(
    cluster: GangCluster,
) -> None:
    # kube-controller-manager makes the Job's pods; the Kueue keys are on the Job only. One node
    # has 4 GPUs taken: best fit would put rank 0 there and split both slices of 2 × 4 GPUs.
    names = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    busy = pods.pod("busy", gpus=4, cpu=None, memory=None, namespace=None, node=names[0])
    await cluster.create(busy)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "tp",
            "annotations": {
                "kueue.x-k8s.io/podset-slice-size": "2",
                "kueue.x-k8s.io/podset-slice-required-topology": HOSTNAME,
            },
        },
        "spec": {
            "completionMode": "Indexed",
            "parallelism": 4,
            "completions": 4,
            "template": {
                "spec": {
                    "schedulerName": "topos",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "w",
                            "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": 4}},
                        }
                    ],
                }
            },
        },
    }
    async with cluster.gang_coordinator():
        await apply(cluster, job)
        placed = await cluster.all_bound("job-name=tp", 4)
    by_slice: dict[int, set[str]] = defaultdict(set)
    made = await cluster.pods("job-name=tp")
    for pod in made:
        index = int(pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"])
        by_slice[index // 2].add(placed[pod["metadata"]["name"]])
    assert all(len(nodes) == 1 for nodes in by_slice.values()), by_slice
    assert names[0] not in set().union(*by_slice.values())
    # the Job's keys are on its pods, and made them one group
    assert all(
        p["metadata"]["annotations"]["kueue.x-k8s.io/podset-slice-size"] == "2" for p in made
    )
    assert all(p["metadata"]["labels"]["topos.io/gang"] == "tp" for p in made)


def lws_exclusive_pod(group: int, worker: int, leaf: str | None = None) -> dict[str, Any]:
    """A pod of LWS ``serve`` (groups of 4 × 8 GPUs, ``exclusive-topology`` per leaf) as LWS
    v0.7.0 makes it: the leader with the webhook's affinities first; its workers, created once the
    leader is scheduled, with a nodeSelector for the leader's leaf."""
    leader = f"serve-{group}"
    labels = {
        "leaderworkerset.sigs.k8s.io/name": "serve",
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/group-key": f"serve-g{group}",
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
    }
    annotations = {
        "leaderworkerset.sigs.k8s.io/size": "4",
        "leaderworkerset.sigs.k8s.io/exclusive-topology": LEAF,
    }
    name = leader if worker == 0 else f"{leader}-{worker}"
    obj = gang_pod(name, leader, 1, labels=labels, annotations=annotations)
    if leaf is None:
        key = "leaderworkerset.sigs.k8s.io/group-key"
        obj["spec"]["affinity"] = exclusive_affinity(key, f"serve-g{group}", LEAF)
    else:
        obj["spec"]["nodeSelector"] = {LEAF: leaf}
    return obj


async def test_lws_exclusive_topology_leaders_go_where_their_whole_group_fits(
    cluster: GangCluster,
) -> None:
    # leaf-1 has a node cordoned: room for a leader, not for its group of 4; best fit would
    # take it. Each group gets a whole leaf of its own.
    names = await cluster.fabric(spines=1, leaves_per_spine=3, nodes_per_leaf=4)
    await cluster.kube.patch(NODES, names[0], {"spec": {"unschedulable": True}})
    leaves = {}
    async with cluster.gang_coordinator():
        for group in range(2):
            await cluster.create(lws_exclusive_pod(group, 0))
            placed = await cluster.all_bound(f"topos.io/gang=serve-{group}", 1)
            leaves[group] = cluster.leaf_of[placed[f"serve-{group}"]]
            for worker in range(1, 4):
                await cluster.create(lws_exclusive_pod(group, worker, leaves[group]))
            placed = await cluster.all_bound(f"topos.io/gang=serve-{group}", 4)
            assert {cluster.leaf_of[n] for n in placed.values()} == {leaves[group]}
    assert sorted(leaves.values()) == ["leaf-2", "leaf-3"], leaves
