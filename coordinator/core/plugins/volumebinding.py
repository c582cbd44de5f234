"""VolumeBinding: a pod's PersistentVolumeClaims, as kube-scheduler's VolumeBinding plugin.

PreFilter reads the claims the pod's volumes name (``persistentVolumeClaim``, generic
``ephemeral``) from :attr:`Snapshot.volumes <coordinator.core.snapshot.snapshot.Snapshot.volumes>`
and refuses the pod, whatever the node, with kube's message where a claim is missing
(``persistentvolumeclaim "data" not found``), being deleted, lost, not its own (an ephemeral
volume's), unbound with Immediate binding (``pod has unbound immediate PersistentVolumeClaims``:
the PV controller binds it first), or bound to a PV that cannot be read (the PV and the field).

Filter, per node: a bound claim's PV must reach the node (``spec.nodeAffinity``, "node(s) didn't
match PersistentVolume's node affinity"; a PV not found, "node(s) unavailable due to one or more
pvc(s) bound to non-existent pv(s)"); an unbound claim of a ``WaitForFirstConsumer`` class needs
an available PV the node reaches (the smallest that fits, each PV for one claim) or, failing
that, a class with a provisioner whose ``allowedTopologies`` admit the node ("node(s) didn't
find available persistent volumes to bind"). What binding those claims to the node writes —
``spec.claimRef`` on each PV matched, ``volume.kubernetes.io/selected-node`` on each claim to
provision — goes to ``Decision.volumes``; the engine writes it before the Binding (kube's
PreBind). Storage capacity tracking (CSIStorageCapacity) is not read.
"""

from __future__ import annotations

from typing import Final

from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.framework.interfaces import VOLUMES, Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.snapshot.volumes import (
    WAIT_FOR_FIRST_CONSUMER,
    Claim,
    Volume,
    Volumes,
    VolumeWrites,
    find_matching_volume,
)
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = [
    "BIND_CONFLICT",
    "NODE_CONFLICT",
    "PV_NOT_EXIST",
    "UNBOUND_IMMEDIATE",
    "VolumeBinding",
    "claims_refusal",
]

#: kube-scheduler's reasons (pkg/scheduler/framework/plugins/volumebinding).
UNBOUND_IMMEDIATE: Final = "pod has unbound immediate PersistentVolumeClaims"
NODE_CONFLICT: Final = "node(s) didn't match PersistentVolume's node affinity"
BIND_CONFLICT: Final = "node(s) didn't find available persistent volumes to bind"
PV_NOT_EXIST: Final = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


class _PodVolumes:
    __slots__ = ("bound", "delayed", "volumes")

    def __init__(self, volumes: Volumes, bound: list[Claim], delayed: list[Claim]) -> None:
        self.volumes = volumes
        self.bound = bound
        self.delayed = sorted(delayed, key=lambda c: c.request)  # the smallest fits first


_KEY: Final = StateKey[_PodVolumes]("VolumeBinding")


def _claim_refusal(pod: PodRequest, volumes: Volumes) -> Status | list[Claim]:
    """The pod's claims, or why the pod cannot be scheduled anywhere (``podHasPVCs``)."""
    claims: list[Claim] = []
    for ref in pod.volume_claims:
        claim = volumes.claim(pod.namespace, ref.name)
        if claim is None:
            bad = volumes.error("PersistentVolumeClaim", f"{pod.namespace}/{ref.name}")
            if bad is not None:
                return Status.unresolvable(f'persistentvolumeclaim "{ref.name}" is invalid: {bad}')
            if ref.ephemeral:
                return Status.waiting(
                    "waiting for ephemeral volume controller to create the "
                    f'persistentvolumeclaim "{ref.name}"'
                )
            return Status.unresolvable(f'persistentvolumeclaim "{ref.name}" not found')
        if claim.phase == "Lost":
            return Status.unresolvable(
                f'persistentvolumeclaim "{ref.name}" bound to non-existent persistentvolume '
                f'"{claim.volume_name}"'
            )
        if claim.deleting:
            return Status.unresolvable(f'persistentvolumeclaim "{ref.name}" is being deleted')
        if ref.ephemeral and claim.owner_uid != pod.uid:
            return Status.unresolvable(
                f"PVC {claim.key} was not created for pod {pod.key} (pod is not owner)"
            )
        claims.append(claim)
    return claims


def _split(pod: PodRequest, volumes: Volumes) -> Status | tuple[list[Claim], list[Claim]]:
    """The pod's bound claims and those its node decides (WaitForFirstConsumer), or why no node
    can take it (PreFilter's refusals: only the PV controller, a provisioner or the pod's user
    can change them)."""
    claims = _claim_refusal(pod, volumes)
    if isinstance(claims, Status):
        return claims
    bound: list[Claim] = []
    delayed: list[Claim] = []
    for claim in claims:
        if claim.bound:
            bad = volumes.error("PersistentVolume", claim.volume_name)
            if bad is not None:
                return Status.unresolvable(
                    f'persistentvolume "{claim.volume_name}" of persistentvolumeclaim '
                    f'"{claim.name}" is invalid: {bad}'
                )
            bound.append(claim)
            continue
        sc = volumes.storage_class(claim.storage_class) if claim.storage_class else None
        if sc is None or sc.binding_mode != WAIT_FOR_FIRST_CONSUMER or claim.volume_name:
            return Status.unresolvable(UNBOUND_IMMEDIATE)  # the PV controller binds it
        delayed.append(claim)
    return bound, delayed


def claims_refusal(pod: PodRequest, volumes: Volumes) -> str | None:
    """Why no node can take ``pod`` for its claims now (a claim missing, being deleted, lost,
    invalid, not its own, or unbound with Immediate binding), or ``None``: what only the PV
    controller, a provisioner or the pod's user changes — not a pod's end."""
    if not pod.volume_claims:
        return None
    found = _split(pod, volumes)
    return found.message if isinstance(found, Status) else None


class VolumeBinding(Plugin):
    name = "VolumeBinding"

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        if not pod.volume_claims:
            return SKIP
        volumes = snapshot.volumes
        found = _split(pod, volumes)
        if isinstance(found, Status):
            return found
        bound, delayed = found
        state.write(_KEY, _PodVolumes(volumes, bound, delayed))
        if delayed:
            state.write(VOLUMES, {})
        return SUCCESS

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        data = state.read(_KEY)
        found = reached = True
        for claim in data.bound:
            pv = data.volumes.volume(claim.volume_name)
            if pv is None:
                found = False
                break
            if not pv.reaches(node.labels):
                reached = False
                break
        writes = self._bind_delayed(data, node) if data.delayed else None
        bindable = not data.delayed or writes is not None
        if found and reached and bindable:
            if writes is not None:
                state.read(VOLUMES)[node.name] = writes
            return SUCCESS
        conflicts = ((NODE_CONFLICT, reached), (BIND_CONFLICT, bindable), (PV_NOT_EXIST, found))
        return Status.unresolvable(*(reason for reason, ok in conflicts if not ok))

    @staticmethod
    def _bind_delayed(data: _PodVolumes, node: NodeInfo) -> VolumeWrites | None:
        """``findMatchingVolumes`` then ``checkVolumeProvisions`` on ``node``: what binding
        the pod's WaitForFirstConsumer claims there writes, ``None`` when they cannot be."""
        chosen: set[str] = set()
        bind: list[tuple[Volume, Claim]] = []
        provision: list[Claim] = []
        for claim in data.delayed:
            pv = find_matching_volume(
                claim, data.volumes.of_class(claim.storage_class), node.labels, chosen
            )
            if pv is None:
                provision.append(claim)
            else:
                chosen.add(pv.name)
                bind.append((pv, claim))
        for claim in provision:
            sc = data.volumes.storage_class(claim.storage_class)
            if sc is None or not sc.provisions or not sc.allows(node.labels):
                return None
        return VolumeWrites(node.name, tuple(bind), tuple(provision))


PLUGIN: Final = PluginSpec[None](plugin=VolumeBinding)
