"""Running pods and PodDisruptionBudgets as plain data: what preemption plans with."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.core.domains.capacity import Resources
from coordinator.core.podspec.selectors import LabelSelector
from coordinator.core.podspec.sharing import HeldShare

__all__ = ["DisruptionBudget", "RunningPod"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningPod:
    """A pod that holds capacity on a node."""

    key: str  # "namespace/name"
    node: str
    requests: Resources
    uid: str = ""  # which pod of that name (an eviction is for this one only)
    priority: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    gang: str | None = None  # "namespace/name" of its gang
    gpus: tuple[str, ...] = ()
    share: HeldShare | None = None  # part of one GPU (its nvidia.com/gpu, if any, a replica)
    priority_class: str = ""  # spec.priorityClassName
    started_at: float | None = None  # status.startTime, seconds since the epoch; None: not yet
    min_runtime_s: float | None = None  # its own topos.io/min-runtime, when given and valid

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class DisruptionBudget:
    """A PodDisruptionBudget as plain data (spec + the status fields the controller keeps)."""

    namespace: str
    name: str
    selector: LabelSelector
    healthy: int  # status.currentHealthy
    expected: int  # status.expectedPods
    min_available: int | str | None = None  # 3 or "50%"
    max_unavailable: int | str | None = None
    disruptions_allowed: int | None = None  # status.disruptionsAllowed when known

    def allowed(self) -> int:
        """How many matching pods may be evicted now."""
        if self.disruptions_allowed is not None:
            return max(0, self.disruptions_allowed)
        if self.min_available is not None:
            need = _scaled(self.min_available, self.expected, up=True)
            return max(0, self.healthy - need)
        if self.max_unavailable is not None:
            may = _scaled(self.max_unavailable, self.expected, up=False)
            return max(0, self.healthy - (self.expected - may))
        return max(0, self.healthy)

    def covers(self, pod: RunningPod) -> bool:
        return pod.namespace == self.namespace and self.selector.matches(pod.labels)


def _scaled(value: int | str, total: int, *, up: bool) -> int:
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.endswith("%") and text[:-1].isdigit():
        share = int(text[:-1]) * total / 100
        return math.ceil(share) if up else math.floor(share)
    if text.isdigit():
        return int(text)
    raise ValueError(f"PodDisruptionBudget value {value!r} is neither a count nor a percentage")
