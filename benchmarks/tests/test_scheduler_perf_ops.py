"""scheduler_perf's DRA and churn ops as ``benchmarks/scheduler_perf.py`` reads them from upstream's
YAML (``createResourceDriver``, ``createAny``, ``churn`` in ``recreate`` mode), their refusals
of bad parameters, the churn loop's objects coming and going, and a quick DRA run: both
schedulers bind the claim pods and allocate their claims."""

from __future__ import annotations

import asyncio
import fnmatch
from pathlib import Path
from typing import Any, cast

import pytest

from benchmarks import scheduler_perf
from benchmarks import scheduler_perf_workload as workload_yaml
from benchmarks.kwok_cluster import parse_limits
from benchmarks.scheduler_perf_objects import (
    SERVICES,
    Churn,
    ResourceDriver,
    WorkloadError,
    resource_of,
    run_churn,
    slice_body,
)
from common.kube import NODES, PODS, KubeClient
from common.kube.resources import Resource
from devcluster.binaries import find


def test_dra_claim_template_case_is_read_from_upstream_yaml(perf_dir: Path) -> None:
    config = perf_dir / "dra" / "performance-config.yaml"
    work = workload_yaml.load_workload(
        config, "SchedulingWithResourceClaimTemplate", "5000pods_500nodes"
    )
    assert work.dra
    assert (work.node_count, work.measured_pods) == (500, 2500)
    assert work.drivers == (ResourceDriver("test-driver.cdi.k8s.io", "scheduler-perf-dra-*", 10),)
    assert [(o.template.render()["kind"], o.namespace) for o in work.objects] == [
        ("DeviceClass", None),
        ("ResourceClaimTemplate", "init"),
        ("ResourceClaimTemplate", "test"),
    ]
    assert [(s.count, s.measured, s.namespace) for s in work.pods] == [
        (2500, False, "init"),
        (2500, True, "test"),
    ]
    # The node template's generateName names the nodes, so the driver's pattern finds them.
    node, _ = scheduler_perf.node_body(work.nodes[-1].template.render(), 7)
    assert fnmatch.fnmatchcase(node["metadata"]["name"], work.drivers[0].nodes)
    pod = scheduler_perf.pod_body(work.pods[1].template.render(), "p-1", "topos")
    assert pod["spec"]["resourceClaims"] == [
        {"name": "resource", "resourceClaimTemplateName": "test-claim-template"}
    ]
    smaller = workload_yaml.load_workload(
        config, "SchedulingWithResourceClaimTemplate", "5000pods_500nodes", {"maxClaimsPerNode": 4}
    )
    assert smaller.drivers[0].max_claims_per_node == 4


def test_the_fake_driver_publishes_what_upstream_does() -> None:
    body = slice_body("test-driver.cdi.k8s.io", "scheduler-perf-dra-00003", 10)
    spec = body["spec"]
    assert body["metadata"]["name"] == spec["nodeName"] == "scheduler-perf-dra-00003"
    assert spec["pool"] == {
        "name": "scheduler-perf-dra-00003",
        "generation": 0,
        "resourceSliceCount": 1,
    }
    assert [d["name"] for d in spec["devices"]] == [f"instance-{i}" for i in range(10)]
    assert spec["devices"][3]["attributes"] == {
        "model": {"string": "A100"},
        "family": {"string": "GPU"},
        "driverVersion": {"version": "1.2.3"},
        "dra.example.com/numa": {"int": 3},
    }
    assert spec["devices"][3]["capacity"] == {"memory": {"value": "1Gi"}}


def test_mixed_churn_is_read_from_upstream_yaml(perf_dir: Path) -> None:
    work = workload_yaml.load_workload(
        perf_dir / "misc" / "performance-config.yaml", "SchedulingWithMixedChurn", "1000Nodes"
    )
    (churn,) = work.churn
    assert (churn.mode, churn.number, churn.interval_s) == ("recreate", 1, 1.0)
    assert [r.kind for _, r in churn.templates] == ["Node", "Pod", "Service"]
    assert churn.templates[1][0]["spec"]["priority"] == 10  # 9 CPUs: fits no 4-CPU node
    assert (work.node_count, work.measured_pods) == (1000, 1000)


def _case(tmp_path: Path, op: str, files: dict[str, str] | None = None) -> Path:
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    config = tmp_path / "performance-config.yaml"
    config.write_text(
        "- name: Case\n  workloadTemplate:\n"
        + op
        + "  - opcode: createPods\n    count: 1\n    collectMetrics: true\n"
        "    podTemplatePath: pod.yaml\n"
        "  workloads:\n  - name: w\n    params: {claims: 10, many: lots}\n"
    )
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n")
    return config


CLASS = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: c}\n"
TEMPLATE = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\n"
DEPLOYMENT = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"


@pytest.mark.parametrize(
    ("op", "files", "message"),
    [
        (
            "  - opcode: createResourceDriver\n    nodes: n-*\n    maxClaimsPerNode: 2\n",
            {},
            r"\[0\]\.driverName: None is not a driver name",
        ),
        (
            "  - opcode: createResourceDriver\n    driverName: d\n    maxClaimsPerNode: 2\n",
            {},
            r"\[0\]\.nodes: None is not a node name pattern",
        ),
        (
            "  - opcode: createResourceDriver\n    driverName: d\n    nodes: n-*\n"
            "    maxClaimsPerNodeParam: $perNode\n",
            {},
            r"maxClaimsPerNodeParam: '\$perNode' is not a parameter of this workload",
        ),
        (
            "  - opcode: createResourceDriver\n    driverName: d\n    nodes: n-*\n"
            "    maxClaimsPerNodeParam: $many\n",
            {},
            r"maxClaimsPerNodeParam \$many\.many: 'lots' is not an integer",
        ),
        (
            "  - opcode: createResourceDriver\n    driverName: d\n    nodes: n-*\n"
            "    maxClaimsPerNode: -1\n",
            {},
            r"\[0\]\.maxClaimsPerNode: -1 is not an integer ≥ 1",
        ),
        (
            "  - opcode: createAny\n",
            {},
            r"\[0\]\.templatePath: None is not a file",
        ),
        (
            "  - opcode: createAny\n    templatePath: class.yaml\n    namespace: init\n",
            {"class.yaml": CLASS},
            r"\[0\]\.namespace: 'init' set, but DeviceClass is cluster-scoped",
        ),
        (
            "  - opcode: createAny\n    templatePath: template.yaml\n",
            {"template.yaml": TEMPLATE},
            r"\[0\]\.namespace: not set, but ResourceClaimTemplate is namespaced",
        ),
        (
            "  - opcode: createAny\n    templatePath: deploy.yaml\n    namespace: x\n",
            {"deploy.yaml": DEPLOYMENT},
            r"\[0\]\.templatePath: kind apps/v1/Deployment is not one this runner creates",
        ),
        (
            "  - opcode: createAny\n    templatePath: class.yaml\n    countParam: $claims\n",
            {"class.yaml": CLASS},
            r"\[0\]\.count: 10: more than one object needs a templated file .*class\.yaml is not",
        ),
        (
            "  - opcode: churn\n    mode: recreate\n    templatePaths: [pod.yaml]\n",
            {},
            r"\[0\]\.number: 0 in mode 'recreate'",
        ),
        (
            "  - opcode: churn\n    mode: create\n    intervalMilliseconds: fast\n"
            "    templatePaths: [pod.yaml]\n",
            {},
            r"\[0\]\.intervalMilliseconds: 'fast' is not a positive integer",
        ),
        (
            "  - opcode: churn\n    mode: create\n    templatePaths: [deploy.yaml]\n",
            {"deploy.yaml": DEPLOYMENT},
            r"\[0\]\.templatePaths\[0\]: kind apps/v1/Deployment",
        ),
        (
            "  - opcode: churn\n    mode: create\n",
            {},
            r"\[0\]\.templatePaths: \[\]: give at least one file",
        ),
    ],
)
def test_bad_op_parameters_are_named(
    tmp_path: Path, op: str, files: dict[str, str], message: str
) -> None:
    config = _case(tmp_path, op, files)
    with pytest.raises(WorkloadError, match=message):
        workload_yaml.load_workload(config, "Case", "w")


class _Recorder:
    """Stands in for the API server: names generated objects, records creates and deletes, and
    stops the churn after ``calls`` creates and deletes."""

    def __init__(self, stop: asyncio.Event, calls: int) -> None:
        self.stop, self.left = stop, calls
        self.log: list[tuple[str, str, str, str | None]] = []
        self.bodies: list[dict[str, Any]] = []

    def _count(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.stop.set()

    async def create(
        self, resource: Resource, body: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        name = f"{body['metadata']['generateName']}{len(self.log)}"
        self.log.append(("create", resource.kind, name, namespace))
        self.bodies.append(body)
        self._count()
        return {"metadata": {"name": name}}

    async def delete(self, resource: Resource, name: str, *, namespace: str | None = None) -> None:
        self.log.append(("delete", resource.kind, name, namespace))
        self._count()


def test_recreate_churn_creates_then_deletes_and_leaves_nothing_behind() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"generateName": "node-churn-"}}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "pod-h-"},
        "spec": {"priority": 10},
    }
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"generateName": "svc-"}}
    churn = Churn(((node, NODES), (pod, PODS), (service, SERVICES)), 0.001, "recreate", 1)

    async def go() -> tuple[_Recorder, int]:
        stop = asyncio.Event()
        fake = _Recorder(stop, 9)  # create, delete, create: three ticks of three objects
        made = await run_churn(cast(KubeClient, fake), churn, "churn-ns", "topos", stop)
        return fake, made

    fake, made = asyncio.run(go())
    assert made == 6
    assert [(verb, kind) for verb, kind, _, _ in fake.log] == [
        ("create", "Node"),
        ("create", "Pod"),
        ("create", "Service"),
        ("delete", "Node"),
        ("delete", "Pod"),
        ("delete", "Service"),
        ("create", "Node"),
        ("create", "Pod"),
        ("create", "Service"),
        # stopped: what is left goes, but the pod (the turn's clean-up deletes its namespace's)
        ("delete", "Node"),
        ("delete", "Service"),
    ]
    assert fake.log[3][2] == fake.log[0][2]  # the one it created
    assert {ns for _, kind, _, ns in fake.log if kind == "Node"} == {None}  # cluster-scoped
    assert {ns for _, kind, _, ns in fake.log if kind != "Node"} == {"churn-ns"}
    assert fake.bodies[1]["spec"] == {"priority": 10, "schedulerName": "topos"}


def test_quick_dra_run_binds_claim_pods_and_allocates_their_claims(perf_dir: Path) -> None:
    found = find(extra=True)
    if found is None or found.kwok is None or found.kube_scheduler is None:
        pytest.skip("kwok / kube-scheduler not built (python -m devcluster.binaries ensure --all)")
    if found.kube_controller_manager is None:
        pytest.skip("kube-controller-manager not built (its resourceclaim controller is needed)")
    workload = workload_yaml.load_workload(
        perf_dir / "dra" / "performance-config.yaml", "SchedulingWithResourceClaimTemplate", "fast"
    )
    runs = asyncio.run(
        scheduler_perf.bench(
            workload,
            limit=parse_limits("unlimited")[0],
            order=["kube-scheduler", "topos"],
            timeout_s=120,
        )
    )
    assert [r.scheduler for r in runs] == ["kube-scheduler", "topos"]
    for run in runs:
        assert not run.timed_out
        assert len(run.bound) == 10
        assert run.claims_allocated == 10  # each pod's claim: allocated and reserved for it
        assert run.requests["POST", "pods", "binding"] == 10
        assert ("POST", "resourceclaims", "") not in run.requests  # the controller's, not theirs


def test_another_version_of_a_known_kind_is_created_at_the_version_its_file_names() -> None:
    beta = resource_of({"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceClass"}, "f")
    assert beta.path(name="c") == "/apis/resource.k8s.io/v1beta2/deviceclasses/c"
    with pytest.raises(WorkloadError, match="kind apps/v1/Deployment is not one this runner"):
        resource_of({"apiVersion": "apps/v1", "kind": "Deployment"}, "f")


def test_publish_resource_slices_is_refused_naming_what_it_times(perf_dir: Path) -> None:
    # Upstream's PublishResourceSlices schedules no pod: it times createResourceDriver until
    # the in-process scheduler's informer holds every slice. A run would print an empty phase.
    config = perf_dir / "dra" / "performance-config.yaml"
    with pytest.raises(
        WorkloadError,
        match=r"PublishResourceSlices\.workloadTemplate\[3\]: createResourceDriver inside "
        r"startCollectingMetrics .* informer holds every one",
    ):
        workload_yaml.load_workload(config, "PublishResourceSlices", "500nodes")


def test_a_metrics_window_that_counts_no_pod_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {type: other}}\n"
    )
    config = tmp_path / "performance-config.yaml"
    config.write_text(
        "- name: Case\n  workloadTemplate:\n"
        "  - opcode: startCollectingMetrics\n    namespaces: [measured]\n"
        "    labelSelector: {type: unsched}\n"
        "  - opcode: createPods\n    count: 3\n    namespace: measured\n"
        "    podTemplatePath: pod.yaml\n"
        "  - opcode: stopCollectingMetrics\n"
        "  workloads:\n  - name: w\n"
    )
    with pytest.raises(
        WorkloadError,
        match=r"Case/w: startCollectingMetrics \(namespaces \['measured'\]\) counts no pod",
    ):
        workload_yaml.load_workload(config, "Case", "w")
