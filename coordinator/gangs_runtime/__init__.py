"""Gangs, preemption and recovery on a running scheduler: the Kubernetes side of
``coordinator.gang``, ``coordinator.domains`` and ``coordinator.preemption``.

- :mod:`.objects` — ``ObjectCache``: list/watch of PodGroups and PodDisruptionBudgets.
- :mod:`.running` — the inventory's bound pods as ``RunningPod``s, PDBs as ``DisruptionBudget``s.
- :mod:`.step` — ``GangStep``: the gang step of the scheduling loop (all-or-nothing).
- :mod:`.preempt` — ``Preemptor``: victims evicted, nominated node recorded, Events.
- :mod:`.recovery` — ``Recovery``: failed GPUs/nodes → gangs moved as a whole.
- :mod:`.service` — ``GangRuntime``: all of it attached to a ``SchedulerRuntime``.

See docs/gangs.md, "Running on Kubernetes".
"""

from .service import GangRuntime, GangSettings
from .step import GangStep

__all__ = ["GangRuntime", "GangSettings", "GangStep"]
