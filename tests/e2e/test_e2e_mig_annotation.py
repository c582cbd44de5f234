"""End to end on the real control plane: MIG asked for by ``topos.io/mig-profile`` with
``nvidia.com/gpu`` (the README's alias), on nodes whose device plugin runs either MIG strategy.

Fleet: two one-GPU A100 40GB nodes from the ``a100-mig`` profile (3g.20gb + 2g.10gb + 1g.5gb),
labelled by the agent's own labelers. ``mig-mixed`` advertises its instances as
``nvidia.com/mig-<profile>`` (GFD/device plugin "mixed"); ``mig-single`` is labelled and advertises
as the "single" strategy does: every MIG device is an ``nvidia.com/gpu``.

Under "mixed" a pod asking for ``nvidia.com/gpu`` can only ever get a whole GPU from the kubelet,
so the annotation cannot turn it into a MIG instance there: the pod stays Pending with a message
naming the exact resource to ask for, and that request, made as told, binds with the instance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.kube import NODES, KubeClient
from devcluster.pods import gpu_pod
from tests.support.gpu_cluster import GpuCluster, Kubectl, assignment, describe

HOST = "kubernetes.io/hostname"
MIG_STRATEGY = "nvidia.com/mig.strategy"


async def mig_fleet(kube: KubeClient, kubeconfig: Path, namespace: str) -> GpuCluster:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("mig-mixed", "a100-mig")
    single = await cluster.add_node("mig-single", "a100-mig", labels_extra={MIG_STRATEGY: "single"})
    # What the device plugin advertises under "single": the three MIG devices as nvidia.com/gpu.
    node = await kube.get(NODES, single)
    devices = {"nvidia.com/gpu": "3"}
    for field in ("capacity", "allocatable"):
        kept = {k: v for k, v in node["status"][field].items() if not k.startswith("nvidia.com/")}
        node["status"][field] = {**kept, **devices}
    await kube.replace(NODES, single, node, subresource="status")
    return cluster


def _instance_uuid(cluster: GpuCluster, node: str, profile: str) -> str:
    (inst,) = [
        i for g in cluster.topologies[node].gpus for i in g.mig_instances if i.profile == profile
    ]
    assert inst.uuid
    return inst.uuid


def _on(name: str, node: str, **kw: Any) -> dict[str, Any]:
    return gpu_pod(name, 1, node_selector={HOST: node}, **kw)


async def test_mig_profile_annotation_by_strategy(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    cluster = await mig_fleet(kube, kubeconfig, namespace)
    mixed, single = sorted(cluster.topologies)
    alias = {"topos.io/mig-profile": "1g.5gb"}
    async with cluster.coordinator():
        # The README's alias on the "single" node: one MIG device of the annotated profile.
        await cluster.create(_on("alias-single", single, annotations=alias))
        on_single = await cluster.bound("alias-single")
        # The same pod on the "mixed" node: Pending, told exactly what to ask for.
        await cluster.create(_on("alias-mixed", mixed, annotations=alias))
        message = await cluster.unschedulable("alias-mixed")
        event = await cluster.warning("alias-mixed")
        # Asked for as told, on the mixed node: bound with the 1g.5gb instance.
        told = gpu_pod("as-told", 0, annotations=alias, node_selector={HOST: mixed})
        told["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.5gb": "1"}}
        await cluster.create(told)
        as_told = await cluster.bound("as-told")
    assert assignment(on_single)[:2] == (single, [_instance_uuid(cluster, single, "1g.5gb")])
    advice = (
        "1 node(s) run the mixed MIG strategy, where nvidia.com/gpu is a whole GPU: "
        "request nvidia.com/mig-1g.5gb: 1 instead of nvidia.com/gpu with topos.io/mig-profile"
    )
    assert advice in message, message
    assert "Insufficient nvidia.com/gpu" not in message
    assert advice in event["message"]
    assert advice in describe(kubectl, namespace, "alias-mixed")
    assert assignment(as_told)[:2] == (mixed, [_instance_uuid(cluster, mixed, "1g.5gb")])
