"""The scheduler runtime over a :class:`~.cluster.MemoryCluster`: the cluster is the writer and
feeds the queue itself."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.profiles import Profiles
from coordinator.engine.loop import PostFilterHook, RuntimeSettings, Scheduler
from coordinator.engine.service import SchedulerRuntime
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory

__all__ = ["memory_runtime"]


def memory_runtime(
    inventory: Inventory,
    cluster: MemoryCluster,
    *,
    framework: Framework | Profiles | None = None,
    settings: RuntimeSettings | None = None,
    post_filter: Sequence[PostFilterHook] = (),
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> SchedulerRuntime:
    """``clock`` times the queue's backoff and the view's assumptions (a simulated clock in
    ``coordinator.sim``), ``wall_clock`` stamps attempts."""
    scheduler = Scheduler(
        view=ClusterView(
            inventory,
            dra=cluster.dra.store,
            workloads=cluster.workloads,
            volumes=cluster.volumes.store,
            clock=clock,
        ),
        writer=cluster,
        framework=framework,
        settings=settings,
        post_filter=post_filter,
        clock=clock,
        wall_clock=wall_clock,
    )
    # Every profile's pods are queued (the profiles share one queue, as on Kubernetes).
    detach = cluster.attach(scheduler.queue, names=scheduler.profiles.names)
    return SchedulerRuntime(scheduler, detach=detach, jobs=cluster.jobs)
