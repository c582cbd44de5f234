"""LeaderWorkerSet v0.7.0, built from its module, on the real control plane: LWS's sample
(config/samples/leaderworkerset_v1_leaderworkerset.yaml: 3 groups of 4) with ``schedulerName:
topos`` added. LWS makes a leader StatefulSet, the StatefulSet controller the leaders, LWS a
worker StatefulSet per leader, LWS's pod webhook (on loopback) labels every pod with its group and
worker index, and Topos binds all twelve."""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

from tests.support.gang_cluster import GangCluster
from tests.support.workload_controllers import LEADER_WORKER_SETS, with_scheduler

# The LWS sample as its module ships it; only schedulerName is added below.
SAMPLE = """
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  labels:
    app.kubernetes.io/name: leaderworkerset
    app.kubernetes.io/instance: leaderworkerset-sample
    app.kubernetes.io/part-of: lws
    app.kubernetes.io/managed-by: kustomize
    app.kubernetes.io/created-by: lws
  name: leaderworkerset-sample
spec:
  rolloutStrategy:
    rollingUpdateConfiguration:
      maxUnavailable: 1
    type: RollingUpdate
  replicas: 3
  leaderWorkerTemplate:
    size: 4
    restartPolicy: RecreateGroupOnPodRestart
    workerTemplate:
      spec:
        containers:
        - name: nginx
          image: nginxinc/nginx-unprivileged:1.27
          resources:
            limits:
              cpu: "100m"
            requests:
              cpu: "50m"
          ports:
          - containerPort: 8080
"""
NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"


def sample() -> dict[str, Any]:
    lws: dict[str, Any] = yaml.safe_load(SAMPLE)
    with_scheduler(lws["spec"]["leaderWorkerTemplate"]["workerTemplate"])
    return lws


async def test_lws_sample_groups_made_by_lws_and_bound_by_topos(
    lws_controller: object, cluster: GangCluster
) -> None:
    nodes = await cluster.fabric(spines=1, leaves_per_spine=1, nodes_per_leaf=2)
    async with cluster.gang_coordinator():
        await cluster.kube.create(LEADER_WORKER_SETS, sample(), namespace=cluster.namespace)
        placed = await cluster.all_bound(f"{NAME}=leaderworkerset-sample", 12)
    assert set(placed.values()) <= set(nodes)
    pods = await cluster.pods(f"{NAME}=leaderworkerset-sample")
    labels = [p["metadata"]["labels"] for p in pods]
    # Three groups of a leader (worker 0) and three workers, each pod labelled by LWS's pod
    # webhook with its group's key.
    assert Counter(lb[GROUP] for lb in labels) == {"0": 4, "1": 4, "2": 4}
    assert sorted(lb[WORKER] for lb in labels) == sorted(["0", "1", "2", "3"] * 3)
    keys = {lb[GROUP]: set() for lb in labels}
    for lb in labels:
        keys[lb[GROUP]].add(lb[GROUP_KEY])
    assert all(len(k) == 1 for k in keys.values()), keys
    assert {p["spec"]["schedulerName"] for p in pods} == {"topos"}
