"""The verdict of one plugin on one pod (and node): a value, never an exception.

Codes follow kube-scheduler. ``Unschedulable`` means the node could take the pod if something
changed (preemption, pods ending); ``UnschedulableAndUnresolvable`` means no change on that node
would help (wrong labels, untolerated taint, bad pod spec). Reasons are fixed strings so they can
be counted across nodes into "0/12 nodes are available: …"; numbers and names ride in ``detail``.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["Code", "Reason", "Status", "summarize"]


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    SKIP = 5  # PreFilter only: this plugin has nothing to check for this pod

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS: Final = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.SKIP: "Skip",
}


class Reason:
    """The fixed reason strings (kube-scheduler's wording where kube has one)."""

    NODE_UNSCHEDULABLE: Final = "node(s) were unschedulable"
    NODE_SELECTOR: Final = "node(s) didn't match Pod's node affinity/selector"
    TAINTS: Final = "node(s) had untolerated taint(s)"
    POD_AFFINITY: Final = "node(s) didn't match pod affinity rules"
    POD_ANTI_AFFINITY: Final = "node(s) didn't match pod anti-affinity rules"
    EXISTING_ANTI_AFFINITY: Final = "node(s) didn't satisfy existing pods anti-affinity rules"
    SPREAD: Final = "node(s) didn't match pod topology spread constraints"
    SPREAD_MISSING_LABEL: Final = (
        "node(s) didn't match pod topology spread constraints (missing required label)"
    )
    TOO_MANY_PODS: Final = "Too many pods"
    NODE_PORTS: Final = "node(s) didn't have free ports for the requested pod ports"
    STALE_AGENT: Final = "node(s) had a stale GPU agent"
    NOT_IN_CANDIDATES: Final = "node(s) were not among the candidate nodes"
    NO_TOPOLOGY: Final = "node(s) had no GPU topology"
    NO_GPU_AGENT: Final = "node(s) had no GPU topology from a Topos agent yet"
    NO_NUMA_TOPOLOGY: Final = "node(s) had no NUMA topology"
    GPU_MEMORY: Final = "node(s) had no free GPU with enough memory"
    GPU_LOCALITY_NVLINK: Final = "node(s) had no free GPUs joined by NVLink"
    GPU_LOCALITY_SOCKET: Final = "node(s) had no free GPUs on one socket"
    MIG_PROFILE: Final = "node(s) had no free MIG instance of the requested profile"
    SHARE_NO_ROOM: Final = "node(s) had no GPU with room for the share"
    SHARE_MIG: Final = "node(s) had only MIG-enabled GPUs, which are never shared by fraction"
    SHARE_NO_REPLICAS: Final = (
        "node(s) hand out whole GPUs as nvidia.com/gpu (no time-slicing or MPS replicas)"
    )
    SHARE_MEMORY: Final = "no GPU has the memory the share asks for"
    NUMA_SINGLE: Final = "no single NUMA node has sufficient capacity"
    NUMA_ISOLATED: Final = "no NUMA node is free of other pods"
    NUMA_RESTRICTED: Final = "NUMA nodes have insufficient capacity"
    INVALID_POD: Final = "pod spec is invalid"

    @staticmethod
    def insufficient(resource: str) -> str:
        return f"Insufficient {resource}"

    @staticmethod
    def untolerated_taint(key: str, value: str) -> str:
        """Which taint (the status detail; the counted reason is :attr:`TAINTS`)."""
        return f"untolerated taint {{{key}: {value}}}"


@dataclass(frozen=True, slots=True)
class Status:
    """A code, the fixed reasons, the plugin that said it, and free-form detail."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    detail: str = ""
    #: The pod waits for an object another controller makes (a claim from its template):
    #: kube-scheduler's PreEnqueue gate. It is tried again on the next change, with no backoff.
    gated: bool = False

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @property
    def is_rejection(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        text = ", ".join(self.reasons) or self.code.label
        return f"{text}: {self.detail}" if self.detail else text

    def with_plugin(self, plugin: str) -> Status:
        if self.plugin:
            return self
        return Status(self.code, self.reasons, plugin, self.detail, self.gated)

    @staticmethod
    def unschedulable(*reasons: str, detail: str = "") -> Status:
        return Status(Code.UNSCHEDULABLE, reasons, "", detail)

    @staticmethod
    def unresolvable(*reasons: str, detail: str = "") -> Status:
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, "", detail)

    @staticmethod
    def waiting(*reasons: str) -> Status:
        """Unresolvable until another controller makes an object (see :attr:`gated`)."""
        return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, "", "", True)

    @staticmethod
    def error(detail: str) -> Status:
        return Status(Code.ERROR, ("internal error",), "", detail)


SUCCESS: Final = Status()
SKIP: Final = Status(Code.SKIP)


def summarize(total_nodes: int, statuses: Mapping[str, Status] | Iterable[Status]) -> str:
    """kube-scheduler's FailedScheduling message.

    Each reason of each rejected node is counted; the ``"<count> <reason>"`` strings are sorted as
    strings (as kube does), e.g. ``0/12 nodes are available: 4 Insufficient nvidia.com/gpu,
    8 no single NUMA node has sufficient capacity.``
    """
    values = statuses.values() if isinstance(statuses, Mapping) else statuses
    counts: Counter[str] = Counter()
    # Nodes refused alike share their reasons: count the reason tuples first (in C), then
    # spread each tuple's count over its reasons.
    for reasons, n in Counter(s.reasons for s in values).items():
        for reason in reasons:
            counts[reason] += n
    parts = sorted(f"{n} {reason}" for reason, n in counts.items())
    if not parts:
        return f"0/{total_nodes} nodes are available."
    return f"0/{total_nodes} nodes are available: {', '.join(parts)}."
