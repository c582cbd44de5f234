"""NodeVolumeLimits and in-tree volumes, as kube-scheduler v1.36 counts them through
csi-translation-lib: a PV of the AWS EBS, GCE PD, Cinder, Azure Disk or Portworx plugin counts
as its CSI driver's volume (the handle the translator makes, so the same disk through the CSI
driver counts once); Azure File, vSphere and volumes the translator refuses do not count. A
pod's inline in-tree volumes count on a node with a CSINode; one the translator refuses fails
the Filter there with kube's error."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.plugins.nodevolumelimits import MAX_VOLUME_COUNT_EXCEEDED
from coordinator.core.podspec.intree import inline_source, inline_volumes
from coordinator.core.snapshot.nodeinfo import NodeInfo
from devcluster.pods import pod
from tests.coordinator.core.test_sched_volume_limits import node_with, schedule, store, with_claims
from tests.support.outcomes import decided, refused
from tests.support.sched_hw import plain_node
from tests.support.volumes import EBS, claim, csi_node, csi_volume, pv

GCE = "pd.csi.storage.gke.io"
ZONE_LABEL = "topology.kubernetes.io/zone"

#: (in-tree source, PV labels, its CSI driver, the handle csi-translation-lib makes of it)
COUNTED: list[tuple[dict[str, Any], dict[str, str], str, str]] = [
    (
        {"gcePersistentDisk": {"pdName": "d1"}},
        {},
        GCE,
        "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/d1",
    ),
    (
        {"gcePersistentDisk": {"pdName": "d1"}},
        {ZONE_LABEL: "us-central1-a"},
        GCE,
        "projects/UNSPECIFIED/zones/us-central1-a/disks/d1",
    ),
    (
        {"gcePersistentDisk": {"pdName": "d1"}},
        {"failure-domain.beta.kubernetes.io/zone": "us-central1-a__us-central1-b"},
        GCE,
        "projects/UNSPECIFIED/regions/us-central1/disks/d1",
    ),
    ({"cinder": {"volumeID": "c1"}}, {}, "cinder.csi.openstack.org", "c1"),
    (
        {"azureDisk": {"diskName": "a1", "diskURI": "/subs/s/disks/a1", "kind": "Managed"}},
        {},
        "disk.csi.azure.com",
        "/subs/s/disks/a1",
    ),
    ({"portworxVolume": {"volumeID": "px1"}}, {}, "pxd.portworx.com", "px1"),
]


def in_tree(name: str, source: dict[str, Any], labels: dict[str, str]) -> list[dict[str, Any]]:
    """Claim ``name`` bound to PV ``pv-<name>`` of in-tree ``source``."""
    volume = pv(f"pv-{name}", source)
    volume["metadata"]["labels"] = labels
    return [claim(name, volume=f"pv-{name}", bound=True), volume]


def with_inline(
    name: str, *sources: dict[str, Any], claims: tuple[str, ...] = ()
) -> dict[str, Any]:
    vols = [{"name": f"data{i}", **source} for i, source in enumerate(sources)]
    vols += [
        {"name": f"c{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    return pod(name, uid=f"uid-{name}", spec={"volumes": vols})


@pytest.mark.parametrize(("source", "labels", "driver", "handle"), COUNTED)
def test_an_in_tree_pv_counts_as_its_csi_drivers_volume(
    source: dict[str, Any], labels: dict[str, str], driver: str, handle: str
) -> None:
    volumes = store(
        in_tree("old", source, labels),
        *csi_volume("same", handle=handle, driver=driver),  # the same disk through CSI
        *csi_volume("new", driver=driver),
        csi_node("node-a", **{driver: 1}),
    )
    nodes = [node_with("node-a", with_claims("x", "old"))]
    failure = refused(schedule(with_claims("p", "new"), nodes, volumes))
    assert failure.message == f"0/1 nodes are available: 1 {MAX_VOLUME_COUNT_EXCEEDED}."
    assert decided(schedule(with_claims("p", "same"), nodes, volumes)).node == "node-a"


@pytest.mark.parametrize(
    ("source", "labels", "driver"),
    [
        (
            {"azureDisk": {"diskName": "a1", "diskURI": "u", "kind": "Shared"}},
            {},
            "disk.csi.azure.com",
        ),
        ({"azureFile": {"secretName": "s", "shareName": "f"}}, {}, "file.csi.azure.com"),
        ({"vsphereVolume": {"volumePath": "[ds] v.vmdk"}}, {}, "csi.vsphere.vmware.com"),
        (  # zones of two regions: the translator refuses it
            {"gcePersistentDisk": {"pdName": "d1"}},
            {ZONE_LABEL: "us-central1-a__europe-west1-b"},
            GCE,
        ),
        ({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/bad"}}, {}, EBS),
    ],
)
def test_in_tree_pvs_kube_does_not_translate_are_not_counted(
    source: dict[str, Any], labels: dict[str, str], driver: str
) -> None:
    volumes = store(
        in_tree("old", source, labels),
        *csi_volume("new", driver=driver),
        csi_node("node-a", **{driver: 1}),
    )
    nodes = [node_with("node-a", with_claims("x", "old"))]
    assert decided(schedule(with_claims("p", "new"), nodes, volumes)).node == "node-a"


def test_an_inline_in_tree_volume_counts_where_the_node_has_a_csinode() -> None:
    ebs = {"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-1"}}
    volumes = store(
        *csi_volume("a1"),
        *csi_volume("same", handle="vol-1"),
        csi_node("node-a", ebs=1),
    )
    holder = node_with("node-a", with_claims("x", "a1"))
    assert (
        decided(schedule(with_inline("p", ebs), [holder, plain_node("node-b")], volumes)).node
        == "node-b"
    )
    failure = refused(schedule(with_inline("p", ebs), [holder], volumes))
    assert failure.message == f"0/1 nodes are available: 1 {MAX_VOLUME_COUNT_EXCEEDED}."
    # a pod there with the disk inline holds the slot; the same disk again is not new
    inline_holder = node_with("node-a", with_inline("x", ebs))
    assert decided(schedule(with_inline("p", ebs), [inline_holder], volumes))
    assert decided(schedule(with_claims("p", "same"), [inline_holder], volumes))
    refused(schedule(with_claims("p", "a1"), [inline_holder], volumes))
    other = {"awsElasticBlockStore": {"volumeID": "vol-2"}}
    refused(schedule(with_inline("p", other), [inline_holder], volumes))


@pytest.mark.parametrize(("source", "labels", "driver", "handle"), COUNTED[:1] + COUNTED[3:])
def test_inline_volumes_of_each_migrated_plugin_count(
    source: dict[str, Any], labels: dict[str, str], driver: str, handle: str
) -> None:
    volumes = store(
        *csi_volume("same", handle=handle, driver=driver),
        *csi_volume("new", driver=driver),
        csi_node("node-a", **{driver: 1}),
    )
    nodes = [node_with("node-a", with_inline("x", source))]
    refused(schedule(with_claims("p", "new"), nodes, volumes))
    assert decided(schedule(with_claims("p", "same"), nodes, volumes))


@pytest.mark.parametrize(
    "source",
    [s for s, *_ in COUNTED[:1] + COUNTED[3:]] + [{"awsElasticBlockStore": {"volumeID": "vol-1"}}],
)
def test_an_inline_volume_written_again_from_its_translation_reads_back_the_same(
    source: dict[str, Any],
) -> None:
    """A running pod's inline volume written again from what Topos keeps of it (a copy of the
    cluster for the forecast) counts as the same volume of the same driver."""
    (kept,) = inline_volumes({"volumes": [{"name": "data", **source}]})
    again = inline_source(kept)
    assert again is not None
    assert inline_volumes({"volumes": [again]}) == (kept,)


def test_inline_azure_file_and_vsphere_volumes_are_not_counted() -> None:
    volumes = store(
        *csi_volume("new", driver="file.csi.azure.com"),
        csi_node("node-a", **{"file.csi.azure.com": 0, "csi.vsphere.vmware.com": 0}),
    )
    azure_file = {"azureFile": {"secretName": "s", "shareName": "f"}}
    vsphere = {"vsphereVolume": {"volumePath": "[ds] v.vmdk"}}
    node = [plain_node("node-a")]
    assert decided(schedule(with_inline("p", azure_file, vsphere), node, volumes))
    refused(schedule(with_claims("p", "new"), node, volumes))  # the limit is there


def _nodes(*names: str) -> list[NodeInfo]:
    return [plain_node(n) for n in names]


def test_an_inline_volume_kube_cannot_translate_fails_on_nodes_with_a_csinode() -> None:
    bad = {"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/bad"}}
    volumes = store(csi_node("node-a"))  # a CSINode, no limit
    failure = refused(schedule(with_inline("p", bad), _nodes("node-a", "node-b"), volumes))
    assert failure.message.startswith('running "NodeVolumeLimits" filter plugin: ')
    assert failure.message.endswith(  # kube's error
        ": converting volume(data0) from inline to csi: failed to translate Kubernetes ID to "
        "EBS Volume ID Invalid format for AWS volume (aws://us-east-1a/bad)"
    )
    assert decided(schedule(with_inline("p", bad), _nodes("node-b"), volumes))  # no CSINode
    shared = {"azureDisk": {"diskName": "a1", "diskURI": "u", "kind": "Shared"}}
    failure = refused(schedule(with_inline("p", shared), _nodes("node-a"), volumes))
    assert failure.message.endswith(
        ": converting volume(data0) from inline to csi: kind(Shared) is not supported in csi "
        "migration"
    )


def test_a_pod_there_with_an_inline_volume_kube_cannot_translate_fails_the_filter() -> None:
    bad = {"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/bad"}}
    volumes = store(*csi_volume("new"), csi_node("node-a", ebs=5))
    nodes = [node_with("node-a", with_inline("x", bad))]
    failure = refused(schedule(with_claims("p", "new"), nodes, volumes))
    assert failure.message.startswith('running "NodeVolumeLimits" filter plugin: ')
    assert ": converting volume(data0) from inline to csi: " in failure.message
    assert decided(schedule(pod("p", uid="uid-p"), nodes, volumes))  # no volume: not looked at
