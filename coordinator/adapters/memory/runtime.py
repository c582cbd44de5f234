"""The scheduler runtime over a :class:`~.cluster.MemoryCluster`: the cluster is the writer and
feeds the queue itself."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.core.framework.profile import Framework
from coordinator.engine.loop import PostFilterHook, RuntimeSettings, Scheduler
from coordinator.engine.service import SchedulerRuntime
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory

__all__ = ["memory_runtime"]


def memory_runtime(
    inventory: Inventory,
    cluster: MemoryCluster,
    *,
    framework: Framework | None = None,
    settings: RuntimeSettings | None = None,
    post_filter: Sequence[PostFilterHook] = (),
) -> SchedulerRuntime:
    scheduler = Scheduler(
        view=ClusterView(inventory, dra=cluster.dra.store, workloads=cluster.workloads),
        writer=cluster,
        framework=framework,
        settings=settings,
        post_filter=post_filter,
    )
    return SchedulerRuntime(scheduler, detach=cluster.attach(scheduler.queue))
