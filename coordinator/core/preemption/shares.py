"""The GPUs fractional pods share, as the victim search frees them.

A GPU split between fractional pods (``topos.io/gpu-share``) is never free for a whole-GPU pod:
evicting some of its holders frees room on it for another share, and only evicting **every**
holder frees the GPU itself. A fractional pod's ``nvidia.com/gpu: 1`` (a time-slicing or MPS
replica) is therefore never counted as a GPU it frees.

A pod asking for a share fits a node when, once the victims are gone, one GPU there has room for
it: a shared GPU whose remaining holders leave enough compute and memory, or a GPU nobody holds
(one held whole by a victim, or every one of whose holders is a victim) while the node still has
a whole GPU to give (GPUs held without saying which count against that, as in the per-pod cycle).

Planning several pods at once (a gang, or preemption for one) also counts
:data:`SHARE_MILLI`: the thousandths of GPUs a node can give — 1000 for each free GPU and the
free compute of its shared GPUs — against which a whole-GPU member asks 1000 per GPU and a share
its fraction. So a gang's shares and whole GPUs are never planned onto the same GPUs. A gang
also counts, per share it asks, the places a node has for it (:func:`share_places`, named by
:func:`places_resource`): thousandths spread over GPUs each too small for the share are no
place for it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Final

from coordinator.core.podspec.sharing import WHOLE, GpuShare, HeldShare, mib_text
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot

__all__ = [
    "SHARE_MILLI",
    "GpuHolders",
    "ShareRoom",
    "gpu_holders",
    "places_resource",
    "share_fits",
    "share_gpu",
    "share_milli",
    "share_places",
]

#: Planning-only resource, named as refusals show it ("Insufficient thousandths of a GPU"); no
#: real resource has a name with spaces.
SHARE_MILLI: Final = "thousandths of a GPU"


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuHolders:
    """One healthy GPU (not MIG-enabled) of a node, and who holds it."""

    node: str
    gpu: str  # uuid
    memory_mib: int | None = None  # None: not reported
    owner: str | None = None  # the pod holding it whole
    shares: tuple[tuple[str, HeldShare], ...] = ()  # (pod key, its share)
    claimed: bool = False  # a DRA claim holds it (whole, or a share of its capacity)


def share_milli(node: NodeInfo, whole_free: int) -> int:
    """:data:`SHARE_MILLI` a node offers now: its ``whole_free`` GPUs and its shared GPUs'
    room."""
    room = sum(
        milli
        for i, (milli, mib) in node.share_room.items()
        if i in node.shared and (mib is None or mib > 0)
    )
    return WHOLE * whole_free + room


def share_fits(node: NodeInfo, ask: GpuShare, *, fresh: bool) -> bool:
    """Whether one GPU of ``node`` has room for ``ask`` now (a wholly free one only when
    ``fresh``: the node has a whole GPU to give)."""
    return share_gpu(node, ask, fresh=fresh) is not None


def share_gpu(node: NodeInfo, ask: GpuShare, *, fresh: bool) -> int | None:
    """The GPU (index) of ``node`` with room for ``ask`` now, a shared one before a wholly free
    one (which only ``fresh`` allows); ``None``: none."""
    topo = node.topology
    if topo is None:
        return None
    found = None
    for i, (milli, mib) in node.share_room.items():
        if i not in node.shared and (not fresh or found is not None):
            continue
        held = ask.on_gpu(topo.gpus[i].memory_total_mib)
        if held is not None and held.milli <= milli and (mib is None or held.memory_mib <= mib):
            if i in node.shared:
                return i
            found = i
    return found


def places_resource(ask: GpuShare) -> str:
    """The planning-only resource counting a node's places for ``ask`` (one per member)."""
    parts = []
    if ask.milli is not None:
        parts.append(f"{ask.milli / WHOLE:g}")
    if ask.memory_mib is not None:
        parts.append(mib_text(ask.memory_mib))
    if ask.memory_milli is not None:
        parts.append(f"{ask.memory_milli / 10:g}% of the memory")
    return f"places on a GPU for a share of {' with '.join(parts)}"


def share_places(node: NodeInfo, ask: GpuShare, whole_free: int) -> int:
    """How many shares like ``ask`` the GPUs of ``node`` can hold now, GPU by GPU: its shared
    GPUs' room, and ``whole_free`` of its free GPUs (those with the most places)."""
    topo = node.topology
    if topo is None:
        return 0
    shared = 0
    fresh: list[int] = []
    for i, (milli, mib) in node.share_room.items():
        held = ask.on_gpu(topo.gpus[i].memory_total_mib)
        if held is None:
            continue
        fit = milli // held.milli
        if mib is not None and held.memory_mib > 0:
            fit = min(fit, mib // held.memory_mib)
        if i in node.shared:
            shared += fit
        else:
            fresh.append(fit)
    fresh.sort(reverse=True)
    return shared + sum(fresh[: max(0, whole_free)])


def gpu_holders(snapshot: Snapshot, *, every_gpu: bool) -> Iterator[GpuHolders]:
    """The GPUs of ``snapshot``'s nodes: every healthy non-MIG one with ``every_gpu`` (a share
    looks for room anywhere), else only the shared ones (what whole-GPU preemption frees)."""
    for node in snapshot.nodes:
        topo = node.topology
        if topo is None or not (every_gpu or node.shared):
            continue
        for g in topo.gpus:
            if not g.healthy or g.mig_enabled:
                continue
            shared = node.shared.get(g.index)
            if shared is None and not every_gpu:
                continue
            yield GpuHolders(
                node=node.name,
                gpu=g.uuid,
                memory_mib=g.memory_total_mib,
                owner=node.gpu_owner.get(g.index),
                shares=shared.holders if shared is not None else (),
                claimed=g.uuid in node.dra_held,
            )


class ShareRoom:
    """What evicting a set of pods frees of the GPUs ``holders``."""

    def __init__(self, holders: Iterable[GpuHolders]) -> None:
        self.by_node: dict[str, list[GpuHolders]] = {}
        for h in holders:
            self.by_node.setdefault(h.node, []).append(h)

    def freed_gpus(self, victims: AbstractSet[str]) -> dict[str, int]:
        """Node → shared GPUs every holder of which is a victim (free whole once they go)."""
        out: dict[str, int] = {}
        for node, gpus in self.by_node.items():
            n = sum(
                1
                for g in gpus
                if g.shares
                and g.owner is None
                and not g.claimed
                and all(pod in victims for pod, _ in g.shares)
            )
            if n:
                out[node] = n
        return out

    def milli(self, node: str, victims: AbstractSet[str], whole_free: int) -> int:
        """:data:`SHARE_MILLI` of ``node`` once ``victims`` are gone (``whole_free``: its whole
        free GPUs then, shared GPUs freed by the victims included)."""
        room = 0
        for g in self.by_node.get(node, ()):
            left = [s for pod, s in g.shares if pod not in victims]
            if not left or g.owner is not None or g.claimed:
                continue  # free whole (counted in whole_free), or not the shares' to give
            mem = sum(s.memory_mib for s in left)
            if g.memory_mib is None or mem < g.memory_mib:
                room += max(0, WHOLE - sum(s.milli for s in left))
        return WHOLE * whole_free + room

    def places(
        self,
        node: str,
        ask: GpuShare,
        victims: AbstractSet[str],
        *,
        whole_free: int,
        unclaimed: Collection[str] = (),
    ) -> int:
        """How many shares like ``ask`` the GPUs of ``node`` hold once ``victims`` are gone, GPU
        by GPU (:func:`share_places` after the victims; ``whole_free``: its whole free GPUs
        then)."""
        shared = 0
        fresh: list[int] = []
        for g in self.by_node.get(node, ()):
            if g.owner is not None and g.owner not in victims:
                continue
            if g.claimed and g.gpu not in unclaimed:
                continue
            need = ask.on_gpu(g.memory_mib)
            if need is None:
                continue
            left = [s for pod, s in g.shares if pod not in victims]
            fit = (WHOLE - sum(s.milli for s in left)) // need.milli
            if g.memory_mib is not None and need.memory_mib > 0:
                room = g.memory_mib - sum(s.memory_mib for s in left)
                fit = min(fit, room // need.memory_mib)
            if left:
                shared += max(0, fit)
            else:
                fresh.append(max(0, fit))
        fresh.sort(reverse=True)
        return shared + sum(fresh[: max(0, whole_free)])

    def fits(
        self,
        node: str,
        ask: GpuShare,
        victims: AbstractSet[str],
        *,
        fresh: bool,
        unclaimed: Collection[str] = (),
    ) -> bool:
        """Whether some GPU of ``node`` has room for ``ask`` once ``victims`` are gone.
        ``fresh``: the node has a whole GPU to give then; ``unclaimed``: GPUs (uuids) whose DRA
        claims the victims free."""
        return any(self._rooms(node, ask, victims, fresh=fresh, unclaimed=unclaimed))

    def gpu_for(
        self,
        node: str,
        ask: GpuShare,
        victims: AbstractSet[str],
        *,
        fresh: bool,
        unclaimed: Collection[str] = (),
        taken: Mapping[str, Sequence[HeldShare]] | None = None,
    ) -> str | None:
        """The GPU (uuid) of ``node`` a share nominated there holds while ``victims`` go: one
        they free room on, a shared one before a wholly free one. ``taken``: shares already
        given to other members (by GPU uuid)."""
        best: tuple[int, str] | None = None
        for g, left in self._rooms(
            node, ask, victims, fresh=fresh, unclaimed=unclaimed, taken=taken
        ):
            touched = g.owner in victims or any(pod in victims for pod, _ in g.shares)
            rank = (0 if touched else 2) + (0 if left else 1)
            if best is None or rank < best[0]:
                best = (rank, g.gpu)
        return best[1] if best is not None else None

    def _rooms(
        self,
        node: str,
        ask: GpuShare,
        victims: AbstractSet[str],
        *,
        fresh: bool,
        unclaimed: Collection[str],
        taken: Mapping[str, Sequence[HeldShare]] | None = None,
    ) -> Iterator[tuple[GpuHolders, bool]]:
        """The GPUs of ``node`` with room for ``ask`` once ``victims`` are gone, each with
        whether shares are left on it."""
        for g in self.by_node.get(node, ()):
            if g.owner is not None and g.owner not in victims:
                continue
            if g.claimed and g.gpu not in unclaimed:
                continue
            left = [s for pod, s in g.shares if pod not in victims]
            left.extend((taken or {}).get(g.gpu, ()))
            if not left and not fresh:
                continue
            need = ask.on_gpu(g.memory_mib)
            if need is None:
                continue
            if sum(s.milli for s in left) + need.milli > WHOLE:
                continue
            mem = sum(s.memory_mib for s in left) + need.memory_mib
            if g.memory_mib is None or mem <= g.memory_mib:
                yield g, bool(left)
