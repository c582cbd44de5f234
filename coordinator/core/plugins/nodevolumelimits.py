"""NodeVolumeLimits, as kube-scheduler's (its CSI limits): a node takes no more volumes of a
CSI driver than its CSINode allows (``spec.drivers[].allocatable.count``); over the limit the
node is refused, ``Unschedulable`` "node(s) exceed max volume count".

Each of the pod's claims (``persistentVolumeClaim``, and a generic ephemeral volume's
``<pod>-<volume>``) is one volume of a driver: a bound PV's ``spec.csi`` driver and handle (an
in-tree AWS EBS, GCE PD, Cinder, Azure Disk or Portworx PV's as csi-translation-lib translates
it, :mod:`coordinator.core.podspec.intree`), else — unbound, or its PV not seen — the claim's
StorageClass's provisioner (an in-tree one as its CSI driver; ``kubernetes.io/azure-file`` and
``kubernetes.io/vsphere-volume`` are not counted, as kube's are not). On a node with a CSINode
the pod's inline in-tree volumes of those five plugins (``spec.volumes[].awsElasticBlockStore``
…) count too; one the translator refuses fails the Filter there with kube's error. The pods on
the node count the same way, a volume several pods use once, and the pod's volumes already
there are not new; the node's VolumeAttachments count each attached PV with ``spec.csi`` (by
attacher and handle) that no pod there uses, so a volume still attached after its pod ended
keeps its slot. A node without a CSINode, or a driver without a count, has no limit. A claim
the pod names that does not exist refuses it everywhere, ``UnschedulableAndUnresolvable``, with
kube's message.

Not done: ``VolumeLimitScaling``'s check that the driver is installed on the node (CSIDriver
``preventPodSchedulingIfMissing``), an alpha feature gate off by default in kube v1.36.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.intree import MIGRATED_DRIVERS, InlineVolume
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.snapshot.volumes import Claim, Volumes
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["MAX_VOLUME_COUNT_EXCEEDED", "NodeVolumeLimits"]

#: kube's ``ErrReasonMaxVolumeCountExceeded``.
MAX_VOLUME_COUNT_EXCEEDED: Final = "node(s) exceed max volume count"
_EXCEEDED: Final = Status.unschedulable(MAX_VOLUME_COUNT_EXCEEDED)
#: In-tree provisioners kube's plugin knows but does not count (their migration is "off").
_UNCOUNTED: Final = frozenset({"kubernetes.io/azure-file", "kubernetes.io/vsphere-volume"})
#: Stands for an unbound claim's volume handle, as kube's random prefix does: never a real one.
_UNBOUND: Final = "\x00unbound"


@dataclass(frozen=True, slots=True)
class _PodVolumes:
    volumes: Volumes
    #: the pod's claims' volumes: unique name (``driver/handle``) → driver
    new: dict[str, str]
    #: its inline in-tree volumes, counted where the node has a CSINode
    inline: dict[str, str]
    #: why the pod cannot be placed on a node with a CSINode (a claim missing, not its own,
    #: or an inline volume the translator refuses)
    refusal_with_csi_node: Status | None
    #: why it cannot be placed anywhere (a claim missing, not its own)
    refusal: Status | None


_KEY: Final = StateKey[_PodVolumes]("NodeVolumeLimits")


def _driver(volumes: Volumes, claim: Claim) -> tuple[str, str] | None:
    """``getCSIDriverInfo``: the driver and unique name of ``claim``'s volume (``None``: not
    counted). In-tree plugins count as migrated: only a node with a CSINode has limits."""
    pv = volumes.volume(claim.volume_name) if claim.volume_name else None
    if pv is not None:
        if pv.csi is None or not pv.csi[0] or not pv.csi[1]:
            return None
        return pv.csi[0], f"{pv.csi[0]}/{pv.csi[1]}"
    sc = volumes.storage_class(claim.storage_class) if claim.storage_class else None
    if sc is None or not sc.provisioner or sc.provisioner in _UNCOUNTED:
        return None
    driver = MIGRATED_DRIVERS.get(sc.provisioner, sc.provisioner)
    return driver, f"{driver}/{_UNBOUND}-{claim.namespace}/{claim.name}"


def _count(volumes: Volumes, pod: PodInfo, into: dict[str, str]) -> Status | None:
    """Add ``pod``'s volumes on a node with a CSINode to ``into``; kube's error for an inline
    volume the translator refuses."""
    for name in pod.volume_claims:
        claim = volumes.claim(pod.namespace, name)
        found = _driver(volumes, claim) if claim is not None else None
        if found is not None:
            into[found[1]] = found[0]
    return _count_inline(pod.inline_volumes, into)


def _count_pods(volumes: Volumes, pods: Iterable[PodInfo], into: dict[str, str]) -> Status | None:
    """:func:`_count` for each of ``pods``; kube's error for the first refused inline volume."""
    for pod in pods:
        if pod.volume_claims or pod.inline_volumes:
            error = _count(volumes, pod, into)
            if error is not None:
                return error
    return None


def _count_inline(volumes: Iterable[InlineVolume], into: dict[str, str]) -> Status | None:
    """Add the counted inline in-tree ``volumes`` to ``into`` (unique name → driver); kube's
    error for the first one the translator refuses."""
    for inline in volumes:
        if inline.error:
            return Status.error(inline.error)
        if inline.counted:
            into[f"{inline.driver}/{inline.handle}"] = inline.driver
    return None


@dataclass(frozen=True, slots=True)
class _NodeVolumes:
    """What a node's pods and VolumeAttachments hold, counted once per node and version of the
    volume objects (kept on the immutable :class:`NodeInfo`): most cycles find it there."""

    volumes: Volumes
    version: int
    used: dict[str, str]  # the node's pods' volumes: unique name → driver
    users: frozenset[str]  # the uids of the node's pods with volumes
    error: Status | None  # kube's error for the first inline volume the translator refuses
    attachments: dict[str, str]  # :func:`_attached`


_MEMO_KEY: Final = object()


def _node_volumes(volumes: Volumes, node: NodeInfo) -> _NodeVolumes:
    found = node.memo.get(_MEMO_KEY)
    if (
        isinstance(found, _NodeVolumes)
        and found.volumes is volumes
        and found.version == volumes.version
    ):
        return found
    used: dict[str, str] = {}
    error = _count_pods(volumes, node.pods, used)
    users = frozenset(p.uid for p in node.pods if p.volume_claims or p.inline_volumes)
    counted = _NodeVolumes(
        volumes, volumes.version, used, users, error, _attached(volumes, node.name)
    )
    node.memo[_MEMO_KEY] = counted
    return counted


def _attached(volumes: Volumes, node: str) -> dict[str, str]:
    """``getNodeVolumeAttachmentInfo``: the node's VolumeAttachments of a PV with ``spec.csi``,
    unique name (``attacher/handle``) → attacher."""
    out: dict[str, str] = {}
    for attachment in volumes.attachments(node):
        if not attachment.attacher or not attachment.volume:
            continue
        pv = volumes.volume(attachment.volume)
        if pv is None or pv.csi is None or pv.in_tree:
            continue
        out[f"{attachment.attacher}/{pv.csi[1]}"] = attachment.attacher
    return out


class NodeVolumeLimits(Plugin):
    name = "NodeVolumeLimits"

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if not pod.volume_claims and not pod.inline_volumes:
            return SKIP
        volumes = snapshot.volumes
        new: dict[str, str] = {}
        refusal: Status | None = None
        for ref in pod.volume_claims:
            claim = volumes.claim(pod.namespace, ref.name)
            if claim is None:
                refusal = Status.unresolvable(
                    f"looking up PVC {pod.namespace}/{ref.name}: "
                    f'persistentvolumeclaim "{ref.name}" not found'
                )
                break
            if ref.ephemeral and claim.owner_uid != pod.uid:
                refusal = Status.error(
                    f"PVC {claim.key} was not created for pod {pod.key} (pod is not owner)"
                )
                break
            found = _driver(volumes, claim)
            if found is not None:
                new[found[1]] = found[0]
        inline: dict[str, str] = {}
        inline_error = _count_inline(pod.inline_volumes, inline)
        if refusal is None and inline_error is None and not new and not inline:
            return SKIP
        state.write(_KEY, _PodVolumes(volumes, new, inline, refusal or inline_error, refusal))
        return SUCCESS

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        data = state.read(_KEY)
        csi_node = data.volumes.csi_node(node.name)
        if csi_node is None:  # in-tree volumes count only where the node has a CSINode
            return data.refusal or SUCCESS
        if data.refusal_with_csi_node is not None:
            return data.refusal_with_csi_node
        new = data.new | data.inline if data.inline else data.new
        if not new or not csi_node.limits:
            return SUCCESS
        held = _node_volumes(data.volumes, node)
        if pod.uid not in held.users:
            if held.error is not None:
                return held.error
            attached = held.used
        else:  # the pod is on the node already (preemption re-checks it): without it
            attached = {}
            others = (p for p in node.pods if p.uid != pod.uid)
            error = _count_pods(data.volumes, others, attached)
            if error is not None:
                return error
        limits = csi_node.limits
        counts: dict[str, int] = {}
        for unique, driver in new.items():
            if unique not in attached and driver in limits:
                counts[driver] = counts.get(driver, 0) + 1
        if not counts:
            return SUCCESS
        for driver in attached.values():
            if driver in counts:
                counts[driver] += 1
        for unique, driver in held.attachments.items():
            if driver in counts and unique not in attached:
                counts[driver] += 1
        if any(n > limits[d] for d, n in counts.items()):
            return _EXCEEDED
        return SUCCESS


PLUGIN: Final = PluginSpec[None](plugin=NodeVolumeLimits)
