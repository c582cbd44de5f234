"""NodeVolumeLimits: a node takes no more volumes of a CSI driver than its CSINode allows, as
kube-scheduler's: the pods already there count each volume once, a VolumeAttachment whose pod
has gone still holds its slot, a generic ephemeral volume counts, an in-tree AWS EBS volume and
an unbound claim's provisioner count as their CSI driver, a node without a CSINode has no limit,
and a KubeSchedulerConfiguration may turn the plugin off. (In-tree volumes of other plugins and
inline ones: test_sched_volume_limits_intree.py.)"""

from __future__ import annotations

from typing import Any

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.plugins.nodevolumelimits import MAX_VOLUME_COUNT_EXCEEDED
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.snapshot.volumes import Volumes
from devcluster.pods import pod
from tests.support.outcomes import decided, refused
from tests.support.sched_hw import bound_info, plain_node
from tests.support.volumes import (
    EBS,
    attachment,
    claim,
    csi_node,
    csi_volume,
    pv,
    storage_class,
)


def with_claims(name: str, *claims: str) -> dict[str, Any]:
    vols = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    return pod(name, uid=f"uid-{name}", spec={"volumes": vols})


def store(*objs: dict[str, Any] | list[dict[str, Any]]) -> Volumes:
    out = Volumes()
    for obj in objs:
        for one in obj if isinstance(obj, list) else [obj]:
            out.put(one["kind"], one)
    return out


def node_with(name: str, *pods: dict[str, Any]) -> NodeInfo:
    infos = []
    for obj in pods:
        info = bound_info(obj, node=name)
        assert info is not None
        infos.append(info)
    return plain_node(name).rebuild(tuple(infos))


def schedule(obj: dict[str, Any], nodes: list[NodeInfo], volumes: Volumes, **kw: Any) -> object:
    return schedule_one(obj, Snapshot(nodes, volumes=volumes), build_framework(**kw))


def test_a_node_at_its_drivers_limit_is_refused_with_kubes_reason() -> None:
    objs = [
        *(csi_volume(n) for n in ("a1", "a2", "b1", "new", "new2")),
        csi_node("node-a", ebs=2),
        csi_node("node-b", ebs=2),
    ]
    volumes = store(*objs)
    nodes = [
        node_with("node-a", with_claims("x", "a1", "a2")),
        node_with("node-b", with_claims("y", "b1")),
    ]
    failure = refused(schedule(with_claims("p", "new"), nodes[:1], volumes))
    assert failure.message == f"0/1 nodes are available: 1 {MAX_VOLUME_COUNT_EXCEEDED}."
    assert not failure.unresolvable  # Unschedulable, as kube's: freeing a volume lifts it
    # node-b has room for one more
    assert decided(schedule(with_claims("p", "new"), nodes, volumes)).node == "node-b"
    # two new volumes do not fit where one more is allowed
    assert refused(schedule(with_claims("p", "new", "new2"), nodes[1:], volumes))


def test_a_volume_already_on_the_node_does_not_count_twice() -> None:
    volumes = store(
        *(csi_volume(n) for n in ("a1", "a2")),
        *csi_volume("alias", handle="a2"),  # another PV of the same disk
        csi_node("node-a", ebs=2),
    )
    nodes = [node_with("node-a", with_claims("x", "a1"), with_claims("y", "a1", "a2"))]
    # two pods share a1: the node holds 2 volumes, not 3, and the pod's a1 is not new
    assert decided(schedule(with_claims("p", "a1", "a2"), nodes, volumes)).node == "node-a"
    assert decided(schedule(with_claims("p", "alias"), nodes, volumes)).node == "node-a"


def test_no_csinode_or_no_count_means_no_limit_and_other_drivers_do_not_count() -> None:
    held = [csi_volume(f"v{i}") for i in range(5)]
    volumes = store(
        *held,
        *csi_volume("new"),
        *csi_volume("other", driver="pd.csi.storage.gke.io"),
        *csi_volume("other2", driver="pd.csi.storage.gke.io"),
        csi_node("node-b", ebs=None),
        csi_node("node-c", **{"pd.csi.storage.gke.io": 1}),
    )
    crowded = with_claims("x", *(f"v{i}" for i in range(5)))
    for name in ("node-a", "node-b", "node-c"):  # no CSINode, no count, another driver's count
        nodes = [node_with(name, crowded)]
        assert decided(schedule(with_claims("p", "new"), nodes, volumes)).node == name
    nodes = [node_with("node-c", with_claims("y", "other"))]
    refused(schedule(with_claims("p", "other2"), nodes, volumes))


def test_an_in_tree_aws_ebs_volume_counts_as_the_ebs_csi_driver() -> None:
    in_tree = [
        claim("old", volume="pv-old", bound=True),
        pv("pv-old", {"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/vol-0123"}}),
    ]
    volumes = store(
        in_tree,
        *csi_volume("new"),
        *csi_volume("same", handle="vol-0123"),  # the same disk through the CSI driver
        csi_node("node-a", ebs=1),
    )
    nodes = [node_with("node-a", with_claims("x", "old"))]
    failure = refused(schedule(with_claims("p", "new"), nodes, volumes))
    assert MAX_VOLUME_COUNT_EXCEEDED in failure.message
    assert decided(schedule(with_claims("p", "same"), nodes, volumes)).node == "node-a"


def test_an_unbound_claim_counts_as_its_classes_provisioner() -> None:
    volumes = store(
        *csi_volume("a1"),
        claim("fresh", cls="gp3"),
        claim("legacy", cls="gp2"),
        storage_class("gp3", provisioner=EBS),
        storage_class("gp2", provisioner="kubernetes.io/aws-ebs"),
        csi_node("node-a", ebs=1),
    )
    nodes = [node_with("node-a", with_claims("x", "a1"))]
    for name in ("fresh", "legacy"):
        failure = refused(schedule(with_claims("p", name), nodes, volumes))
        assert MAX_VOLUME_COUNT_EXCEEDED in failure.message


def test_a_missing_claim_is_kubes_lookup_error_everywhere() -> None:
    volumes = store(csi_node("node-a", ebs=5))
    config = load_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"plugins": {"filter": {"disabled": [{"name": "VolumeBinding"}]}}}],
        }
    )
    failure = refused(
        schedule(
            with_claims("p", "gone"),
            [plain_node("node-a"), plain_node("node-b")],
            volumes,
            config=config,
        )
    )
    assert failure.unresolvable
    assert failure.message == (
        "0/2 nodes are available: 2 looking up PVC default/gone: "
        'persistentvolumeclaim "gone" not found.'
    )


def test_a_kube_profile_may_turn_the_limit_off() -> None:
    volumes = store(*csi_volume("a1"), *csi_volume("new"), csi_node("node-a", ebs=1))
    nodes = [node_with("node-a", with_claims("x", "a1"))]
    config = load_config(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"plugins": {"filter": {"disabled": [{"name": "NodeVolumeLimits"}]}}}],
        }
    )
    assert decided(schedule(with_claims("p", "new"), nodes, volumes, config=config))
    refused(schedule(with_claims("p", "new"), nodes, volumes))


def test_a_volume_still_attached_after_its_pod_left_holds_the_nodes_slot() -> None:
    volumes = store(
        *csi_volume("old"),
        *csi_volume("new"),
        csi_node("node-a", ebs=1),
        attachment("va-old", "node-a", "pv-old"),  # no pod uses it: detach still to come
    )
    failure = refused(schedule(with_claims("p", "new"), [plain_node("node-a")], volumes))
    assert failure.message == f"0/1 nodes are available: 1 {MAX_VOLUME_COUNT_EXCEEDED}."
    assert not failure.unresolvable
    volumes.remove("VolumeAttachment", "va-old")  # detached
    assert decided(schedule(with_claims("p", "new"), [plain_node("node-a")], volumes))


def test_an_attachment_counts_once_with_its_pod_and_only_for_a_csi_pv_of_its_node() -> None:
    volumes = store(
        *csi_volume("a1"),
        *csi_volume("new"),
        *csi_volume("more"),
        claim("old", volume="pv-old", bound=True),
        pv("pv-old", {"awsElasticBlockStore": {"volumeID": "vol-0123"}}),
        csi_node("node-a", ebs=2),
        attachment("va-a1", "node-a", "pv-a1"),  # x's own volume: counted once
        attachment("va-tree", "node-a", "pv-old"),  # an in-tree PV: kube counts only spec.csi
        attachment("va-inline", "node-a", ""),  # no PV named
        attachment("va-gone", "node-a", "pv-gone"),  # its PV not seen
        attachment("va-b", "node-b", "pv-new"),  # another node's
    )
    nodes = [node_with("node-a", with_claims("x", "a1"))]
    assert decided(schedule(with_claims("p", "new"), nodes, volumes)).node == "node-a"
    # another attacher's attachment does not count for the EBS driver ...
    volumes.put("VolumeAttachment", attachment("va-x", "node-a", "pv-more", attacher="other"))
    assert decided(schedule(with_claims("p", "new"), nodes, volumes))
    # ... one of a CSI PV no pod there uses fills the second slot
    volumes.put("VolumeAttachment", attachment("va-y", "node-a", "pv-more"))
    refused(schedule(with_claims("p", "new"), nodes, volumes))


def test_a_generic_ephemeral_volume_counts_as_its_claims_volume() -> None:
    owned = {"ownerReferences": [{"uid": "uid-p", "controller": True, "kind": "Pod", "name": "p"}]}
    volumes = store(
        *csi_volume("a1"),
        claim("p-scratch", volume="pv-p-scratch", bound=True, **owned),
        pv("pv-p-scratch", {"csi": {"driver": EBS, "volumeHandle": "scratch"}}),
        csi_node("node-a", ebs=1),
        csi_node("node-b", ebs=2),
    )
    nodes = [
        node_with("node-a", with_claims("x", "a1")),
        node_with("node-b", with_claims("y", "a1")),
    ]
    scratch = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    obj = pod("p", uid="uid-p", spec={"volumes": [scratch]})
    assert decided(schedule(obj, nodes, volumes)).node == "node-b"
    failure = refused(schedule(obj, nodes[:1], volumes))
    assert failure.message == f"0/1 nodes are available: 1 {MAX_VOLUME_COUNT_EXCEEDED}."


def test_the_nodes_count_follows_every_change_of_the_volume_objects() -> None:
    # The count of a node's volumes is kept between cycles: a change of the objects it was
    # counted from is seen by the next cycle on the very same node.
    volumes = store(*csi_volume("a1"), *csi_volume("new"), csi_node("node-a", ebs=1))
    nodes = [node_with("node-a", with_claims("x", "a1"))]
    refused(schedule(with_claims("p", "new"), nodes, volumes))
    # a1 turns out to be another driver's disk: the node's EBS slot is free
    volumes.put("PersistentVolume", csi_volume("a1", driver="pd.csi.storage.gke.io")[1])
    assert decided(schedule(with_claims("p", "new"), nodes, volumes)).node == "node-a"
    volumes.put("VolumeAttachment", attachment("va-old", "node-a", "pv-old"))
    volumes.put("PersistentVolume", pv("pv-old", {"csi": {"driver": EBS, "volumeHandle": "o"}}))
    refused(schedule(with_claims("p", "new"), nodes, volumes))  # attached, not yet detached
    volumes.remove("VolumeAttachment", "va-old")
    assert decided(schedule(with_claims("p", "new"), nodes, volumes)).node == "node-a"
