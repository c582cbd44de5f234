"""LeaderWorkerSet v0.7.0, built from its module, on the real control plane: LWS's sample
(config/samples/leaderworkerset_v1_leaderworkerset.yaml: 3 groups of 4) with ``schedulerName:
topos`` added. LWS makes a leader StatefulSet, the StatefulSet controller the leaders, LWS a
worker StatefulSet per leader, LWS's pod webhook (on loopback) labels every pod with its group and
worker index, and Topos binds all twelve."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from common.kube import NODES, KubeError
from devcluster.kube_wait import scheduled_message, wait_for_pods
from tests.support.gang_cluster import LEAF, SPINE, Controllers, GangCluster
from tests.support.workload_controllers import LEADER_WORKER_SETS
from tests.support.workload_examples import lws_exclusive, lws_sample, vllm
from tests.support.workload_runs import (
    GANG,
    GANG_RUN,
    hold_gpus,
    large_host,
    release,
    restart,
)

NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"


async def test_lws_sample_groups_made_by_lws_and_bound_by_topos(
    lws_controller: object, cluster: GangCluster
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator():
        await cluster.kube.create(LEADER_WORKER_SETS, lws_sample(), namespace=cluster.namespace)
        placed = await cluster.all_bound(f"{NAME}=leaderworkerset-sample", 12)
    assert set(placed.values()) <= set(nodes)
    pods = await cluster.pods(f"{NAME}=leaderworkerset-sample")
    labels = [p["metadata"]["labels"] for p in pods]
    # Three groups of a leader (worker 0) and three workers, each pod labelled by LWS's pod
    # webhook with its group's key.
    assert Counter(lb[GROUP] for lb in labels) == {"0": 4, "1": 4, "2": 4}
    assert sorted(lb[WORKER] for lb in labels) == sorted(["0", "1", "2", "3"] * 3)
    keys: dict[str, set[str]] = {lb[GROUP]: set() for lb in labels}
    for lb in labels:
        keys[lb[GROUP]].add(lb[GROUP_KEY])
    assert all(len(k) == 1 for k in keys.values()), keys
    assert {p["spec"]["schedulerName"] for p in pods} == {"topos"}


async def test_lws_webhook_refuses_a_group_of_size_zero(
    lws_controller: object, cluster: GangCluster
) -> None:
    bad = lws_sample()
    bad["spec"]["leaderWorkerTemplate"]["size"] = 0
    with pytest.raises(KubeError) as refused:
        await cluster.kube.create(LEADER_WORKER_SETS, bad, namespace=cluster.namespace)
    # LWS's validating webhook (on loopback) refuses it: no pod of it ever reaches a scheduler.
    message = str(refused.value)
    assert "vleaderworkerset.kb.io" in message, message
    assert "spec.leaderWorkerTemplate.size: Invalid value: 0" in message, message
    assert (await cluster.kube.list(LEADER_WORKER_SETS, namespace=cluster.namespace))["items"] == []


async def test_lws_scale_up_adds_groups_each_a_gang_of_its_own(
    lws_controller: object, cluster: GangCluster
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    selector = f"{NAME}=leaderworkerset-sample"
    async with cluster.gang_coordinator():
        await cluster.kube.create(LEADER_WORKER_SETS, lws_sample(), namespace=cluster.namespace)
        await cluster.all_bound(selector, 12)
        await cluster.kube.patch(
            LEADER_WORKER_SETS,
            "leaderworkerset-sample",
            {"spec": {"replicas": 4}},
            namespace=cluster.namespace,
        )
        await cluster.all_bound(selector, 16)
    gangs: dict[str, set[tuple[str, str, str]]] = {}
    for pod in await cluster.pods(selector):
        labels = pod["metadata"]["labels"]
        gangs.setdefault(labels[GROUP], set()).add(
            (labels[GANG], labels["topos.io/gang-min"], labels[GANG_RUN])
        )
    # One gang of 4 per group, the new group's as the old ones'; each group a run of its own.
    assert {g: {(name, n) for name, n, _ in v} for g, v in gangs.items()} == {
        str(i): {(f"leaderworkerset-sample-{i}", "4")} for i in range(4)
    }
    assert len({run for v in gangs.values() for _, _, run in v}) == 4


async def test_a_restarted_worker_makes_lws_recreate_its_group_as_a_new_run(
    lws_controller: object, cluster: GangCluster
) -> None:
    """``RecreateGroupOnPodRestart``: a worker's container restarts, LWS deletes its leader and
    so the whole group, the StatefulSets make it again, and Topos binds the new group as a new
    run of its gang; the other groups are not touched."""
    await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    selector = f"{NAME}=leaderworkerset-sample"
    async with cluster.gang_coordinator(), Controllers(cluster):
        await cluster.kube.create(LEADER_WORKER_SETS, lws_sample(), namespace=cluster.namespace)
        await cluster.all_bound(selector, 12)
        before = {p["metadata"]["uid"]: p for p in await cluster.pods(selector)}
        group_1 = {
            p["metadata"]["name"]: p["metadata"]["uid"]
            for p in before.values()
            if p["metadata"]["labels"][GROUP] == "1"
        }
        await restart(cluster, "leaderworkerset-sample-1-2")
        await cluster.all_bound(selector, 12, replaced=group_1)
        after = await cluster.pods(selector)
    old_runs = {
        p["metadata"]["labels"][GROUP]: p["metadata"]["labels"][GANG_RUN] for p in before.values()
    }
    for pod in after:
        labels = pod["metadata"]["labels"]
        if labels[GROUP] == "1":
            assert labels[GANG_RUN] != old_runs["1"], pod["metadata"]["name"]
        else:
            assert pod["metadata"]["uid"] in before, pod["metadata"]["name"]  # untouched
    assert (
        len(
            {
                p["metadata"]["labels"][GANG_RUN]
                for p in after
                if p["metadata"]["labels"][GROUP] == "1"
            }
        )
        == 1
    )


async def test_lws_exclusive_placement_example_one_group_per_node_pool(
    lws_controller: object, cluster: GangCluster
) -> None:
    """LWS's exclusive-placement example (``exclusive-topology: cloud.google.com/gke-nodepool``)
    on nodes carrying GKE's node-pool label: three groups, two pools — two groups bind, each in
    a pool of its own, the third waits whole; a third pool appears and it binds there."""
    pool = "cloud.google.com/gke-nodepool"
    for i in (1, 2):
        await cluster.add_node(
            f"p{i}",
            "dgx-a100",
            labels_extra={LEAF: f"leaf-{i}", SPINE: "spine-1", pool: f"pool-{i}"},
        )
    selector = f"{NAME}=leaderworkerset-sample"
    async with cluster.gang_coordinator() as coordinator:
        await cluster.kube.create(LEADER_WORKER_SETS, lws_exclusive(), namespace=cluster.namespace)

        def two_groups(listed: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
            bound = [p for p in listed if p["spec"].get("nodeName")]
            waiting = [
                p
                for p in listed
                if not p["spec"].get("nodeName") and scheduled_message(p, status="False")
            ]
            return list(listed) if len(bound) == 8 and waiting else None

        seen = await wait_for_pods(
            cluster.kube,
            cluster.namespace,
            two_groups,
            label_selector=selector,
            what="two groups bound and the third waiting",
        )
        bound_groups = {p["metadata"]["labels"][GROUP] for p in seen if p["spec"].get("nodeName")}
        assert len(bound_groups) == 2
        # The third group's leader waits (LWS makes its workers only once it is scheduled).
        assert all(
            not p["spec"].get("nodeName")
            for p in seen
            if p["metadata"]["labels"][GROUP] not in bound_groups
        )
        await cluster.add_node(
            "p3", "dgx-a100", labels_extra={LEAF: "leaf-3", SPINE: "spine-1", pool: "pool-3"}
        )
        cluster.hello(coordinator.inventory)
        placed = await cluster.all_bound(selector, 12)
    pools: dict[str, set[str]] = {}
    for pod in await cluster.pods(selector):
        node = await cluster.kube.get(NODES, placed[pod["metadata"]["name"]])
        pools.setdefault(pod["metadata"]["labels"][GROUP], set()).add(
            node["metadata"]["labels"][pool]
        )
    assert sorted(pools.values(), key=sorted) == [{"pool-1"}, {"pool-2"}, {"pool-3"}], pools


@pytest.mark.parametrize("size", [2, 4])
async def test_lws_vllm_example_binds_a_group_whole_or_not_at_all(
    lws_controller: object, cluster: GangCluster, size: int
) -> None:
    """LWS's multi-node vLLM example, groups of ``size`` pods of a whole 8-GPU node each, on
    ``2 × size`` nodes of which one is taken: one group binds, the other waits whole (not its
    leader alone); the node freed, it binds too."""
    for i in range(2 * size):
        await large_host(cluster, f"h{i}", f"leaf-{i % 2 + 1}")
    selector = f"{NAME}=vllm"
    async with cluster.gang_coordinator():
        await hold_gpus(cluster, "someone-else", 8)
        await cluster.kube.create(LEADER_WORKER_SETS, vllm(size), namespace=cluster.namespace)

        def one_group(listed: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
            bound = [p for p in listed if p["spec"].get("nodeName")]
            waiting = [p for p in listed if scheduled_message(p, status="False")]
            assert len(bound) <= size, "more pods bound than one group's"
            whole = len(bound) == size and len({p["metadata"]["labels"][GROUP] for p in bound}) == 1
            return list(listed) if len(listed) == 2 * size and whole and waiting else None

        seen = await wait_for_pods(
            cluster.kube,
            cluster.namespace,
            one_group,
            label_selector=selector,
            what="one vLLM group bound, the other waiting",
        )
        by_group: dict[str, list[bool]] = {}
        for p in seen:
            by_group.setdefault(p["metadata"]["labels"][GROUP], []).append(
                bool(p["spec"].get("nodeName"))
            )
        # All or nothing per group: one group all bound, the other none.
        assert sorted(tuple(set(v)) for v in by_group.values()) == [(False,), (True,)], by_group
        await release(cluster, "someone-else")
        placed = await cluster.all_bound(selector, 2 * size)
    assert len(set(placed.values())) == 2 * size  # a node each
    gangs = {p["metadata"]["labels"][GANG] for p in await cluster.pods(selector)}
    assert gangs == {"vllm-0", "vllm-1"}
