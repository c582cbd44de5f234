"""Kueue's fair sharing in front of Topos, on the real control plane with the real Kueue (the
harness runs it with ``fairSharing`` on: preemption strategies ``LessThanOrEqualToFinalShare``,
``LessThanInitialShare``). Three ClusterQueues in one cohort: ``shared`` lends all 24 GPUs, and
``team-a`` (weight 2) and ``team-b`` (weight 1) own none, so everything they run is borrowed.
Both teams ask for more than the cluster: team-b first (it takes it all), then team-a. Kueue's
fair-sharing preemption evicts team-b's workloads until the borrowed shares follow the weights
(team-a 16 GPUs, team-b 8), and Topos places exactly what Kueue admitted: every admitted
workload's pod bound, no pod of an evicted one left."""

from __future__ import annotations

from typing import Any

from devcluster.kube_wait import wait_for
from tests.support.gang_cluster import Controllers, GangCluster
from tests.support.kueue import JOBS, WORKLOADS, condition, is_true, job, queues

GPUS = 4  # a pod; 2 per node
EACH = 6  # workloads a team submits: 24 GPUs, the whole cluster
TEAM_A = "job-name in (" + ",".join(f"a{i}" for i in range(EACH)) + ")"
TEAM_B = "job-name in (" + ",".join(f"b{i}" for i in range(EACH)) + ")"


def admitted_gpus(workloads: list[dict[str, Any]], cluster_queue: str) -> int:
    return sum(
        GPUS
        for w in workloads
        if is_true(w, "Admitted")
        and (w["status"].get("admission") or {}).get("clusterQueue") == cluster_queue
    )


async def test_fair_sharing_weights_decide_the_admitted_shares_and_topos_places_them(
    kueue_controller: object, cluster: GangCluster
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=3)
    async with (
        cluster.gang_coordinator(),
        Controllers(cluster),
        queues(
            cluster.kube,
            cluster.namespace,
            teams=("shared", "team-a", "team-b"),
            gpus={"shared": 24, "team-a": 0, "team-b": 0},
            weights={"team-a": "2", "team-b": "1"},
        ) as made,
    ):
        cq = made.cluster_queues
        for i in range(EACH):
            await cluster.kube.create(
                JOBS, job(f"b{i}", "team-b", pods=1, gpus=GPUS), namespace=cluster.namespace
            )

        def shares(items: Any) -> tuple[int, int]:
            return (admitted_gpus(items, cq["team-a"]), admitted_gpus(items, cq["team-b"]))

        # team-b alone: Kueue lends it the whole cohort, Topos places all of it.
        await wait_for(
            cluster.kube,
            WORKLOADS,
            lambda items: shares(items) if shares(items) == (0, 24) else None,
            namespace=cluster.namespace,
            what="team-b admitted on the whole cohort",
        )
        await cluster.all_bound(TEAM_B, EACH)
        for i in range(EACH):
            await cluster.kube.create(
                JOBS, job(f"a{i}", "team-a", pods=1, gpus=GPUS), namespace=cluster.namespace
            )
        # Fair sharing: team-b's workloads are preempted until the shares follow the weights.
        balanced = await wait_for(
            cluster.kube,
            WORKLOADS,
            lambda items: list(items) if shares(items) == (16, 8) else None,
            namespace=cluster.namespace,
            what="team-a 16 GPUs and team-b 8 admitted (weights 2:1)",
        )
        evicted = [
            w
            for w in balanced
            if (w["spec"].get("queueName") or "") == "team-b" and not is_true(w, "Admitted")
        ]
        assert len(evicted) == EACH - 2, [w["metadata"]["name"] for w in evicted]
        for w in evicted:  # preempted by Kueue's fair sharing, not by Topos
            assert (condition(w, "Preempted") or {}).get("reason") == "InCohortFairSharing", w
        # Topos places what was admitted: 4 team-a pods and 2 team-b pods bound, no more.
        placed_a = await cluster.all_bound(TEAM_A, 4)
        placed_b = await cluster.all_bound(TEAM_B, 2)
    assert set(placed_a.values()) | set(placed_b.values()) <= set(nodes)
    per_node: dict[str, int] = {}
    for node in [*placed_a.values(), *placed_b.values()]:
        per_node[node] = per_node.get(node, 0) + 1
    assert max(per_node.values()) <= 2  # 2 × 4 GPUs a node, never more
