"""The scheduler runtime and the gang runtime on Kubernetes: the engine's ports filled with the
API server (writer, nominator) and its feeds with reflectors (pending pods, namespace labels,
PodGroups, PDBs)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from common import podkeys
from common.kube import POD_GROUPS, KubeClient
from coordinator.adapters.kube.namespaces import namespace_watch
from coordinator.adapters.kube.objects import PDBS, ObjectCache
from coordinator.adapters.kube.pending import pending_watch
from coordinator.adapters.kube.writer import KubeClusterWriter, kube_nominator
from coordinator.core.framework.profile import Framework
from coordinator.engine.gangs.running import budgets
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.loop import PostFilterHook, RuntimeSettings, Scheduler
from coordinator.engine.service import SchedulerRuntime
from coordinator.engine.view import ClusterView
from coordinator.inventory.store import Inventory

__all__ = ["kube_gang_runtime", "kube_runtime"]


def kube_runtime(
    client: KubeClient,
    inventory: Inventory,
    *,
    inventory_synced: asyncio.Event | None = None,
    framework: Framework | None = None,
    settings: RuntimeSettings | None = None,
    post_filter: Sequence[PostFilterHook] = (),
    scheduler_name: str = podkeys.SCHEDULER_NAME,
    namespace: str | None = None,
    instance: str = "topos",
    events_client: KubeClient | None = None,
) -> SchedulerRuntime:
    """The scheduler fed by the pending-pod watch, binding through ``client``.

    ``inventory_synced``: set by whoever runs ``KubeSync`` once Nodes and bound pods are listed;
    scheduling waits for it, and for the first lists of pending pods and of namespaces (their
    labels, for affinity ``namespaceSelector``s). ``events_client``: Events go
    through it (default: ``client``), as kube-scheduler's go through their own client and rate
    limit."""
    scheduler = Scheduler(
        view=ClusterView(inventory),
        writer=KubeClusterWriter(client, instance=instance, events=events_client),
        framework=framework,
        settings=settings,
        post_filter=post_filter,
    )
    watch = pending_watch(
        client, scheduler.queue, scheduler_name=scheduler_name, namespace=namespace
    )
    namespaces = namespace_watch(client, scheduler)
    ready = [watch.synced, namespaces.synced]
    ready += [inventory_synced] if inventory_synced is not None else []
    return SchedulerRuntime(scheduler, feeds=[watch.run, namespaces.run], ready=ready)


def kube_gang_runtime(
    runtime: SchedulerRuntime,
    client: KubeClient,
    *,
    settings: GangSettings | None = None,
    namespace: str | None = None,
) -> GangRuntime:
    """Gangs on ``runtime`` with PodGroups and PodDisruptionBudgets watched through ``client``;
    scheduling waits until the PodGroups are listed."""
    holder: list[GangRuntime] = []

    def changed(key: tuple[str, str], obj: object) -> None:
        if holder:
            holder[0].step.podgroups_changed(*key)

    podgroups = ObjectCache(client, POD_GROUPS, namespace=namespace, on_change=changed)
    pdbs = ObjectCache(client, PDBS, namespace=namespace)
    gangs = GangRuntime(
        runtime,
        settings=settings,
        podgroups=podgroups.objects,
        budgets=lambda: budgets(pdbs.objects.values()),
        nominate=kube_nominator(client),
        feeds=[podgroups.run, pdbs.run],
        namespace=namespace,
    )
    holder.append(gangs)
    runtime.add_gate(podgroups.synced)
    return gangs
