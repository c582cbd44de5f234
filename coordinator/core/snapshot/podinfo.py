"""A pod as the scheduler counts it on a node: :class:`PodInfo`, and what it holds there
(:class:`Placement`).

There is one way a *bound* pod (placed by any scheduler, seen through the inventory) becomes a
``PodInfo``: :func:`bound_pod_info`. Production (:mod:`coordinator.engine.view`) and the tests use
it alike, so what a running pod blocks — capacity, devices, NUMA nodes, host ports, affinity
terms — is the same everywhere. Pods placed this cycle become a ``PodInfo`` through
:meth:`PodInfo.from_request`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from common import podkeys
from coordinator.core.podspec.affinity import (
    AffinityTerm,
    WeightedAffinityTerm,
    parse_affinity_terms,
)
from coordinator.core.podspec.fields import FieldError
from coordinator.core.podspec.intree import InlineVolume
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.ports import HostPort, host_ports
from coordinator.core.podspec.resources import NonZero
from coordinator.core.podspec.sharing import HeldShare, parse_held
from coordinator.core.podspec.slicekeys import SliceAsk, slice_ask

__all__ = [
    "BoundPodFields",
    "NumaUse",
    "Placement",
    "PodInfo",
    "bound_affinity_terms",
    "bound_host_ports",
    "bound_pod_info",
]


@dataclass(frozen=True, slots=True)
class NumaUse:
    """CPU (millicores) and memory (bytes) a pod holds on one NUMA node."""

    numa: int
    cpu_milli: int = 0
    memory: int = 0


@dataclass(frozen=True, slots=True)
class Placement:
    """What a pod holds inside its node: GPUs, MIG instances, NUMA nodes."""

    gpus: tuple[int, ...] = ()  # whole GPU indices
    mig: tuple[tuple[int, int], ...] = ()  # (GPU index, GPU-instance id)
    numa: tuple[int, ...] = ()  # NUMA node ids
    numa_usage: tuple[NumaUse, ...] = ()  # per-NUMA CPU/memory when the pod is NUMA-pinned
    exclusive_numa: bool = False  # NUMA nodes held exclusively (policy isolated)
    share: HeldShare | None = None  # part of its one GPU (gpus), shared with other pods


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod already on a node (bound by any scheduler) or assumed onto it this cycle."""

    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    #: cpu and memory as kube's resource scoring counts them on its node (a container without a
    #: request counts 100m, 200 MiB); ``None``: from ``requests``, as one container's
    nonzero: NonZero | None = None
    priority: int = 0
    uid: str = ""
    # device ids from topos.io/assigned-gpus (GPU UUIDs, MIG UUIDs or "<GPU UUID>/gi<n>"),
    # or from the agent's PodResources report
    device_ids: tuple[str, ...] = ()
    # set when known by index (assumed pods that hold GPUs, MIG instances or NUMA nodes); an
    # assumed pod that holds nothing inside its node has none, as its bound self has: equal
    placement: Placement | None = None
    numa: tuple[int, ...] = ()  # from topos.io/assigned-numa
    exclusive_numa: bool = False
    affinity: tuple[AffinityTerm, ...] = ()
    anti_affinity: tuple[AffinityTerm, ...] = ()
    affinity_preferred: tuple[WeightedAffinityTerm, ...] = ()
    anti_affinity_preferred: tuple[WeightedAffinityTerm, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    share: HeldShare | None = None  # part of its GPU (topos.io/gpu-share); None: whole devices
    slices: SliceAsk | None = None  # its slice keys: which domains it holds exclusively
    volume_claims: tuple[str, ...] = ()  # the PVCs (in its namespace) its volumes name
    inline_volumes: tuple[InlineVolume, ...] = ()  # its in-tree volumes, translated to CSI

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def has_affinity(self) -> bool:
        return bool(
            self.affinity
            or self.anti_affinity
            or self.affinity_preferred
            or self.anti_affinity_preferred
        )

    @classmethod
    def from_request(cls, pod: PodRequest, placement: Placement) -> PodInfo:
        """The pod as assumed onto its node, holding ``placement`` there: equal to what
        :func:`bound_pod_info` makes of it bound, when its placement holds nothing (no device,
        no NUMA node) — so the view keeps the node as assumed once the bind is seen."""
        return cls(
            namespace=pod.namespace,
            name=pod.name,
            labels=pod.labels,
            requests=pod.requests,
            nonzero=pod.nonzero_on_node,
            priority=pod.priority,
            uid=pod.uid,
            placement=None if placement == _HOLDS_NOTHING else placement,
            numa=placement.numa,
            exclusive_numa=placement.exclusive_numa,
            affinity=pod.pod_affinity,
            anti_affinity=pod.pod_anti_affinity,
            affinity_preferred=pod.pod_affinity_preferred,
            anti_affinity_preferred=pod.pod_anti_affinity_preferred,
            host_ports=pod.host_ports,
            share=placement.share,
            slices=pod.slices,
            volume_claims=tuple(c.name for c in pod.volume_claims),
            inline_volumes=pod.inline_volumes,
        )


_HOLDS_NOTHING: Final = Placement()


class BoundPodFields(Protocol):
    """What :func:`bound_pod_info` reads of a bound pod (the inventory's ``BoundPod``)."""

    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def annotations(self) -> Mapping[str, str]: ...  # scheduling keys at least
    @property
    def requests(self) -> Mapping[str, int]: ...
    @property
    def nonzero(self) -> NonZero | None: ...
    @property
    def priority(self) -> int: ...
    @property
    def assigned_gpus(self) -> tuple[str, ...]: ...
    @property
    def held_gpus(self) -> tuple[str, ...]: ...  # the node's word (PodResources), when known
    @property
    def affinity(self) -> Mapping[str, object]: ...  # podAffinity/podAntiAffinity as written
    @property
    def host_ports(self) -> tuple[HostPort, ...]: ...
    @property
    def volume_claims(self) -> tuple[str, ...]: ...
    @property
    def inline_volumes(self) -> tuple[InlineVolume, ...]: ...


def bound_pod_info(bound: BoundPodFields) -> PodInfo:
    """A bound pod as the scheduling core counts it on its node.

    Lenient by design: a running pod's odd annotation or affinity term must not hide the
    capacity, devices or ports it holds (the API server accepted it).
    """
    ann = bound.annotations
    numa, exclusive, share, slices = _annotated(ann) if ann else _NOT_ANNOTATED
    affinity, affinity_pref = bound_affinity_terms(bound, "podAffinity")
    anti, anti_pref = bound_affinity_terms(bound, "podAntiAffinity")
    return PodInfo(
        namespace=bound.namespace,
        name=bound.name,
        labels=bound.labels,
        requests=bound.requests,
        nonzero=bound.nonzero,
        priority=bound.priority,
        uid=bound.uid,
        device_ids=bound.held_gpus or bound.assigned_gpus,
        numa=numa,
        exclusive_numa=exclusive,
        affinity=affinity,
        affinity_preferred=affinity_pref,
        anti_affinity=anti,
        anti_affinity_preferred=anti_pref,
        host_ports=bound.host_ports,
        share=share,
        slices=slices,
        volume_claims=bound.volume_claims,
        inline_volumes=bound.inline_volumes,
    )


def _annotated(
    ann: Mapping[str, str],
) -> tuple[tuple[int, ...], bool, HeldShare | None, SliceAsk | None]:
    """What a running pod's scheduling annotations hold: its NUMA nodes, whether it holds them
    alone, its GPU share and its slice keys."""
    numa = tuple(
        int(part)
        for part in ann.get(podkeys.ASSIGNED_NUMA, "").split(",")
        if part.strip().isdigit()
    )
    policy, _ = podkeys.lookup(podkeys.NUMA_POLICY, ann)
    share = parse_held(ann.get(podkeys.GPU_SHARE, ""))
    return numa, policy == "isolated" and bool(numa), share, _slices(ann)


def _slices(annotations: Mapping[str, str]) -> SliceAsk | None:
    """A running pod's slice keys, leniently: an odd value holds no domain."""
    try:
        return slice_ask(annotations)
    except FieldError:
        return None


#: :func:`_annotated` of a pod with no scheduling annotation (most pods): worked out once.
_NOT_ANNOTATED: Final = _annotated({})


def bound_affinity_terms(
    bound: BoundPodFields, kind: str
) -> tuple[tuple[AffinityTerm, ...], tuple[WeightedAffinityTerm, ...]]:
    """A running pod's required and preferred ``kind`` (``podAffinity``/``podAntiAffinity``)
    terms; a malformed block constrains nothing."""
    block = bound.affinity.get(kind)
    if not isinstance(block, Mapping):
        return (), ()
    try:
        return parse_affinity_terms(block, kind, bound.namespace, bound.labels)
    except Exception:  # a malformed term on a running pod constrains nothing
        return (), ()


def bound_host_ports(spec: Mapping[str, object]) -> tuple[HostPort, ...]:
    """The host ports a running pod binds (its spec as written); an odd entry binds nothing."""
    try:
        return host_ports(spec)
    except Exception:  # a running pod's odd port entry does not stop scheduling elsewhere
        return ()
