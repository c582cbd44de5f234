"""PodTopologySpread's batch scoring (``score_nodes``: one constraint's part worked out once per
topology value, several constraints a column at a time) gives every node the score the per-node
path (``score``) gives it, to the bit — for one constraint and for several (the system defaults'
zone and hostname), a node lacking a key ignored (a pod's own constraints) or scored by the
others (the system defaults), on random clusters, and on clusters where every node carries
every key (the batch's fast path)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.plugins.podtopologyspread import PodTopologySpread
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.snapshot.workloads import WorkloadSelectors
from devcluster.pods import pod
from tests.support.sched_hw import plain_node, request, running

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
HOSTNAME = "kubernetes.io/hostname"
APP = {"app": "web"}


def cluster(rng: random.Random, *, full: bool = False) -> list[NodeInfo]:
    """Up to 30 nodes, most (``full``: all) in one of three zones and four racks, each running
    up to four pods of two apps."""
    nodes = []
    for i in range(rng.randint(1, 30)):
        labels = {}
        if full or rng.random() < 0.85:
            labels[ZONE] = f"zone-{rng.randint(0, 2)}"
        if full or rng.random() < 0.7:
            labels[RACK] = f"rack-{rng.randint(0, 3)}"
        pods = [
            running(pod(f"p{i}-{j}", labels={"app": rng.choice(["web", "db"])}, node=f"n{i}"))
            for j in range(rng.randint(0, 4))
        ]
        nodes.append(plain_node(f"n{i}", labels=labels, pods=pods))
    return nodes


def scores(
    plugin: PodTopologySpread, obj: dict[str, Any], nodes: list[NodeInfo], snapshot: Snapshot
) -> tuple[list[float], list[float]]:
    incoming = request(obj)
    state = CycleState()
    assert plugin.pre_score(state, incoming, nodes, snapshot).is_success
    batch = plugin.score_nodes(state, incoming, nodes)
    return batch, [plugin.score(state, incoming, n) for n in nodes]


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("seed", range(60))
def test_a_pods_own_constraints_score_alike_in_batch_and_per_node(seed: int, full: bool) -> None:
    rng = random.Random(seed)
    nodes = cluster(rng, full=full)
    constraints = [
        {
            "maxSkew": rng.randint(1, 3),
            "topologyKey": rng.choice([ZONE, RACK, HOSTNAME]),
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": APP},
        }
        for _ in range(rng.randint(1, 3))
    ]
    obj = pod("new", labels=APP, spec={"topologySpreadConstraints": constraints})
    batch, per_node = scores(PodTopologySpread(), obj, nodes, Snapshot(nodes))
    assert batch == per_node
    assert any(s > 0 for s in batch) or not any(n.pods for n in nodes)


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_the_system_defaults_score_alike_in_batch_and_per_node(seed: int, full: bool) -> None:
    """Zone and hostname, ScheduleAnyway, by the selector of the ReplicaSet owning the pod; a
    node without a zone is scored by its hostname alone."""
    rng = random.Random(seed)
    nodes = cluster(rng, full=full)
    workloads = WorkloadSelectors()
    workloads.put(
        "ReplicaSet",
        {
            "metadata": {"name": "web-abc", "namespace": "default"},
            "spec": {"selector": {"matchLabels": APP}},
        },
    )
    obj = pod("new", labels=APP)
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "u1"}
        | {"controller": True}
    ]
    snapshot = Snapshot(nodes, workloads=workloads)
    batch, per_node = scores(PodTopologySpread(), obj, nodes, snapshot)
    assert batch == per_node
    assert any(s > 0 for s in batch) or not any(n.pods for n in nodes)
