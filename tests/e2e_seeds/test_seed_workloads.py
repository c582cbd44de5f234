"""Seed 003's workloads as written — the Topos keys on the Job or Deployment, not on its pods —
applied on the real control plane, where kube-controller-manager's Job and Deployment controllers
create the pods, and placed as each one intends. Only ``schedulerName`` differs from the seed,
plus what the API server refuses without (a Job template's ``restartPolicy``, an ``image``, a
Deployment's selector and template labels, the training Job's missing pod template).

Fleet: two leaves with no spine labels (so ``spine-1`` names nothing here), each of two idle
8-GPU NVSwitch nodes; leaf-1's nodes sort last by name, so a placement that ignores
``preferred-domain: leaf-1`` would not pick them first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import yaml

from devcluster.kube_wait import wait_for_pods
from devcluster.pods import gpu_pod
from tests.support.gang_cluster import LEAF, Controllers, GangCluster
from tests.support.workloads import DEPLOYMENTS, JOBS, STATEFULSETS, apply, gpu_job


async def fleet(cluster: GangCluster) -> dict[str, str]:
    """Node → leaf: leaf-2 holds ``a0``/``a1``, leaf-1 holds ``z0``/``z1``."""
    leaf_of = {}
    for short, leaf in (("a0", "leaf-2"), ("a1", "leaf-2"), ("z0", "leaf-1"), ("z1", "leaf-1")):
        node = await cluster.add_node(short, "dgx-a100", labels_extra={LEAF: leaf})
        leaf_of[node] = leaf
    return leaf_of


def deployment(name: str, annotations: Mapping[str, str], gpus: int, replicas: int) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "annotations": dict(annotations)},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "schedulerName": "topos",
                        "containers": [
                            {
                                "name": "serve",
                                "image": "server:1",
                                "resources": {"limits": {"nvidia.com/gpu": gpus}},
                            }
                        ],
                    },
                },
            },
        }
    )


async def bound(cluster: GangCluster, selector: str, count: int) -> dict[str, str]:
    return await cluster.all_bound(selector, count)


async def only_pod(cluster: GangCluster, selector: str) -> dict[str, Any]:
    pods = await wait_for_pods(
        cluster.kube,
        cluster.namespace,
        lambda pods: list(pods) if len(pods) == 1 else None,
        label_selector=selector,
        what=f"the pod of {selector}",
    )
    return dict(pods[0])


@pytest.fixture
def cluster(kube: Any, kubeconfig: Any, namespace: str) -> GangCluster:
    return GangCluster(kube, kubeconfig, namespace)


async def test_distributed_inference_replicas_land_on_three_nodes(cluster: GangCluster) -> None:
    await fleet(cluster)
    manifest = deployment(
        "inference",
        {
            "topology.scheduler/placement-strategy": "distributed",
            "topology.scheduler/gpu-count": "1",
        },
        gpus=1,
        replicas=3,
    )
    async with cluster.gang_coordinator():
        await apply(cluster, manifest)
        placed = await bound(cluster, "app=inference", 3)
    assert len(set(placed.values())) == 3, placed
    pod = (await cluster.pods("app=inference"))[0]
    # The keys the Deployment carries are on its pods now, in the seed's spelling.
    assert pod["metadata"]["annotations"]["topology.scheduler/placement-strategy"] == "distributed"
    assert pod["metadata"]["labels"]["topos.io/gang"] == "inference"


async def test_preferred_leaf_is_honoured_for_a_single_eight_gpu_pod(cluster: GangCluster) -> None:
    leaf_of = await fleet(cluster)
    manifest = gpu_job(
        "multi-gpu-job",
        {"topology.scheduler/gpu-count": "8", "topology.scheduler/preferred-domain": "leaf-1"},
        gpus=8,
    )
    async with cluster.gang_coordinator():
        await apply(cluster, manifest)
        placed = await bound(cluster, "job-name=multi-gpu-job", 1)
    (node,) = placed.values()
    assert leaf_of[node] == "leaf-1", placed


async def test_multi_node_training_job_is_placed_as_one_consolidated_job(
    cluster: GangCluster,
) -> None:
    leaf_of = await fleet(cluster)
    manifest = gpu_job(
        "multi-node-training",
        {
            "topology.scheduler/gpu-count": "16",
            "topology.scheduler/preferred-domain": "spine-1",
            "topology.scheduler/network-bandwidth": "200Gb",
            "topology.scheduler/placement-strategy": "consolidated",
        },
        gpus=4,
        parallelism=4,
    )
    async with cluster.gang_coordinator():
        await apply(cluster, manifest)
        placed = await bound(cluster, "job-name=multi-node-training", 4)
        # spine-1 is no domain of this cluster: said on every pod, as a Warning Event.
        warning = await cluster.event("UnknownTopologyDomain")
    # 16 GPUs in 4-GPU pods: two whole 8-GPU nodes of one leaf, the fewest there can be.
    assert len(set(placed.values())) == 2, placed
    assert len({leaf_of[n] for n in placed.values()}) == 1, placed
    assert warning["type"] == "Warning"
    assert "'spine-1' is not a leaf, spine or zone" in warning["message"]
    assert warning["involvedObject"]["name"] in placed


async def test_gpu_count_that_contradicts_the_limits_is_explained_until_the_job_is_fixed(
    cluster: GangCluster,
) -> None:
    await fleet(cluster)
    manifest = gpu_job("miscounted", {"topology.scheduler/gpu-count": "8"}, gpus=4)
    async with cluster.gang_coordinator():
        await apply(cluster, manifest)
        pod = await only_pod(cluster, "job-name=miscounted")
        name = pod["metadata"]["name"]
        message = await cluster.condition(name, "disagrees")
        # The Job's annotation is corrected: its pod, not bound yet, follows the change.
        await cluster.kube.patch(
            JOBS,
            "miscounted",
            {"metadata": {"annotations": {"topology.scheduler/gpu-count": "4"}}},
            namespace=cluster.namespace,
        )
        await cluster.bound(name)
    assert (
        "annotation topology.scheduler/gpu-count=8 disagrees with the GPU limits: "
        "the pod asks for 4 nvidia.com/gpu"
    ) in message


async def test_latency_sensitive_inference_service_and_single_gpu_job_are_placed(
    cluster: GangCluster,
) -> None:
    await fleet(cluster)
    service = deployment(
        "gpu-inference-service",
        {"topology.scheduler/gpu-count": "4", "topology.scheduler/latency-sensitive": "true"},
        gpus=4,
        replicas=1,
    )
    single = gpu_job("single-gpu-job", {"topology.scheduler/gpu-count": "1"}, gpus=1)
    async with cluster.gang_coordinator():
        await apply(cluster, service)
        await apply(cluster, single)
        await bound(cluster, "app=gpu-inference-service", 1)
        await bound(cluster, "job-name=single-gpu-job", 1)
    pod = await only_pod(cluster, "job-name=single-gpu-job")
    assert pod["metadata"]["annotations"]["topology.scheduler/gpu-count"] == "1"


async def test_keys_on_the_pod_template_win_over_the_owners(cluster: GangCluster) -> None:
    leaf_of = await fleet(cluster)
    manifest = yaml.safe_load(
        gpu_job("own-keys", {"topology.scheduler/preferred-domain": "leaf-9"}, gpus=1)
    )
    template = manifest["spec"]["template"]
    template["metadata"] = {"annotations": {"topology.scheduler/preferred-domain": "leaf-1"}}
    async with cluster.gang_coordinator():
        await cluster.kube.create(JOBS, manifest, namespace=cluster.namespace)
        placed = await bound(cluster, "job-name=own-keys", 1)
    (node,) = placed.values()
    assert leaf_of[node] == "leaf-1", placed
    pod = await only_pod(cluster, "job-name=own-keys")
    assert pod["metadata"]["annotations"]["topology.scheduler/preferred-domain"] == "leaf-1"
    assert not await cluster.events(reason="UnknownTopologyDomain")


async def test_statefulset_replicas_follow_their_owners_strategy(cluster: GangCluster) -> None:
    """No StatefulSet controller runs here: the test makes the replicas, owned as it would."""
    await fleet(cluster)
    sts = await cluster.kube.create(
        STATEFULSETS,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": "shards",
                "annotations": {"topology.scheduler/placement-strategy": "distributed"},
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "shards"}},
                "template": {
                    "metadata": {"labels": {"app": "shards"}},
                    "spec": {"containers": [{"name": "s", "image": "shard:1"}]},
                },
            },
        },
        namespace=cluster.namespace,
    )
    owner = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "shards",
        "uid": sts["metadata"]["uid"],
        "controller": True,
    }
    async with cluster.gang_coordinator():
        for i in range(2):
            pod = gpu_pod(f"shards-{i}", 2, labels={"app": "shards"})
            pod["metadata"]["ownerReferences"] = [owner]
            await cluster.create(pod)
        placed = await bound(cluster, "app=shards", 2)
    assert len(set(placed.values())) == 2, placed


async def test_replicas_made_before_the_coordinator_starts_wait_for_their_owner(
    cluster: GangCluster,
) -> None:
    """At start-up the pending pods and their owners are listed side by side: a pod seen before
    its Deployment is held, not placed without the Deployment's keys."""
    await fleet(cluster)
    manifest = deployment(
        "early", {"topology.scheduler/placement-strategy": "distributed"}, gpus=1, replicas=3
    )
    await apply(cluster, manifest)
    await wait_for_pods(
        cluster.kube,
        cluster.namespace,
        lambda pods: True if len(pods) == 3 else None,
        label_selector="app=early",
        what="the Deployment's 3 pods",
    )
    async with cluster.gang_coordinator():
        placed = await bound(cluster, "app=early", 3)
    assert len(set(placed.values())) == 3, placed


async def test_a_rolling_update_of_a_distributed_deployment_is_not_held_back(
    cluster: GangCluster,
) -> None:
    """A new template rolls out one surge pod at a time (maxSurge 25 % of 3 is 1): the new
    ReplicaSet's first pod must be placed on its own, not wait for all three replicas of its
    revision to be pending together (they never will be: the rollout waits for it)."""
    await fleet(cluster)
    manifest = deployment(
        "rolling", {"topology.scheduler/placement-strategy": "distributed"}, gpus=1, replicas=3
    )
    async with cluster.gang_coordinator():
        await apply(cluster, manifest)
        first = await bound(cluster, "app=rolling", 3)
        await cluster.kube.patch(
            DEPLOYMENTS,
            "rolling",
            {"spec": {"template": {"metadata": {"annotations": {"revision": "2"}}}}},
            namespace=cluster.namespace,
        )
        placed = await bound(cluster, "app=rolling", 4)
    new = set(placed) - set(first)
    assert len(new) == 1, placed  # the surge pod, bound while the old replicas still run


async def test_a_job_counted_by_gpu_count_recovers_from_a_node_going_notready(
    cluster: GangCluster,
) -> None:
    # gpu-count=16 is the Job's total (2 pods x 8 GPUs): the replacement of the pod on the failed
    # node is judged with the member still running, not alone ("asks for 8" never agrees).
    # One leaf of three nodes: the lost member alone moves, to the third node.
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    manifest = gpu_job("counted", {"topology.scheduler/gpu-count": "16"}, gpus=8, parallelism=2)
    async with Controllers(cluster), cluster.gang_coordinator():
        await apply(cluster, manifest)
        before = await bound(cluster, "job-name=counted", 2)
        lost, down = sorted(before.items())[0]
        kept = next(name for name in before if name != lost)
        await cluster.set_node_ready(down, False)

        def recovered(pods: Sequence[Mapping[str, Any]]) -> dict[str, str] | None:
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in live}
            if len(nodes) != 2 or lost in nodes or not all(nodes.values()):
                return None
            return {k: str(v) for k, v in nodes.items()}

        after = await wait_for_pods(
            cluster.kube,
            cluster.namespace,
            recovered,
            label_selector="job-name=counted",
            what="the Job's replacement pod bound",
        )
    assert after[kept] == before[kept]
    assert down not in after.values()


async def test_seed_hints_on_bare_pods_are_honoured_and_checked_as_on_a_job(
    cluster: GangCluster,
) -> None:
    # A bare Pod carrying seed 003's hints is a group of its own: the same path as a Job's pods.
    leaf_of = {}
    for short, leaf in (("a0", "leaf-2"), ("a1", "leaf-2"), ("z0", "leaf-1"), ("z1", "leaf-1")):
        extra = {LEAF: leaf, "topos.io/network.bandwidth": "100Gb"}
        leaf_of[await cluster.add_node(short, "dgx-a100", labels_extra=extra)] = leaf
    hint = "topology.scheduler/"
    bad = {
        "eight": {f"{hint}gpu-count": "eight"},
        "fast": {f"{hint}network-bandwidth": "fast"},
    }
    async with cluster.gang_coordinator():
        for name, annotations in bad.items():
            await cluster.create(gpu_pod(name, 1, annotations=annotations))
        await cluster.create(gpu_pod("leaf1", 8, annotations={f"{hint}preferred-domain": "leaf-1"}))
        await cluster.create(
            gpu_pod("nowhere", 1, annotations={f"{hint}preferred-domain": "leaf-99"})
        )
        await cluster.create(gpu_pod("wide", 1, annotations={f"{hint}network-bandwidth": "400Gb"}))
        warnings = {name: await cluster.warning(name) for name in bad}
        slow = await cluster.condition("wide", "network bandwidth")
        placed = {n: (await cluster.bound(n))["spec"]["nodeName"] for n in ("leaf1", "nowhere")}
        unknown = await cluster.event("UnknownTopologyDomain", name="nowhere")
    assert warnings["eight"]["type"] == "Warning"
    assert f"annotation {hint}gpu-count='eight'" in warnings["eight"]["message"]
    assert f"annotation {hint}network-bandwidth='fast'" in warnings["fast"]["message"]
    assert "less network bandwidth" in slow
    assert leaf_of[placed["leaf1"]] == "leaf-1", placed
    assert "'leaf-99' is not a leaf, spine or zone" in unknown["message"]
    for name in (*bad, "wide"):
        assert not (await cluster.pod(name))["spec"].get("nodeName"), name
