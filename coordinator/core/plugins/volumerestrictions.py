"""VolumeRestrictions' ReadWriteOncePod rule, as kube-scheduler's: a claim with the
``ReadWriteOncePod`` access mode that a pod placed already (bound, or assumed this cycle) uses
refuses every node to another pod ("node(s) unavailable due to PersistentVolumeClaim with
ReadWriteOncePod access mode already in-use by another pod").

kube-scheduler's refusal is ``Unschedulable`` (preemption may evict the pod that holds the
claim); Topos's preemption plans on capacity and cannot see a claim freed, so the refusal is
``UnschedulableAndUnresolvable`` here: the pod waits for the holder to end. Disk conflicts of
in-tree volume types (GCE PD, AWS EBS, RBD, iSCSI) are not checked.
"""

from __future__ import annotations

from typing import Final

from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["RWOP_CONFLICT", "VolumeRestrictions"]

RWOP_CONFLICT: Final = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
    "already in-use by another pod"
)
_CONFLICT: Final = Status.unresolvable(RWOP_CONFLICT)
_RWOP: Final = "ReadWriteOncePod"


_USERS: Final = object()  # NodeInfo.memo key of the node's claims in use (a NodeInfo never changes)


def _claim_users(node: NodeInfo) -> dict[tuple[str, str], frozenset[str]]:
    """(namespace, claim) → the uids of the node's pods using it (kube's ``PVCRefCounts``),
    worked out once per NodeInfo."""
    found = node.memo.get(_USERS)
    if isinstance(found, dict):
        return found
    users: dict[tuple[str, str], set[str]] = {}
    for other in node.pods:
        for name in other.volume_claims:
            users.setdefault((other.namespace, name), set()).add(other.uid)
    out = {key: frozenset(uids) for key, uids in users.items()}
    node.memo[_USERS] = out
    return out


class VolumeRestrictions(Plugin):
    name = "VolumeRestrictions"

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if not pod.volume_claims:
            return SKIP
        exclusive = set()
        for ref in pod.volume_claims:
            claim = snapshot.volumes.claim(pod.namespace, ref.name)
            if claim is not None and _RWOP in claim.access_modes:
                exclusive.add(ref.name)  # a missing claim is VolumeBinding's to explain
        if not exclusive:
            return SKIP
        for node in snapshot.nodes:
            users = _claim_users(node)
            for name in exclusive:
                found = users.get((pod.namespace, name))
                if found and (len(found) > 1 or pod.uid not in found):
                    return SUCCESS  # in use: Filter refuses every node, as kube's does
        return SKIP

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        return _CONFLICT


PLUGIN: Final = PluginSpec[None](plugin=VolumeRestrictions)
