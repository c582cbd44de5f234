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
also counts, per share it asks, the places a node has for it (:meth:`ShareRoom.places`, named
by :func:`places_resource`): thousandths spread over GPUs each too small for the share are no
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
    "node_gpus",
    "places_resource",
    "room_of",
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


def gpu_holders(snapshot: Snapshot, *, every_gpu: bool) -> Iterator[GpuHolders]:
    """The GPUs of ``snapshot``'s nodes (:func:`node_gpus` of each)."""
    for node in snapshot.nodes:
        yield from node_gpus(node, every_gpu=every_gpu)


def node_gpus(node: NodeInfo, *, every_gpu: bool) -> Iterator[GpuHolders]:
    """The GPUs of ``node``: every healthy non-MIG one with ``every_gpu`` (a share looks for
    room anywhere), else only the shared ones (what whole-GPU preemption frees)."""
    topo = node.topology
    if topo is None or not (every_gpu or node.shared):
        return
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


def room_of(node: NodeInfo) -> ShareRoom:
    """The :class:`ShareRoom` of ``node``'s GPUs (with no victims: the node as it is now)."""
    return ShareRoom(node_gpus(node, every_gpu=True))


class ShareRoom:
    """What evicting a set of pods frees of the GPUs ``holders``; with no victims, the GPUs as
    they are now (what gang planning counts). The one capacity model of shares for planning:
    its room on each GPU is the per-pod cycle's (``NodeInfo.share_room``)."""

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
            free = _room(g, left)
            room += free[0] if free is not None else 0
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
        by GPU: the shared GPUs' room, and ``whole_free`` of the free GPUs (those with the most
        places); ``whole_free``: its whole free GPUs then."""
        shared = 0
        fresh: list[int] = []
        for g in self.by_node.get(node, ()):
            if g.owner is not None and g.owner not in victims:
                continue
            if g.claimed and g.gpu not in unclaimed:
                continue
            need = ask.on_gpu(g.memory_mib)
            left = [s for pod, s in g.shares if pod not in victims]
            free = _room(g, left)
            if need is None or free is None:
                continue
            fit = free[0] // need.milli
            if free[1] is not None and need.memory_mib > 0:
                fit = min(fit, free[1] // need.memory_mib)
            if left:
                shared += fit
            else:
                fresh.append(fit)
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
            free = _room(g, left)
            if need is None or free is None:
                continue
            if need.milli <= free[0] and (free[1] is None or need.memory_mib <= free[1]):
                yield g, bool(left)


def _room(gpu: GpuHolders, left: Sequence[HeldShare]) -> tuple[int, int | None] | None:
    """The free thousandths and MiB (``None``: memory unknown) of ``gpu`` while the shares
    ``left`` hold it; ``None``: no room. The rule of the per-pod cycle's ``NodeInfo.share_room``:
    a GPU whose compute or (known) memory its shares hold entirely has no room for another."""
    milli = WHOLE - sum(s.milli for s in left)
    if gpu.memory_mib is None:
        return (milli, None) if milli > 0 else None
    mib = gpu.memory_mib - sum(s.memory_mib for s in left)
    if left and (milli <= 0 or mib <= 0):
        return None
    return milli, mib
