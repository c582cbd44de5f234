"""Pods with PersistentVolumeClaims on the real control plane (kube-apiserver, etcd and
kube-controller-manager's PV binder): a pod follows its bound local PV to its node; an unbound
WaitForFirstConsumer claim is bound to a matching local PV on the pod's node (the PV gets the
``claimRef``, the PV controller completes the binding) or, with a provisioner, gets
``volume.kubernetes.io/selected-node`` (the PV controller then hands it to the provisioner) —
both before the pod's Binding; a pod naming a missing claim stays Pending with a
``FailedScheduling`` Event naming the claim, and is placed once the claim exists; a pod over its
node's CSINode volume limit stays Pending with kube's reason until a pod with a volume there is
deleted, or until the VolumeAttachment of a volume no pod uses any more (still attached) is
deleted."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from common.kube import PODS, KubeClient, NotFound
from coordinator.adapters.kube.volumes import (
    CSI_NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    VOLUME_ATTACHMENTS,
)
from devcluster.kube_wait import wait_for, wait_for_object
from devcluster.pods import pod
from tests.support.gpu_cluster import GpuCluster
from tests.support.volumes import EBS, attachment, claim, csi_node, local_pv, pv, storage_class

SELECTED_NODE = "volume.kubernetes.io/selected-node"
NVME = "topos-e2e/nvme"


def pvc(name: str, cls: str, namespace: str, *, volume: str = "") -> Any:
    return claim(name, cls=cls, volume=volume, namespace=namespace)


def wffc_class(name: str, provisioner: str, *, only: str = "") -> Any:
    """A WaitForFirstConsumer class; ``only``: the one value of ``NVME`` its volumes reach."""
    zones = (only,) if only else ()
    return storage_class(name, provisioner=provisioner, zones=zones, topology_key=NVME)


def with_claim(name: str, claim_name: str, namespace: str) -> Any:
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return pod(name, namespace=namespace, spec={"volumes": volumes})


async def claim_where(
    kube: KubeClient, namespace: str, name: str, done: Any, what: str
) -> dict[str, Any]:
    return await wait_for_object(
        kube, PERSISTENT_VOLUME_CLAIMS, name, done, namespace=namespace, what=what
    )


async def test_a_pod_follows_its_bound_local_volume_to_its_node(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("a", "dgx-h100")
    b = await cluster.add_node("b", "dgx-h100")
    await kube.create(
        PERSISTENT_VOLUMES,
        local_pv(f"pv-{cluster.run}", b, cls="local", claim_ref=("data", ""), namespace=namespace),
    )
    await kube.create(
        PERSISTENT_VOLUME_CLAIMS,
        pvc("data", "local", namespace, volume=f"pv-{cluster.run}"),
        namespace=namespace,
    )
    # the PV controller completes the binding (bind-completed), which VolumeBinding waits for
    await claim_where(
        kube, namespace, "data", lambda c: c.get("status", {}).get("phase") == "Bound", "data bound"
    )
    async with cluster.coordinator():
        await cluster.create(with_claim("p", "data", namespace))
        assert (await cluster.bound("p"))["spec"]["nodeName"] == b


async def test_a_waiting_claim_takes_a_local_pv_on_the_pods_node(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    a = await cluster.add_node("a", "dgx-h100")
    await cluster.add_node("b", "dgx-h100")
    cls = f"local-{cluster.run}"
    await kube.create(STORAGE_CLASSES, wffc_class(cls, "kubernetes.io/no-provisioner"))
    await kube.create(PERSISTENT_VOLUMES, local_pv(f"pv-{cluster.run}", a, cls=cls))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, pvc("data", cls, namespace), namespace=namespace)
    async with cluster.coordinator():
        await cluster.create(with_claim("p", "data", namespace))
        assert (await cluster.bound("p"))["spec"]["nodeName"] == a
    pv = await kube.get(PERSISTENT_VOLUMES, f"pv-{cluster.run}")
    assert (pv["spec"]["claimRef"]["namespace"], pv["spec"]["claimRef"]["name"]) == (
        namespace,
        "data",
    )
    bound = await claim_where(
        kube,
        namespace,
        "data",
        lambda c: c["spec"].get("volumeName"),
        "the PV controller to bind data",
    )
    assert bound["spec"]["volumeName"] == f"pv-{cluster.run}"


async def test_a_waiting_claim_gets_the_selected_node_before_the_binding(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("a", "dgx-h100")
    b = await cluster.add_node("b", "dgx-h100", labels_extra={NVME: cluster.run})
    cls = f"nvme-{cluster.run}"
    provisioner = "example.com/nvme"
    await kube.create(STORAGE_CLASSES, wffc_class(cls, provisioner, only=cluster.run))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, pvc("data", cls, namespace), namespace=namespace)
    async with cluster.coordinator():
        await cluster.create(with_claim("p", "data", namespace))
        assert (await cluster.bound("p"))["spec"]["nodeName"] == b
    claim = await kube.get(PERSISTENT_VOLUME_CLAIMS, "data", namespace=namespace)
    assert claim["metadata"]["annotations"][SELECTED_NODE] == b
    # the PV controller hands the claim to its (external) provisioner, which would make the PV
    await claim_where(
        kube,
        namespace,
        "data",
        lambda c: (
            (c["metadata"].get("annotations") or {}).get("volume.kubernetes.io/storage-provisioner")
            == provisioner
        ),
        "the PV controller to pass data to its provisioner",
    )


async def test_a_missing_claim_keeps_the_pod_pending_until_it_exists(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    await cluster.add_node("a", "dgx-h100")
    b = await cluster.add_node("b", "dgx-h100", labels_extra={NVME: cluster.run})
    cls = f"nvme-{cluster.run}"
    async with cluster.coordinator():
        await cluster.create(with_claim("p", "data", namespace))
        event = await cluster.warning("p")
        assert 'persistentvolumeclaim "data" not found' in event["message"]
        assert not (await cluster.pod("p"))["spec"].get("nodeName")
        await kube.create(STORAGE_CLASSES, wffc_class(cls, "example.com/nvme", only=cluster.run))
        await kube.create(
            PERSISTENT_VOLUME_CLAIMS, pvc("data", cls, namespace), namespace=namespace
        )
        assert (await cluster.bound("p"))["spec"]["nodeName"] == b


async def test_a_claim_deleted_and_made_again_under_its_name_lets_the_pod_run(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    """A user deletes the claim a pending pod names and applies it again: while it is being
    deleted the pod is told so; the claim goes (kube-controller-manager's pvc-protection
    controller removes its finalizer: no pod uses it), and the pod runs on the new one."""
    cluster = GpuCluster(kube, kubeconfig, namespace)
    a = await cluster.add_node("a", "dgx-h100")
    await cluster.add_node("b", "dgx-h100")
    cls = f"local-{cluster.run}"
    await kube.create(STORAGE_CLASSES, wffc_class(cls, "kubernetes.io/no-provisioner"))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, pvc("data", cls, namespace), namespace=namespace)
    async with cluster.coordinator():
        await cluster.create(with_claim("p", "data", namespace))
        event = await cluster.warning("p")  # no PV yet: nothing to bind on either node
        assert "didn't find available persistent volumes to bind" in event["message"]
        await kube.delete(PERSISTENT_VOLUME_CLAIMS, "data", namespace=namespace)
        await wait_for(
            kube,
            PERSISTENT_VOLUME_CLAIMS,
            lambda claims: True if not claims else None,
            namespace=namespace,
            name="data",
            what="the deleted claim gone",
        )
        await kube.create(PERSISTENT_VOLUMES, local_pv(f"pv-{cluster.run}", a, cls=cls))
        await kube.create(
            PERSISTENT_VOLUME_CLAIMS, pvc("data", cls, namespace), namespace=namespace
        )
        assert (await cluster.bound("p"))["spec"]["nodeName"] == a


async def bound_ebs_claims(
    kube: KubeClient, cluster: GpuCluster, namespace: str, *names: str
) -> None:
    """A claim per name, pre-bound to its own EBS CSI PV (handle: the name), once ``Bound``."""
    for name in names:
        volume = pv(f"pv-{name}-{cluster.run}", {"csi": {"driver": EBS, "volumeHandle": name}})
        volume["spec"]["claimRef"] = {"namespace": namespace, "name": name}
        await kube.create(PERSISTENT_VOLUMES, volume)
        made = pvc(name, "local", namespace, volume=f"pv-{name}-{cluster.run}")
        await kube.create(PERSISTENT_VOLUME_CLAIMS, made, namespace=namespace)
        await claim_where(
            kube, namespace, name, lambda c: c.get("status", {}).get("phase") == "Bound", name
        )


async def test_a_pod_over_the_nodes_volume_limit_waits_for_a_volume_to_go(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    a = await cluster.add_node("a", "dgx-h100")
    b = await cluster.add_node("b", "dgx-h100")
    await bound_ebs_claims(kube, cluster, namespace, "one", "two")
    await kube.create(CSI_NODES, csi_node(a, ebs=1))
    await kube.create(CSI_NODES, csi_node(b, ebs=0))
    try:
        async with cluster.coordinator():
            await cluster.create(with_claim("first", "one", namespace))
            assert (await cluster.bound("first"))["spec"]["nodeName"] == a
            await cluster.create(with_claim("second", "two", namespace))
            event = await cluster.warning("second")
            assert "2 node(s) exceed max volume count" in event["message"]
            await kube.delete(PODS, "first", namespace=namespace, grace_period_seconds=0)
            assert (await cluster.bound("second"))["spec"]["nodeName"] == a
    finally:
        for node in (a, b):
            await kube.delete(CSI_NODES, node)


async def test_a_volume_still_attached_holds_the_nodes_only_slot_until_detached(
    kube: KubeClient, kubeconfig: Path, namespace: str
) -> None:
    cluster = GpuCluster(kube, kubeconfig, namespace)
    a = await cluster.add_node("a", "dgx-h100")
    await bound_ebs_claims(kube, cluster, namespace, "old", "new")
    await kube.create(CSI_NODES, csi_node(a, ebs=1))
    # "old"'s pod has gone; its volume is still attached to the node (the detach is to come)
    detach = f"va-{cluster.run}"
    await kube.create(VOLUME_ATTACHMENTS, attachment(detach, a, f"pv-old-{cluster.run}"))
    try:
        async with cluster.coordinator():
            await cluster.create(with_claim("p", "new", namespace))
            event = await cluster.warning("p")
            assert "0/1 nodes are available: 1 node(s) exceed max volume count" in event["message"]
            await kube.delete(VOLUME_ATTACHMENTS, detach)
            assert (await cluster.bound("p"))["spec"]["nodeName"] == a
    finally:
        await kube.delete(CSI_NODES, a)
        with contextlib.suppress(NotFound):  # the test failed before deleting it
            await kube.delete(VOLUME_ATTACHMENTS, detach)
