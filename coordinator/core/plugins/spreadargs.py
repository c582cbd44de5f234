"""PodTopologySpread's arguments (kube-scheduler's ``PodTopologySpreadArgs``): the constraints a
pod that declares no ``topologySpreadConstraints`` of its own is spread by.

``defaultingType: System`` (the default) is kube-scheduler's built-in pair — at most 3 more
matching pods per node than on the emptiest node and 5 per zone, both ``ScheduleAnyway`` (a
preference, never a refusal); a node without a zone label is still spread per hostname.
``defaultingType: List`` takes ``defaultConstraints`` instead (none: no default spreading).
A default constraint's selector is never written: it comes from the Services,
ReplicationControllers, ReplicaSets and StatefulSets that select the pod
(:mod:`coordinator.core.snapshot.workloads`).
They are PodTopologySpread's ``args`` (:class:`SpreadDefaults`), read from a
KubeSchedulerConfiguration's ``pluginConfig`` by :mod:`coordinator.app.config.spreadargs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from coordinator.core.podspec.spread import SpreadConstraint

__all__ = ["HOSTNAME", "SYSTEM_SPREAD", "ZONE", "SpreadDefaults"]

HOSTNAME: Final = "kubernetes.io/hostname"
ZONE: Final = "topology.kubernetes.io/zone"


#: kube-scheduler's built-in default constraints (``defaultingType: System``).
_SYSTEM: Final = (
    SpreadConstraint(3, HOSTNAME, "ScheduleAnyway", None),
    SpreadConstraint(5, ZONE, "ScheduleAnyway", None),
)


@dataclass(frozen=True, slots=True)
class SpreadDefaults:
    #: ``System``: kube's built-in constraints, where a node lacking one key still counts for
    #: the others; ``List``: ``constraints`` as written (a node must carry every key).
    defaulting_type: str = "System"
    constraints: tuple[SpreadConstraint, ...] = _SYSTEM

    @property
    def system(self) -> bool:
        return self.defaulting_type == "System"


SYSTEM_SPREAD: Final = SpreadDefaults()
