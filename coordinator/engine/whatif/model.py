"""The what-if answer (``POST /v1/whatif``'s body), one type per part."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "PodPlacement",
    "Suggestion",
    "UnitAnswer",
    "Victim",
    "WhatIfAnswer",
    "WhatIfRequest",
    "WorkloadPods",
]


class WhatIfRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a user would apply: the documents of a manifest (a Pod, Job, JobSet,
    LeaderWorkerSet, PodGroup with its pods, AgentPool, or a v1 List of them)."""

    documents: list[Any]
    suggest: bool = True  # also work out what would make it fit (when it does not)
    #: seconds for the suggestions (null: no limit); kinds not tried in time are named
    budget_s: float | None = 1.0


class PodPlacement(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pod: str  # namespace/name
    node: str
    gpus: list[str] = []  # device ids (topos.io/assigned-gpus)
    gpu_indices: list[int] = []
    link: str | None = None  # the worst link between its GPUs: NVLink, NVSwitch, PIX, SYS…
    numa: list[int] = []
    domain: dict[
        str, str
    ] = {}  # leaf, spine, zone of the node (the labels named in gangs.domainKeys)
    dra: list[str] = []  # DRA devices its claims get: "claim: driver/pool/device"
    gpu_share: str | None = None
    score: float | None = None
    #: The node's GPUs and links placement skipped or counted lower for health (docs/health.md)
    health: list[str] = []


class UnitAnswer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One scheduling unit: a pod group placed as a whole, or one pod."""

    unit: str  # "pod group ns/name" | "pod ns/name"
    fits: bool
    pods: list[str]
    #: fits: "would go to …"; otherwise the words of its FailedScheduling Event / PodScheduled
    #: condition ("0/12 nodes are available: …", "waiting for pod group …: 0/8 members placed; …")
    message: str
    placements: list[PodPlacement] = []
    #: doesn't fit: nodes per reason, as counted into the message
    reasons: dict[str, int] = {}


class Victim(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pod: str
    node: str
    priority: int
    gang: str | None = None


class Suggestion(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One change that, tried on the same copy, makes everything fit."""

    rank: int
    #: wait | relax-locality | relax-numa | span-domains | fewer-gpus | preempt | uncordon
    kind: str
    summary: str
    #: fields the user would change: {"topos.io/gpu-locality": "same-socket"},
    #: {"nvidia.com/gpu": "7"}; empty for preempt and uncordon
    change: dict[str, str] = {}
    victims: list[Victim] = []  # preempt
    #: uncordon: the nodes to bring back; preempt: where victims run; wait: where it would start
    nodes: list[str] = []
    placements: list[PodPlacement] = []  # where everything would go with the change


class WorkloadPods(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    namespace: str
    name: str
    pods: int


class WhatIfAnswer(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    fits: bool
    nodes: int  # nodes in the snapshot it was answered on
    workloads: list[WorkloadPods]
    units: list[UnitAnswer]
    suggestions: list[Suggestion] = []
    #: suggestion kinds not tried within the request's budget_s (tried in rank order)
    not_tried: list[str] = []
    notes: list[str] = []
    #: When it would start (seconds from now: 0 when it fits now), by running the engine forward
    #: on a copy of the live cluster with its pods added to the pending queue; absent when no
    #: start is predicted within the horizon (a note says why) or no predictor runs.
    predicted_start_s: float | None = None
    #: the running pods whose end it waits for (namespace/name)
    waits_for: list[str] | None = None
