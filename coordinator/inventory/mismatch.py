"""Where the node gave a pod other GPUs than Topos chose.

On a cluster served by the classic NVIDIA device plugin, the kubelet and the plugin pick a
container's devices themselves: Topos's ``topos.io/assigned-gpus`` is advice. The agent reports
what each container really holds (the kubelet's PodResources API); :func:`find_mismatches`
compares, for every pod Topos placed on the node, the devices it assigned with the GPU and MIG
devices the kubelet says the pod's containers hold. A pod without holdings yet (not started, or no
PodResources on the node) has no verdict.

Each :class:`GpuMismatch` carries both sets as the user knows them (GPU indices, MIG profiles)
and their weakest link class, and its ``message`` says it in one line::

    assigned GPUs 0,3 (NV2) but the node gave GPUs 0,4 (SYS)

A holding naming a device the node did not report (a device plugin configured with index ids, a
node whose GPUs changed) is named as such, not dropped.

Several pods holding the same GPU is no mismatch: a time-slicing or MPS device plugin hands out
replicas of one GPU (``<uuid>::<n>``), which is how pods sharing a GPU (docs/sharing.md) get it.
Each pod is compared with its own assignment only; a share given a replica of another GPU than
the one Topos assigned is a mismatch like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Literal, Protocol

import msgspec

from common import podkeys
from common.model import Link, NodeTopology, worst_link
from common.wire import ContainerAllocation

__all__ = [
    "GpuMismatch",
    "LinkChange",
    "PlacedPod",
    "device_uuid",
    "find_mismatches",
    "holdings_by_pod",
]

LinkChange = Literal["worse", "same", "better", "unknown-device"]
_MIG_PREFIX: Final = podkeys.MIG_RESOURCE_PREFIX


class GpuMismatch(msgspec.Struct, frozen=True, kw_only=True):
    """One pod whose devices on the node are not the ones Topos assigned."""

    namespace: str
    pod: str
    uid: str
    assigned: tuple[str, ...]  # UUIDs from topos.io/assigned-gpus
    given: tuple[str, ...]  # UUIDs the kubelet reports the pod's containers hold
    assigned_devices: str  # "GPUs 0,3", "MIG 1g.5gb on GPU 0"
    given_devices: str
    assigned_link: str | None = None  # weakest link among the GPUs ("NV2", "SYS"); one GPU: None
    given_link: str | None = None
    unknown: tuple[str, ...] = ()  # given ids that are not devices of the node
    link_change: LinkChange = "same"
    message: str = ""  # "assigned GPUs 0,3 (NV2) but the node gave GPUs 0,4 (SYS)"


def _with_link(devices: str, link: str | None) -> str:
    return devices if link is None else f"{devices} ({link})"


def _is_gpu_resource(resource: str) -> bool:
    return resource == podkeys.GPU_RESOURCE or resource.startswith(_MIG_PREFIX)


def device_uuid(device_id: str) -> str:
    """The GPU or MIG UUID of a device-plugin id: a GPU shared by time-slicing or MPS is
    advertised once per replica, as ``<uuid>::<replica>``."""
    return device_id.split("::", 1)[0]


def holdings_by_pod(
    allocations: Iterable[ContainerAllocation],
) -> dict[tuple[str, str], tuple[str, ...]]:
    """``(namespace, pod)`` → the GPU and MIG UUIDs all its containers hold, in order."""
    held: dict[tuple[str, str], list[str]] = {}
    for alloc in allocations:
        ids = [device_uuid(i) for d in alloc.devices if _is_gpu_resource(d.resource) for i in d.ids]
        if ids:
            seen = held.setdefault((alloc.namespace, alloc.pod), [])
            seen.extend(i for i in ids if i not in seen)
    return {key: tuple(ids) for key, ids in held.items()}


class _Devices:
    """UUID → (parent GPU index, MIG profile or None) for one node's topology."""

    def __init__(self, topology: NodeTopology | None) -> None:
        self.topology = topology
        self.where: dict[str, tuple[int, str | None]] = {}
        for gpu in topology.gpus if topology is not None else ():
            self.where[gpu.uuid] = (gpu.index, None)
            for inst in gpu.mig_instances:
                if inst.uuid:
                    self.where[inst.uuid] = (gpu.index, inst.profile)

    def describe(self, ids: Sequence[str]) -> tuple[str, Link | None, tuple[str, ...]]:
        """(``"GPUs 0,3"``, the weakest link among their GPUs, the ids that are no device)."""
        whole: list[int] = []
        mig: list[str] = []
        parents: set[int] = set()
        unknown: list[str] = []
        for uuid in ids:
            found = self.where.get(uuid)
            if found is None:
                unknown.append(uuid)
                continue
            index, profile = found
            parents.add(index)
            if profile is None:
                whole.append(index)
            else:
                mig.append(f"MIG {profile} on GPU {index}")
        parts: list[str] = []
        if whole:
            word = "GPU" if len(whole) == 1 else "GPUs"
            parts.append(f"{word} {','.join(str(i) for i in sorted(whole))}")
        parts += mig
        parts += [f"{u[:64]} (not a device of this node)" for u in unknown]
        link = None
        if self.topology is not None and len(parents) > 1:
            link = worst_link(self.topology, sorted(parents))
        return ", ".join(parts) or "no devices", link, tuple(unknown)


def _change(assigned: Link | None, given: Link | None, unknown: bool) -> LinkChange:
    if unknown:
        return "unknown-device"
    a = assigned.sort_key() if assigned is not None else (0, 0)
    g = given.sort_key() if given is not None else (0, 0)
    return "worse" if g > a else "better" if g < a else "same"


class PlacedPod(Protocol):
    """What :func:`find_mismatches` reads of a bound pod (``inventory.state.BoundPod``)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def assigned_gpus(self) -> tuple[str, ...]: ...


def find_mismatches(
    topology: NodeTopology | None,
    pods: Iterable[PlacedPod],
    allocations: Iterable[ContainerAllocation],
) -> tuple[GpuMismatch, ...]:
    """The pods whose holdings differ from their assignment, by namespace and name.

    ``pods``: those bound to the node (a pod Topos did not place has no ``assigned_gpus``).
    ``allocations``: the agent's PodResources report for the node."""
    held = holdings_by_pod(allocations)
    devices = _Devices(topology)
    found: list[GpuMismatch] = []
    for placed in sorted(pods, key=lambda p: (p.namespace, p.name, p.uid)):
        namespace, pod, uid, chosen = (
            placed.namespace,
            placed.name,
            placed.uid,
            placed.assigned_gpus,
        )
        given = held.get((namespace, pod))
        if not chosen or given is None or set(given) == set(chosen):
            continue
        chosen_text, chosen_link, _ = devices.describe(chosen)
        given_text, given_link, unknown = devices.describe(given)
        a_link = None if chosen_link is None else str(chosen_link)
        g_link = None if given_link is None else str(given_link)
        message = (
            f"assigned {_with_link(chosen_text, a_link)} "
            f"but the node gave {_with_link(given_text, g_link)}"
        )
        found.append(
            GpuMismatch(
                namespace=namespace,
                pod=pod,
                uid=uid,
                assigned=tuple(chosen),
                given=given,
                assigned_devices=chosen_text,
                given_devices=given_text,
                assigned_link=a_link,
                given_link=g_link,
                unknown=unknown,
                link_change=_change(chosen_link, given_link, bool(unknown)),
                message=message,
            )
        )
    return tuple(found)
