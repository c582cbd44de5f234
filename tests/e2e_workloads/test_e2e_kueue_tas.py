"""Kueue's Topology-Aware Scheduling in front of Topos, on the real control plane with the real
Kueue: a ``Topology`` (spine, leaf, host) and a TAS ResourceFlavor over this test's nodes; a Job
asking ``kueue.x-k8s.io/podset-required-topology: topos.io/leaf``. Kueue picks the leaf, starts
the Job with its pods behind the ``kueue.x-k8s.io/topology`` scheduling gate, and lifts the gate
writing the chosen domain into each pod's nodeSelector; Topos places each pod only there (and
chooses its GPUs)."""

from __future__ import annotations

from common.kube import NODES
from tests.support.gang_cluster import LEAF, SPINE, Controllers, GangCluster
from tests.support.gpu_cluster import RUN_LABEL, assignment
from tests.support.kueue import JOBS, job, queues, workload_of

HOST = "kubernetes.io/hostname"
GATE = "kueue.x-k8s.io/topology"


async def test_kueue_picks_the_leaf_and_topos_places_the_pods_only_inside_it(
    kueue_controller: object, cluster: GangCluster
) -> None:
    await cluster.fabric(spines=1, leaves_per_spine=2, nodes_per_leaf=2)
    async with (
        queues(
            cluster.kube,
            cluster.namespace,
            gpus_each=32,
            topology=(SPINE, LEAF, HOST),
            node_labels={RUN_LABEL: cluster.run},
        ),
        cluster.gang_coordinator(),
        Controllers(cluster),
    ):
        spec = job("tas", "team-a", pods=2, gpus=8)
        spec["spec"]["template"]["metadata"]["annotations"] = {
            "kueue.x-k8s.io/podset-required-topology": LEAF
        }
        created = await cluster.kube.create(JOBS, spec, namespace=cluster.namespace)
        admitted = await workload_of(
            cluster.kube, cluster.namespace, created["metadata"]["uid"], admitted=True
        )
        (assignment_of_podset,) = admitted["status"]["admission"]["podSetAssignments"]
        chosen = assignment_of_podset["topologyAssignment"]
        placed = await cluster.all_bound("job-name=tas", 2)
    # The Job's template names no domain: Kueue wrote only the flavor's nodeLabels there ...
    stored = await cluster.kube.get(JOBS, "tas", namespace=cluster.namespace)
    template_selector = stored["spec"]["template"]["spec"].get("nodeSelector") or {}
    assert template_selector == {RUN_LABEL: cluster.run}, template_selector
    pods = await cluster.pods("job-name=tas")
    for pod in pods:
        # ... Kueue's choice is written on each pod when it lifts its gate: Topos placed the pod
        # inside it.
        assert not pod["spec"].get("schedulingGates"), pod["metadata"]["name"]
        selector = pod["spec"].get("nodeSelector") or {}
        assert set(selector) & {SPINE, LEAF, HOST}, (pod["metadata"]["name"], selector)
        node = pod["spec"]["nodeName"]
        labels = (await cluster.kube.get(NODES, node))["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in selector.items()), (selector, node)
        assert len(assignment(pod)[1]) == 8  # Topos's GPUs
    assert len({cluster.leaf_of[n] for n in placed.values()}) == 1, (placed, chosen)
