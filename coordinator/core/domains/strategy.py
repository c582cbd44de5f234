"""Placement strategies and the pod annotations that choose them.

``topos.io/placement`` (alias ``topology.scheduler/placement-strategy``):

``consolidated``  fewest nodes and leaves: fill whole nodes first (training, all-reduce heavy)
``balanced``      the default: the narrowest network domain, best-fit nodes inside it so partly
                  used nodes are filled before idle ones (least fragmentation)
``distributed``   one member per node where possible, round-robin across leaves (fault tolerance,
                  inference replicas)

The seed-003 hints are accepted too (see docs/scheduling.md, "Workload-level keys"):

``gpu-count``          the workload's GPUs: its members' ``nvidia.com/gpu`` in all — those placed
                       (``PlacementIntent.placed_gpus``) and those pending — or each member's;
                       anything else refuses the group with a message naming both numbers
``network-bandwidth``  ``100Gb``, ``200Gbps``, ``25G``…: nodes labelled
                       ``topos.io/network.bandwidth`` with less are filtered out (unlabelled nodes
                       are not), and the job stays inside one spine
``latency-sensitive``  ``true``: the job stays inside one spine, and nodes that share their GPUs
                       out as MIG instances (``nvidia.com/mig-*`` allocatable) are used only when
                       no other nodes can hold it
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common import podkeys
from coordinator.core.domains.slices import SliceSpec
from coordinator.core.framework.config import TopologyConstraints

#: Node label: the node's network bandwidth (``400Gb``, ``200Gbps``…), set by whoever knows it.
NODE_BANDWIDTH_LABEL = "topos.io/network.bandwidth"


class Strategy(enum.Enum):
    CONSOLIDATED = "consolidated"
    BALANCED = "balanced"
    DISTRIBUTED = "distributed"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementIntent:
    """What a pod's annotations ask of its (gang's) network placement."""

    strategy: Strategy = Strategy.BALANCED
    preferred_domain: str | None = None
    gpu_count: int | None = None
    network_bandwidth_gbps: float | None = None
    latency_sensitive: bool = False
    gpu_count_key: str = podkeys.GPU_COUNT.canonical  # as the pod spelled it, for messages
    # Nodes already holding placed pods of the same group: ``distributed`` uses them last (a
    # Deployment's replicas are placed as they come, one rollout surge or scale-up at a time).
    occupied: frozenset[str] = frozenset()
    #: ``nvidia.com/gpu`` of each member of the group already placed (bound or reserved, not
    #: leaving): ``gpu-count`` counts the whole workload, so a replacement pod of a running Job is
    #: judged with the members still running (not an annotation: the gang step sets it).
    placed_gpus: tuple[int, ...] = ()
    #: The configuration's ``topologyConstraints`` (not an annotation: the gang cycle sets it).
    leaf_limits: TopologyConstraints | None = None
    #: Slices and exclusive domains (not annotations read here: the gang cycle builds it from
    #: the pods' slice keys, coordinator.core.gangs.slices).
    slices: SliceSpec | None = None

    @property
    def single_spine(self) -> bool:
        """Whether the job must stay inside one spine (when spines are labelled)."""
        return self.latency_sensitive or self.network_bandwidth_gbps is not None


@dataclass(frozen=True, slots=True)
class IntentError:
    """A placement annotation with a value Topos cannot use; ``message`` names key and value."""

    message: str


_BANDWIDTH = re.compile(r"^(\d+(?:\.\d+)?)\s*([GMT])(?:b|bit|bps|bit/s)?$", re.IGNORECASE)
_BANDWIDTH_SCALE = {"m": 0.001, "g": 1.0, "t": 1000.0}
_MAX_GPU_COUNT = 100_000
_DOMAIN = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


def parse_bandwidth(text: str) -> float | None:
    """``"200Gb"`` → 200.0 (Gbit/s); None when the text is not a bandwidth."""
    m = _BANDWIDTH.match(text.strip())
    if m is None:
        return None
    return float(m.group(1)) * _BANDWIDTH_SCALE[m.group(2).lower()]


def _value(key: podkeys.Key, annotations: Mapping[str, str]) -> tuple[str | None, str | None]:
    value, conflict = podkeys.lookup(key, annotations)
    return value, (conflict.message if conflict is not None else None)


def _bad(key: podkeys.Key, annotations: Mapping[str, str], text: str, expected: str) -> IntentError:
    """A bad value, named under the key the pod wrote (canonical or seed alias)."""
    return IntentError(f"annotation {podkeys.spelling(key, annotations)}={text!r}: {expected}")


def placement_intent(annotations: Mapping[str, str]) -> PlacementIntent | IntentError:
    """Read the placement annotations of a pod (canonical names or seed aliases)."""
    strategy = Strategy.BALANCED
    text, err = _value(podkeys.PLACEMENT, annotations)
    if err:
        return IntentError(err)
    if text is not None:
        try:
            strategy = Strategy(text.lower())
        except ValueError:
            allowed = ", ".join(s.value for s in Strategy)
            return _bad(podkeys.PLACEMENT, annotations, text, f"expected one of {allowed}")

    preferred, err = _value(podkeys.PREFERRED_DOMAIN, annotations)
    if err:
        return IntentError(err)
    if preferred is not None and not _DOMAIN.match(preferred):
        return _bad(
            podkeys.PREFERRED_DOMAIN, annotations, preferred, "not a leaf, spine or zone name"
        )

    gpu_count: int | None = None
    text, err = _value(podkeys.GPU_COUNT, annotations)
    if err:
        return IntentError(err)
    if text is not None:
        if not text.isdigit() or not 0 < int(text) <= _MAX_GPU_COUNT:
            return _bad(
                podkeys.GPU_COUNT,
                annotations,
                text,
                f"expected a whole number of GPUs from 1 to {_MAX_GPU_COUNT}",
            )
        gpu_count = int(text)

    bandwidth: float | None = None
    text, err = _value(podkeys.NETWORK_BANDWIDTH, annotations)
    if err:
        return IntentError(err)
    if text is not None:
        bandwidth = parse_bandwidth(text)
        if bandwidth is None or bandwidth <= 0:
            return _bad(
                podkeys.NETWORK_BANDWIDTH,
                annotations,
                text,
                "expected a bandwidth such as 100Gb or 400Gbps",
            )

    latency = False
    text, err = _value(podkeys.LATENCY_SENSITIVE, annotations)
    if err:
        return IntentError(err)
    if text is not None:
        if text.lower() not in ("true", "false"):
            return _bad(podkeys.LATENCY_SENSITIVE, annotations, text, "expected true or false")
        latency = text.lower() == "true"

    return PlacementIntent(
        strategy=strategy,
        preferred_domain=preferred,
        gpu_count=gpu_count,
        network_bandwidth_gbps=bandwidth,
        latency_sensitive=latency,
        gpu_count_key=podkeys.spelling(podkeys.GPU_COUNT, annotations),
    )


def gpu_count_disagreement(intent: PlacementIntent, member_gpus: Sequence[int]) -> str | None:
    """Why the members' GPU requests contradict ``gpu-count``, or ``None`` when they agree (the
    count is the workload's total — its members placed and ``member_gpus``, those being placed
    now — or every member's own)."""
    want = intent.gpu_count
    if want is None or not member_gpus:
        return None
    gpus = [*intent.placed_gpus, *member_gpus]
    total = sum(gpus)
    if total == want or all(n == want for n in gpus):
        return None
    n = len(gpus)
    shape = f"{gpus[0]} each" if len(set(gpus)) == 1 and n > 1 else ""
    placed = f"{len(intent.placed_gpus)} of them running" if intent.placed_gpus else ""
    detail = ", ".join(part for part in (shape, placed) if part)
    pods = f"{n} pods ask" if n > 1 else "the pod asks"
    return (
        f"annotation {intent.gpu_count_key}={want} disagrees with the GPU limits: {pods} for "
        f"{total} nvidia.com/gpu{f' ({detail})' if detail else ''}; make them agree"
    )


def node_bandwidth_gbps(labels: Mapping[str, str]) -> float | None:
    """A node's bandwidth from :data:`NODE_BANDWIDTH_LABEL`; ``None`` when absent or unreadable."""
    text = labels.get(NODE_BANDWIDTH_LABEL)
    return None if text is None else parse_bandwidth(text)


__all__ = [
    "NODE_BANDWIDTH_LABEL",
    "IntentError",
    "PlacementIntent",
    "Strategy",
    "gpu_count_disagreement",
    "node_bandwidth_gbps",
    "parse_bandwidth",
    "placement_intent",
]
