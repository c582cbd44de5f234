"""The pod-facing vocabulary of docs/design.md §4: annotation and label keys users write on their
pods, with the seed projects' names accepted as aliases, the values they may take, and the keys the
coordinator writes back on a pod when it places it.

Reading is pure: :func:`lookup` finds a canonical key or any alias and reports a conflict when
two spellings disagree, so a pod carrying both ``topos.io/numa-policy: single-numa`` and
``numa.scheduling.kubenexus.io/policy: isolated`` is rejected with both names in the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

# Extended resources as the NVIDIA device plugin / GFD "mixed" strategy name them.
GPU_RESOURCE: Final = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"

__all__ = [
    "AGENT_POOL_SCHEDULER_NAME",
    "ASSIGNED_GPUS",
    "ASSIGNED_NUMA",
    "EXPECTED_DURATION",
    "GANG",
    "GANG_MIN",
    "GANG_TIMEOUT",
    "GANG_TOPOLOGY",
    "GPU_COUNT",
    "GPU_FRACTION",
    "GPU_LOCALITY",
    "GPU_LOCALITY_VALUES",
    "GPU_MEMORY",
    "GPU_MEMORY_MIN",
    "GPU_RESOURCE",
    "GPU_SHARE",
    "LATENCY_SENSITIVE",
    "MIG_PROFILE",
    "MIG_RESOURCE_PREFIX",
    "MIN_RUNTIME",
    "NETWORK_BANDWIDTH",
    "NUMA_POLICY",
    "NUMA_POLICY_VALUES",
    "NUMA_RESOURCES",
    "NUMA_RESOURCE_VALUES",
    "PLACEMENT",
    "PLACEMENT_KEYS",
    "PLACEMENT_SCORE",
    "PLACEMENT_VALUES",
    "POD_GROUP_KAI",
    "POD_GROUP_VOLCANO",
    "POD_GROUP_X_K8S",
    "PREEMPTION_DELAY",
    "PREFERRED_DOMAIN",
    "SCHEDULER_NAME",
    "SLICE_SIZE",
    "SLICE_TOPOLOGY",
    "Key",
    "KeyConflict",
    "lookup",
    "spelling",
]

SCHEDULER_NAME: Final = "topos"
#: The profile that scores AgentPool pods (the NeuroNetes controller's pods name it).
AGENT_POOL_SCHEDULER_NAME: Final = "topos-agentpools"


@dataclass(frozen=True, slots=True)
class Key:
    """One pod-facing key: the canonical name, its accepted aliases, and where it lives."""

    canonical: str
    aliases: tuple[str, ...] = ()
    where: str = "annotation"  # "annotation" | "label"
    #: Every spelling, the canonical first (worked out once: a pod's parse looks up ~15 keys).
    names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", (self.canonical, *self.aliases))


@dataclass(frozen=True, slots=True)
class KeyConflict:
    """Two spellings of one key carry different values."""

    key: Key
    values: tuple[tuple[str, str], ...]  # (name, value) for each spelling present

    @property
    def message(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.values)
        return f"contradictory {self.key.where}s: {shown}"


# --- what users write -------------------------------------------------------------------------
GPU_LOCALITY: Final = Key("topos.io/gpu-locality")
GPU_LOCALITY_VALUES: Final = ("nvlink", "same-socket", "same-node", "any")

NUMA_POLICY: Final = Key("topos.io/numa-policy", ("numa.scheduling.kubenexus.io/policy",))
NUMA_POLICY_VALUES: Final = ("best-effort", "restricted", "single-numa", "isolated")
NUMA_RESOURCES: Final = Key("topos.io/numa-resources", ("numa.scheduling.kubenexus.io/resources",))
NUMA_RESOURCE_VALUES: Final = ("cpu", "memory", GPU_RESOURCE)

GANG: Final = Key("topos.io/gang", ("pod-group.scheduling.kubenexus.io/name",), "label")
GANG_MIN: Final = Key(
    "topos.io/gang-min", ("pod-group.scheduling.kubenexus.io/min-available",), "label"
)
GANG_TIMEOUT: Final = Key("topos.io/gang-timeout")
# Preemption's protections (docs/preemption-protections.md): how long a pod runs before it may be
# preempted or moved, and how long a pending pod waits before it preempts.
MIN_RUNTIME: Final = Key("topos.io/min-runtime")
PREEMPTION_DELAY: Final = Key("topos.io/preemption-delay")
# How long a pod runs once started (docs/simulate.md#predicted-start-time): what a forecast of the
# pods waiting behind it counts on.
EXPECTED_DURATION: Final = Key("topos.io/expected-duration")
# scheduler-plugins' PodGroup: the label names a PodGroup object whose spec holds minMember.
POD_GROUP_X_K8S: Final = Key("scheduling.x-k8s.io/pod-group", (), "label")
# Volcano's and KAI's PodGroups: the annotation names a PodGroup object (scheduling.volcano.sh /
# scheduling.run.ai) whose spec holds minMember.
POD_GROUP_VOLCANO: Final = Key("scheduling.k8s.io/group-name")
POD_GROUP_KAI: Final = Key("pod-group-name")

PLACEMENT: Final = Key("topos.io/placement", ("topology.scheduler/placement-strategy",))
PLACEMENT_VALUES: Final = ("consolidated", "balanced", "distributed")
PREFERRED_DOMAIN: Final = Key("topos.io/preferred-domain", ("topology.scheduler/preferred-domain",))
# Seed-003 job hints, accepted as written (coordinator.core.domains.strategy parses them).
GPU_COUNT: Final = Key("topos.io/gpu-count", ("topology.scheduler/gpu-count",))
NETWORK_BANDWIDTH: Final = Key(
    "topos.io/network-bandwidth", ("topology.scheduler/network-bandwidth",)
)
LATENCY_SENSITIVE: Final = Key(
    "topos.io/latency-sensitive", ("topology.scheduler/latency-sensitive",)
)

# Multi-level slices (docs/gangs.md, "Slices and exclusive topology"): slices of k pods, each
# inside one domain of a level (a node label key, or hostname/leaf/spine/zone), the whole group
# inside one domain of another. Kueue's TAS annotations are aliases.
SLICE_SIZE: Final = Key("topos.io/slice-size", ("kueue.x-k8s.io/podset-slice-size",))
SLICE_TOPOLOGY: Final = Key(
    "topos.io/slice-topology", ("kueue.x-k8s.io/podset-slice-required-topology",)
)
GANG_TOPOLOGY: Final = Key("topos.io/gang-topology", ("kueue.x-k8s.io/podset-required-topology",))

#: The keys that ask for a network placement: a pod carrying any of them is placed by the gang
#: step, with its workload's pods (docs/scheduling.md, "Workload-level keys") or, naming no
#: group and no workload, as a group of its own.
PLACEMENT_KEYS: Final = (
    PLACEMENT,
    PREFERRED_DOMAIN,
    GPU_COUNT,
    NETWORK_BANDWIDTH,
    LATENCY_SENSITIVE,
    SLICE_SIZE,
    SLICE_TOPOLOGY,
    GANG_TOPOLOGY,
)

GPU_MEMORY_MIN: Final = Key("topos.io/gpu-memory-min")
MIG_PROFILE: Final = Key("topos.io/mig-profile")
# Part of one GPU (docs/sharing.md): KAI's annotations are aliases (KAI counts memory in MiB, as a
# bare number here does).
GPU_FRACTION: Final = Key("topos.io/gpu-fraction", ("gpu-fraction",))
GPU_MEMORY: Final = Key("topos.io/gpu-memory", ("gpu-memory",))

# --- what the coordinator writes on a pod before binding -------------------------------------
ASSIGNED_GPUS: Final = "topos.io/assigned-gpus"  # comma-separated GPU (or MIG device) UUIDs
ASSIGNED_NUMA: Final = "topos.io/assigned-numa"  # comma-separated NUMA node ids
PLACEMENT_SCORE: Final = "topos.io/placement-score"  # the winning node's total score
# A fractional pod's share of its one GPU: "fraction=0.5,memory=40Gi" (docs/sharing.md)
GPU_SHARE: Final = "topos.io/gpu-share"


def lookup(key: Key, values: Mapping[str, str]) -> tuple[str | None, KeyConflict | None]:
    """The value of ``key`` in ``values`` (a pod's annotations or labels) under any spelling.

    Returns ``(value, None)``; ``(None, None)`` when absent; ``(None, conflict)`` when two
    spellings are present with different values (surrounding whitespace ignored).
    """
    if not values:
        return None, None
    found: list[tuple[str, str]] = []
    for name in key.names:
        value = values.get(name)
        if value is not None:
            found.append((name, value))
    if not found:
        return None, None
    distinct = {value.strip() for _, value in found}
    if len(distinct) > 1:
        return None, KeyConflict(key, tuple(found))
    return found[0][1].strip(), None


def spelling(key: Key, values: Mapping[str, str]) -> str:
    """The name ``key`` is written under in ``values`` (the first spelling present), else its
    canonical name: messages about a value name the key the user wrote."""
    return next((name for name in key.names if name in values), key.canonical)
