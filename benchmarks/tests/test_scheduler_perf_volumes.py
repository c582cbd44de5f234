"""scheduler_perf's persistent volumes as ``benchmarks/scheduler_perf.py`` reads and makes them:
a createPods op's volume and claim templates (a bound pair per pod, the pod naming its claim),
createNodes' ``nodeAllocatableStrategy`` (allocatable entries, a CSINode per Node), and their
refusals of bad parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scheduler_perf
from benchmarks import scheduler_perf_workload as workload_yaml
from benchmarks.scheduler_perf_objects import WorkloadError
from benchmarks.scheduler_perf_volumes import (
    MIGRATED_PLUGINS,
    csinode_body,
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
