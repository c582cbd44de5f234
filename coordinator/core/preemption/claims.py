"""The GPUs DRA claims hold, as the victim search frees them.

A pod whose GPUs come from a ResourceClaim requests no ``nvidia.com/gpu``: evicting it frees
capacity only through its claims. A claim is freed when every pod reserving it
(``status.reservedFor``) is a victim: a claim shared with a pod that stays keeps its devices.
A GPU is freed when every claim holding it — whole, or a share of its consumable capacity — is
freed. A KEP-5004 claim (made for a pod's ``nvidia.com/gpu``) frees nothing of its own: its
GPUs are the pod's ``nvidia.com/gpu`` request, which the victim search frees already.

After the victims are deleted, kube-controller-manager's resourceclaim controller removes them
from ``reservedFor`` and clears the allocation of a claim nobody reserves any more; a claim made
from a template (or for KEP-5004) is deleted with its pod. The preemptor waits for that.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from coordinator.core.dra.extended import EXTENDED_CLAIM_ANNOTATION
from coordinator.core.dra.model import DeviceId
from coordinator.core.dra.state import DraState

__all__ = ["ClaimHold", "ClaimRoom", "claim_holds"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimHold:
    """One allocated ResourceClaim, on one node."""

    key: str  # "namespace/name"
    node: str
    gpus: frozenset[str]  # the GPUs (uuids) its devices are, whole or shared
    users: frozenset[str]  # pods reserving it: "namespace/name", or the uid of a pod not running
    extended: bool = False  # made for a pod's nvidia.com/gpu (KEP-5004)


class ClaimRoom:
    """What evicting a set of pods frees of the claims ``holds``."""

    def __init__(self, holds: Iterable[ClaimHold]) -> None:
        self.holds = tuple(holds)
        self._of_user: dict[str, list[ClaimHold]] = {}
        self._holders: dict[tuple[str, str], set[str]] = {}  # (node, gpu) → claims holding it
        for hold in self.holds:
            for user in hold.users:
                self._of_user.setdefault(user, []).append(hold)
            for gpu in hold.gpus:
                self._holders.setdefault((hold.node, gpu), set()).add(hold.key)

    def freed_claims(self, victims: AbstractSet[str]) -> list[ClaimHold]:
        """The claims no pod but ``victims`` reserves."""
        seen: dict[tuple[str, str], ClaimHold] = {}
        for victim in victims:
            for hold in self._of_user.get(victim, ()):
                if hold.users <= victims:
                    seen[(hold.key, hold.node)] = hold
        return list(seen.values())

    def freed_gpu_ids(
        self, victims: AbstractSet[str], *, extended: bool = False
    ) -> set[tuple[str, str]]:
        """(node, GPU uuid) of every GPU all of whose claims evicting ``victims`` frees (a GPU
        several freed claims have shares of counts once); KEP-5004 claims' GPUs only with
        ``extended`` (otherwise they are the pods' ``nvidia.com/gpu``)."""
        claims = self.freed_claims(victims)
        gone = {h.key for h in claims}
        return {
            (hold.node, gpu)
            for hold in claims
            if extended or not hold.extended
            for gpu in hold.gpus
            if self._holders[(hold.node, gpu)] <= gone
        }

    def freed_gpus(self, victims: AbstractSet[str]) -> dict[str, int]:
        """Node → how many GPUs evicting ``victims`` frees there through their claims."""
        out: dict[str, int] = {}
        for node, _ in self.freed_gpu_ids(victims):
            out[node] = out.get(node, 0) + 1
        return out


def claim_holds(
    dra: DraState, nodes: Mapping[str, Mapping[str, str]], pods_by_uid: Mapping[str, str]
) -> list[ClaimHold]:
    """A :class:`ClaimHold` per allocated claim and node it holds GPUs on.

    ``nodes``: node name → its labels; ``pods_by_uid``: running pods' uid → "namespace/name"
    (a ``reservedFor`` uid not listed stays a user no victim search can evict)."""
    out: list[ClaimHold] = []
    if not dra.held:
        return out
    holding = dra.nodes_holding()
    device_node: dict[DeviceId, tuple[str, str]] = {}  # device → (node, gpu uuid)
    for node, labels in nodes.items():
        if holding is not None and node not in holding:
            continue
        for device in dra.devices_on(node, labels):
            uuid = device.attribute("uuid")
            if device.id in dra.held and isinstance(uuid, str):
                device_node[device.id] = (node, uuid)
    for claim in dra.claims:
        if claim.allocation is None:
            continue
        on: dict[str, set[str]] = {}
        for result in claim.allocation.results:
            found = None if result.admin_access else device_node.get(result.device)
            if found is not None:
                on.setdefault(found[0], set()).add(found[1])
        if not on:
            continue
        users = frozenset(pods_by_uid.get(uid, uid) for uid in claim.reserved_for)
        meta = claim.raw.get("metadata") or {}
        extended = (meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true"
        out.extend(
            ClaimHold(key=claim.key, node=n, gpus=frozenset(g), users=users, extended=extended)
            for n, g in sorted(on.items())
        )
    return out
