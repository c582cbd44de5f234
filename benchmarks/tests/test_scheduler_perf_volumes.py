"""scheduler_perf's persistent volumes as ``benchmarks/scheduler_perf.py`` reads and makes them:
a createPods op's volume and claim templates (a bound pair per pod, the pod naming its claim),
createNodes' ``nodeAllocatableStrategy`` (allocatable entries, a CSINode per Node), their
refusals of bad parameters, and the count of volumes per Node against its CSINode limit that
each run prints (kube's NodeVolumeLimits rule)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest

from benchmarks import scheduler_perf
from benchmarks import scheduler_perf_workload as workload_yaml
from benchmarks.scheduler_perf_objects import WorkloadError
from benchmarks.scheduler_perf_volumes import (
    MIGRATED_PLUGINS,
    AttachCount,
    NodeAllocatable,
    Volumes,
    attach_count,
    attached,
    create_volumes,
    csinode_body,
    node_limits,
    pod_with_claim,
    volume_pair,
)


def test_csi_case_makes_a_bound_claim_and_volume_per_pod(perf_dir: Path) -> None:
    work = workload_yaml.load_workload(
        perf_dir / "volumes" / "performance-config.yaml", "SchedulingCSIPVs", "500Nodes"
    )
    (nodes,) = work.nodes
    assert nodes.allocatable is not None
    assert nodes.allocatable.allocatable == {"attachable-volumes-csi-ebs.csi.aws.com": "39"}
    csinode = csinode_body("n-1", nodes.allocatable)
    assert csinode["spec"]["drivers"] == [
        {"name": "ebs.csi.aws.com", "nodeID": "n-1", "allocatable": {"count": 39}}
    ]
    assert csinode["metadata"]["annotations"] == {MIGRATED_PLUGINS: ""}
    init, measured = work.pods
    assert measured.measured
    assert init.volumes is not None
    claim, volume = volume_pair(init.volumes, "perf-topos-1-namespace-1", 7)
    assert claim["metadata"]["name"] == "pvc-7"
    assert volume["metadata"]["name"] == "perf-topos-1-namespace-1-vol-7"  # cluster-wide: unique
    assert volume["spec"]["csi"] == {
        "driver": "ebs.csi.aws.com",
        "volumeHandle": "perf-topos-1-namespace-1-vol-7",
    }
    assert volume["spec"]["claimRef"] == {
        "kind": "PersistentVolumeClaim",
        "namespace": "perf-topos-1-namespace-1",
        "name": "pvc-7",
        "apiVersion": "v1",
    }
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert claim["status"] == volume["status"] == {"phase": "Bound"}
    assert claim["metadata"]["annotations"] == {"pv.kubernetes.io/bind-completed": "true"}
    pod = pod_with_claim(scheduler_perf.pod_body(init.template.render(), "init-00007", "topos"), 7)
    assert pod["spec"]["volumes"] == [
        {"name": "vol", "persistentVolumeClaim": {"claimName": "pvc-7"}}
    ]


def test_in_tree_volume_gets_its_own_id(perf_dir: Path) -> None:
    work = workload_yaml.load_workload(
        perf_dir / "volumes" / "performance-config.yaml", "SchedulingMigratedInTreePVs", "500Nodes"
    )
    assert work.nodes[0].allocatable is not None
    assert work.nodes[0].allocatable.migrated == ("kubernetes.io/aws-ebs",)
    volumes = work.pods[0].volumes
    assert volumes is not None
    _, volume = volume_pair(volumes, "ns", 3)
    assert volume["spec"]["awsElasticBlockStore"] == {"volumeID": "vol-3"}


def _case(tmp_path: Path, ops: str) -> Path:
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n")
    (tmp_path / "pv.yaml").write_text("apiVersion: v1\nkind: PersistentVolume\nspec: {}\n")
    (tmp_path / "pvc.yaml").write_text("apiVersion: v1\nkind: PersistentVolumeClaim\n")
    config = tmp_path / "performance-config.yaml"
    config.write_text(
        "- name: Case\n  defaultPodTemplatePath: pod.yaml\n  workloadTemplate:\n"
        + ops
        + "  - opcode: createPods\n    count: 1\n    collectMetrics: true\n"
        "  workloads:\n  - name: w\n    params: {}\n"
    )
    return config


NODES = "  - opcode: createNodes\n    count: 1\n    nodeTemplatePath: pod.yaml\n"


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            "  - opcode: createPods\n    count: 1\n    persistentVolumeTemplatePath: pv.yaml\n",
            r"\[0\]\.persistentVolumeClaimTemplatePath: not set, and the other template is",
        ),
        (
            "  - opcode: createPods\n    count: 1\n    persistentVolumeTemplatePath: pvc.yaml\n"
            "    persistentVolumeClaimTemplatePath: pvc.yaml\n",
            r"\[0\]\.persistentVolumeTemplatePath: a 'PersistentVolumeClaim', not a "
            "PersistentVolume",
        ),
        (
            NODES + "    nodeAllocatableStrategy:\n      nodeAllocatable: [a]\n",
            r"\[0\]\.nodeAllocatableStrategy\.nodeAllocatable: \['a'\] is not a map of quantities",
        ),
        (
            NODES + "    nodeAllocatableStrategy:\n      csiNodeAllocatable:\n"
            "        ebs.csi.aws.com: {max: 3}\n",
            r"csiNodeAllocatable: \{'ebs.csi.aws.com': \{'max': 3\}\} is not a map of driver",
        ),
        (
            NODES + "    nodeAllocatableStrategy:\n      resize: true\n",
            r"\[0\]\.nodeAllocatableStrategy\.resize: not read by this runner",
        ),
        (
            NODES + "    uniqueNodeLabelStrategy:\n      labelKey: a\n",
            r"\[0\]\.uniqueNodeLabelStrategy: not read by this runner \(createNodes\)",
        ),
    ],
)
def test_bad_volume_parameters_are_named(tmp_path: Path, ops: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        workload_yaml.load_workload(_case(tmp_path, ops), "Case", "w")


def _placed(
    volumes: Volumes, namespace: str, placed: dict[int, str]
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], Any], dict[str, Any]]:
    """Pods ``i`` bound to ``placed[i]``, each naming its claim ``pvc-<i>``, with the claims
    and volumes the runner makes."""
    pods, claims, pvs = [], {}, {}
    for i, node in placed.items():
        claim, volume = volume_pair(volumes, namespace, i)
        claims[namespace, claim["metadata"]["name"]] = claim
        pvs[volume["metadata"]["name"]] = volume
        pod = pod_with_claim({"metadata": {"name": f"p-{i}"}, "spec": {}}, i)
        pod["metadata"]["namespace"] = namespace
        pod["spec"]["nodeName"] = node
        pods.append(pod)
    return pods, claims, pvs


def test_volumes_per_node_are_counted_against_the_csinode_limit(perf_dir: Path) -> None:
    # EventHandlingPodDelete's nodes allow 20 CSI volumes; here a limit of 2 on n-0.
    work = workload_yaml.load_workload(
        perf_dir / "event_handling" / "performance-config.yaml",
        "EventHandlingPodDelete",
        "50Nodes_500Pods",
    )
    volumes = work.pods[0].volumes
    assert volumes is not None
    tight = NodeAllocatable({}, {"ebs.csi.aws.com": {"count": 2}})
    limits = node_limits([csinode_body("n-0", tight), csinode_body("n-1", tight)])
    assert limits == {"n-0": {"ebs.csi.aws.com": 2}, "n-1": {"ebs.csi.aws.com": 2}}
    pods, claims, pvs = _placed(volumes, "ns", {0: "n-0", 1: "n-0", 2: "n-0", 3: "n-1"})
    shared = {**pods[0], "metadata": {"name": "p-again", "namespace": "ns"}}  # same claim
    counts = attached([*pods, shared], claims, pvs, limits)
    assert counts == {"n-0": {"ebs.csi.aws.com": 3}, "n-1": {"ebs.csi.aws.com": 1}}
    assert attach_count(counts, limits) == [AttachCount("ebs.csi.aws.com", 3, 2, 1)]
    assert attach_count({}, limits) == [AttachCount("ebs.csi.aws.com", 0, 2, 0)]


def test_in_tree_volumes_count_only_on_nodes_with_a_csinode(perf_dir: Path) -> None:
    # kube's isCSIMigrationOn: an AWS EBS volume is the EBS CSI driver's where the Node has a
    # CSINode (SchedulingMigratedInTreePVs), and counted nowhere else (SchedulingInTreePVs).
    work = workload_yaml.load_workload(
        perf_dir / "volumes" / "performance-config.yaml", "SchedulingMigratedInTreePVs", "500Nodes"
    )
    strategy, volumes = work.nodes[0].allocatable, work.pods[0].volumes
    assert strategy is not None
    assert volumes is not None
    limits = node_limits([csinode_body("n-0", strategy)])
    pods, claims, pvs = _placed(volumes, "ns", {0: "n-0", 1: "n-0", 2: "n-1"})
    assert attached(pods, claims, pvs, limits) == {"n-0": {"ebs.csi.aws.com": 2}}
    assert attach_count(attached(pods, claims, pvs, limits), limits) == [
        AttachCount("ebs.csi.aws.com", 2, 39, 0)
    ]
    assert attached(pods, claims, pvs, {}) == {}


class _Writes:
    """Stands in for the API server: records each create and status write."""

    def __init__(self) -> None:
        self.made: Counter[tuple[str, str, str]] = Counter()

    async def create(self, resource: Any, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.made["POST", resource.plural, ""] += 1
        return body

    async def replace(self, resource: Any, name: str, body: Any, **kw: Any) -> dict[str, Any]:
        self.made["PUT", resource.plural, kw.get("subresource") or ""] += 1
        return dict(body)


def test_volumes_made_in_a_measured_phase_count_as_the_benchmarks_requests(
    perf_dir: Path,
) -> None:
    # EventHandlingPodDelete makes its nodevolumelimits pods' volumes inside its metrics window:
    # those writes must leave the scheduler's requests per pod.
    work = workload_yaml.load_workload(
        perf_dir / "event_handling" / "performance-config.yaml",
        "EventHandlingPodDelete",
        "50Nodes_500Pods",
    )
    (step,) = [s for s in work.pods if s.namespace == "nodevolumelimits"]
    assert step.volumes is not None
    kube, own = _Writes(), Counter[tuple[str, str, str]]()
    asyncio.run(create_volumes(cast(Any, kube), step.volumes, "nodevolumelimits", 5, own))
    assert kube.made == own
    assert own["POST", "persistentvolumes", ""] == own["PUT", "persistentvolumes", "status"] == 5
