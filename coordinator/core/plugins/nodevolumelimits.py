"""NodeVolumeLimits, as kube-scheduler's (its CSI limits): a node takes no more volumes of a
CSI driver than its CSINode allows (``spec.drivers[].allocatable.count``); over the limit the
node is refused, ``Unschedulable`` "node(s) exceed max volume count".

Each of the pod's claims (``persistentVolumeClaim``, and a generic ephemeral volume's
``<pod>-<volume>``) is one volume of a driver: a bound PV's ``spec.csi`` driver and handle (an
in-tree AWS EBS PV's as ``ebs.csi.aws.com``, the volume ID its handle), else — unbound, or its
PV not seen — the claim's StorageClass's provisioner (an in-tree one as the CSI driver
csi-translation-lib names; ``kubernetes.io/azure-file`` and ``kubernetes.io/vsphere-volume``
are not counted, as kube's do not). The pods on the node count the same way, a volume several
pods use once, and the pod's volumes already there are not new. A node without a CSINode, or
a driver without a count, has no limit. A claim the pod names that does not exist refuses it
everywhere, ``UnschedulableAndUnresolvable``, with kube's message.

Not counted, unlike kube's: the node's VolumeAttachments (Topos does not watch them), inline
in-tree volumes of the pod (``awsElasticBlockStore`` in ``spec.volumes``), and in-tree PVs other
than AWS EBS (GCE PD, Cinder, Azure Disk, Portworx).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.snapshot.volumes import MIGRATED_DRIVERS, Claim, Volumes
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
    #: the pod's volumes: unique name (``driver/handle``) → driver
    new: dict[str, str]
    #: why the pod cannot be placed anywhere (a claim missing, not its own)
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


def _count(volumes: Volumes, namespace: str, claims: Iterable[str], into: dict[str, str]) -> None:
    for name in claims:
        claim = volumes.claim(namespace, name)
        found = _driver(volumes, claim) if claim is not None else None
        if found is not None:
            into[found[1]] = found[0]


class NodeVolumeLimits(Plugin):
    name = "NodeVolumeLimits"

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if not pod.volume_claims:
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
        if refusal is None and not new:
            return SKIP
        state.write(_KEY, _PodVolumes(volumes, new, refusal))
        return SUCCESS

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        data = state.read(_KEY)
        if data.refusal is not None:
            return data.refusal
        csi_node = data.volumes.csi_node(node.name)
        if csi_node is None or not csi_node.limits:
            return SUCCESS
        attached: dict[str, str] = {}
        for other in node.pods:
            if other.volume_claims and other.uid != pod.uid:
                _count(data.volumes, other.namespace, other.volume_claims, attached)
        counts: dict[str, int] = {}
        for unique, driver in data.new.items():
            if unique not in attached and driver in csi_node.limits:
                counts[driver] = counts.get(driver, 0) + 1
        if not counts:
            return SUCCESS
        for driver in attached.values():
            if driver in counts:
                counts[driver] += 1
        if any(n > csi_node.limits[d] for d, n in counts.items()):
            return _EXCEEDED
        return SUCCESS


PLUGIN: Final = PluginSpec[None](plugin=NodeVolumeLimits)
