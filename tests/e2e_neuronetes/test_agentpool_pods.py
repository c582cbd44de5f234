"""End to end on the real control plane (kube-controller-manager's garbage collector included):
the NeuroNetes guide's AgentPools and ToolBindings apply as written, and its GPU pools become pods
that Topos places.

Fleet: three DGX A100 nodes (8 NVSwitch-joined GPUs each) and one A100 split into MIG instances,
labelled by the agent's own labelers; the coordinator with its gang runtime schedules the test's
namespace; the NeuroNetes controller serves the pools; the test plays the kubelet.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import yaml

from common.kube import PODS, KubeClient
from coordinator.adapters.kube.agentpools import AGENT_POOLS, PRIORITY_CLASSES
from coordinator.neuronetes.decide.hooks import CLEAN_ENERGY_GATE, PolicyContext
from devcluster.kube_wait import wait_for, wait_for_object, wait_for_pods
from tests.support.deploy import DEPLOY
from tests.support.gang_cluster import GangCluster
from tests.support.gpu_cluster import Kubectl, assignment
from tests.support.neuronetes import Kubelet, controller, guide_manifests, install_crds, shapes


def _apply(kubectl: Kubectl, namespace: str, docs: list[dict[str, Any]]) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump_all(docs, f)
        f.flush()
        done = kubectl("apply", "-n", namespace, "-f", f.name)
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def test_every_guide_manifest_applies_as_written(kubectl: Kubectl, namespace: str) -> None:
    install_crds(kubectl)
    docs = shapes()
    guide = guide_manifests()
    if guide is not None:  # the guide itself, when the shared folder is there
        assert {d["metadata"]["name"] for d in guide} <= {d["metadata"]["name"] for d in docs}
        assert len(guide) == 10
        out = _apply(kubectl, namespace, guide)
    else:
        out = _apply(kubectl, namespace, docs)
    assert "agentpool.neuronetes.io/tensor-parallel-pool created" in out
    assert "toolbinding.neuronetes.io/queue-binding created" in out
    listed = kubectl("get", "agentpools", "-n", namespace)
    assert listed.returncode == 0, listed.stderr
    header = listed.stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "DESIRED", "GPU", "TTFT", "AGE"]
    row = next(r for r in listed.stdout.splitlines() if r.startswith("tensor-parallel-pool"))
    assert "A100" in row.split()


def _pool_pods(pods: list[dict[str, Any]], pool: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if p["metadata"]["labels"].get("neuronetes.io/pool") == pool
        and not p["metadata"].get("deletionTimestamp")
    ]


async def _bound(
    kube: KubeClient, ns: str, pool: str, count: int, *, gone: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``count`` bound pods of ``pool`` (without ``gone``, which was replaced)."""
    old = gone["metadata"]["uid"] if gone else None

    def done(pods: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        mine = _pool_pods(pods, pool)
        if any(p["metadata"]["uid"] == old for p in mine):
            return None
        return mine if len(mine) == count and all(p["spec"].get("nodeName") for p in mine) else None

    return await wait_for_pods(
        kube, ns, done, label_selector=f"neuronetes.io/pool={pool}", what=f"{count} {pool} pods"
    )


async def _status(kube: KubeClient, ns: str, pool: str, check: Any) -> dict[str, Any]:
    return await wait_for_object(
        kube,
        AGENT_POOLS,
        pool,
        lambda obj: check(obj.get("status") or {}),
        namespace=ns,
        what=f"{pool} status",
    )


async def test_guide_gpu_pools_are_placed_scaled_and_deleted(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    cluster = GangCluster(kube, kubeconfig, namespace)
    for i in range(3):
        await cluster.add_node(f"dgx{i}", "dgx-a100")
    mig = await cluster.add_node("mig", "a100-mig")
    by_name = {d["metadata"]["name"]: d for d in shapes()}
    wanted = ["tensor-parallel-pool", "small-model-pool", "pipeline-parallel-pool"]
    async with (
        cluster.gang_coordinator(),
        controller(kubeconfig, namespace, cluster.run),
        Kubelet(kube, namespace),
    ):
        _apply(kubectl, namespace, [by_name[n] for n in wanted])
        (tp,) = await _bound(kube, namespace, "tensor-parallel-pool", 1)
        (small,) = await _bound(kube, namespace, "small-model-pool", 1)
        pipeline = await _bound(kube, namespace, "pipeline-parallel-pool", 4)

        # Tensor parallel: 8 NVLink-joined GPUs of one node, asked as the guide says.
        node, gpus, _ = assignment(tp)
        assert len(gpus) == 8
        assert node != mig
        assert tp["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
        ann = tp["metadata"]["annotations"]
        assert ann["topos.io/gpu-locality"] == "nvlink"  # minBandwidth 600Gi is beyond PCIe
        assert tp["spec"]["schedulerName"] == "topos-agentpools"  # the AgentPool profile
        terms = tp["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert terms == [
            {
                "matchExpressions": [
                    {"key": "neuronetes.io/gpu-type", "operator": "In", "values": ["A100"]}
                ]
            }
        ]
        (owner,) = tp["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["controller"]) == ("AgentPool", True)

        # Small model: one 1g.5gb MIG instance on the MIG node.
        assert small["spec"]["containers"][0]["resources"]["limits"] == {
            "nvidia.com/mig-1g.5gb": "1"
        }
        node, devices, _ = assignment(small)
        assert node == mig
        assert len(devices) == 1
        assert devices[0].startswith("MIG-")

        # Pipeline parallel: a gang of 4, each with 2 GPUs on one node, placed together.
        for pod in pipeline:
            labels = pod["metadata"]["labels"]
            assert labels["topos.io/gang"] == "pipeline-parallel-pool"
            assert labels["topos.io/gang-min"] == "4"
            assert len(assignment(pod)[1]) == 2
            sched = json.loads(pod["metadata"]["annotations"]["neuronetes.io/scheduling"])
            assert sched == {"gangScheduling": {"enabled": True, "minMembers": 4}}

        # The kubelet (played) makes them Ready: the status counts them.
        pool = await _status(
            kube, namespace, "pipeline-parallel-pool", lambda s: s.get("readyReplicas") == 4
        )
        status = pool["status"]
        assert status["desiredReplicas"] == 4
        ready = {c["type"]: c for c in status["conditions"]}["Ready"]
        assert ready["status"] == "True"

        # kubectl scale: one more tensor-parallel replica, on another node.
        done = kubectl("scale", "agentpool/tensor-parallel-pool", "--replicas=2", "-n", namespace)
        assert done.returncode == 0, done.stderr
        two = await _bound(kube, namespace, "tensor-parallel-pool", 2)
        assert len({p["spec"]["nodeName"] for p in two}) == 2
        # A spec edit back to one: the newer pod goes.
        await kube.patch(
            AGENT_POOLS, "tensor-parallel-pool", {"spec": {"replicas": 1}}, namespace=namespace
        )
        (kept,) = await _bound(kube, namespace, "tensor-parallel-pool", 1)
        assert kept["metadata"]["uid"] == tp["metadata"]["uid"]

        # A deleted pod is replaced; so is one whose server exited.
        await kube.delete(PODS, small["metadata"]["name"], namespace=namespace)
        (again,) = await _bound(kube, namespace, "small-model-pool", 1, gone=small)
        assert again["metadata"]["uid"] != small["metadata"]["uid"]
        name = again["metadata"]["name"]
        exited = {"status": {"phase": "Failed"}}
        await kube.patch(PODS, name, exited, namespace=namespace, subresource="status")
        await _bound(kube, namespace, "small-model-pool", 1, gone=again)

        # Deleting the pool deletes its pods (the garbage collector follows ownerReferences).
        done = kubectl("delete", "agentpool", "pipeline-parallel-pool", "-n", namespace)
        assert done.returncode == 0, done.stderr
        await wait_for(
            kube,
            PODS,
            lambda pods: True if not pods else None,
            namespace=namespace,
            label_selector="neuronetes.io/pool=pipeline-parallel-pool",
            what="the pipeline pool's pods gone",
        )


async def test_priority_class_per_pool(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    by_name = {d["metadata"]["name"]: d for d in shapes()}
    cluster = GangCluster(kube, kubeconfig, namespace)
    async with controller(kubeconfig, namespace, cluster.run):
        _apply(kubectl, namespace, [by_name["high-priority-pool"]])
        name = f"neuronetes-{namespace}-high-priority-pool"
        pods = await wait_for_pods(
            kube,
            namespace,
            lambda pods: pods or None,
            label_selector="neuronetes.io/pool=high-priority-pool",
            what="the pool's pod",
        )
        assert pods[0]["spec"]["priorityClassName"] == name
        assert pods[0]["spec"]["priority"] == 1000
        pc = await kube.get(PRIORITY_CLASSES, name)
        assert (pc["value"], pc["preemptionPolicy"]) == (1000, "PreemptLowerPriority")
        # Preemption turned off: the class is made again with preemptionPolicy Never.
        patch = {"spec": {"scheduling": {"preemption": {"enabled": False}}}}
        await kube.patch(AGENT_POOLS, "high-priority-pool", patch, namespace=namespace)
        await wait_for_object(
            kube,
            PRIORITY_CLASSES,
            name,
            lambda obj: obj.get("preemptionPolicy") == "Never",
            what="preemptionPolicy Never",
        )
        await kube.delete(AGENT_POOLS, "high-priority-pool", namespace=namespace)
        await wait_for(
            kube,
            PRIORITY_CLASSES,
            lambda items: True if not items else None,
            field_selector=f"metadata.name={name}",
            what="the pool's PriorityClass gone",
        )


def test_the_controllers_role_grants_what_it_does(kubectl: Kubectl, namespace: str) -> None:
    """deploy/neuronetes-rbac.yaml's ClusterRole, bound here to a ServiceAccount of this test
    (binding the real coordinator account would change what tests/deploy proves of it)."""
    install_crds(kubectl)
    docs = list(yaml.safe_load_all((DEPLOY / "neuronetes-rbac.yaml").read_text()))
    role, binding = docs
    binding["metadata"]["name"] = f"neuronetes-{namespace}"
    binding["subjects"] = [{"kind": "ServiceAccount", "name": "nn", "namespace": namespace}]
    _apply(kubectl, namespace, [role, binding])
    who = f"--as=system:serviceaccount:{namespace}:nn"
    allowed = [
        ("create", "pods"),
        ("delete", "pods"),
        ("patch", "agentpools.neuronetes.io"),
        ("patch", "agentpools.neuronetes.io/status"),
        ("patch", "toolbindings.neuronetes.io/status"),
        ("create", "priorityclasses.scheduling.k8s.io"),
        ("delete", "priorityclasses.scheduling.k8s.io"),
    ]
    for verb, resource in allowed:
        done = kubectl("auth", "can-i", verb, resource, who, "-n", namespace)
        assert done.stdout.strip() == "yes", (verb, resource, done.stderr)
    for verb, resource in [("delete", "agentpools.neuronetes.io"), ("get", "secrets")]:
        done = kubectl("auth", "can-i", verb, resource, who, "-n", namespace)
        assert done.stdout.strip() == "no", (verb, resource)


async def test_a_policy_holds_new_pods_with_a_gate_and_lifts_it_in_place(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    """The hook the carbon policy uses: while the window is shut the pool's pods are created
    behind ``neuronetes.io/clean-energy-window`` and Topos leaves them; once it opens the gate is
    lifted from the same pods, which are then placed."""
    install_crds(kubectl)
    cluster = GangCluster(kube, kubeconfig, namespace)
    await cluster.add_node("dgx", "dgx-a100")
    window = {"open": False}

    def clean_energy(ctx: PolicyContext) -> None:
        ctx.set_gate(CLEAN_ENERGY_GATE, held=not window["open"])

    by_name = {d["metadata"]["name"]: d for d in shapes()}
    async with (
        cluster.coordinator(),
        controller(kubeconfig, namespace, cluster.run, policies=[clean_energy]),
    ):
        _apply(kubectl, namespace, [by_name["green-pool"]])
        (held,) = await wait_for_pods(
            kube,
            namespace,
            lambda pods: pods or None,
            label_selector="neuronetes.io/pool=green-pool",
            what="the green pool's pod",
        )
        assert held["spec"]["schedulingGates"] == [{"name": CLEAN_ENERGY_GATE}]
        # kube's own wording stays on the held pod (Topos writes nothing for a gated pod)
        cond = next(
            c for c in held["status"].get("conditions") or () if c["type"] == "PodScheduled"
        )
        assert (cond["status"], cond["reason"]) == ("False", "SchedulingGated")
        assert not held["spec"].get("nodeName")
        window["open"] = True
        (placed,) = await _bound(kube, namespace, "green-pool", 1)
    assert placed["metadata"]["uid"] == held["metadata"]["uid"]
    assert not placed["spec"].get("schedulingGates")
