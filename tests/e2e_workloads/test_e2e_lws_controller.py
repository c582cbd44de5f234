"""LeaderWorkerSet v0.7.0, built from its module, on the real control plane: LWS's sample
(config/samples/leaderworkerset_v1_leaderworkerset.yaml: 3 groups of 4) with ``schedulerName:
topos`` added. LWS makes a leader StatefulSet, the StatefulSet controller the leaders, LWS a
worker StatefulSet per leader, LWS's pod webhook (on loopback) labels every pod with its group and
worker index, and Topos binds all twelve."""

from __future__ import annotations

from collections import Counter

import pytest

from common.kube import KubeError
from tests.support.gang_cluster import GangCluster
from tests.support.workload_controllers import LEADER_WORKER_SETS
from tests.support.workload_examples import lws_sample

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
