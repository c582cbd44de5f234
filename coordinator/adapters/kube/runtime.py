"""The scheduler runtime and the gang runtime on Kubernetes: the engine's ports filled with the
API server (writer, nominator) and its feeds with reflectors (pending pods, namespace labels,
the DRA objects, workload owners whose keys pods inherit, the selectors of Services and
controllers (default topology spreading), the four kinds of PodGroup (scheduler-plugins', the
Workload API's, Volcano's, KAI's), PDBs) and the PodGroup status writers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from common.kube import POD_GROUPS, KubeClient
from common.kube.recorder import EventRecorder
from coordinator.adapters.kube.domainwarnings import ComputeDomainWarnings
from coordinator.adapters.kube.dra import dra_watch
from coordinator.adapters.kube.foreigngroups import ForeignGroupStatusWriter, foreign_group_caches
from coordinator.adapters.kube.groupstatus import PodGroupStatusWriter
from coordinator.adapters.kube.namespaces import namespace_watch
from coordinator.adapters.kube.objects import (
    PDBS,
    WORKLOAD_POD_GROUPS,
    MergedObjects,
    ObjectCache,
    object_key,
)
from coordinator.adapters.kube.owners import Owners, inheriting_pending_watch
from coordinator.adapters.kube.volumes import volume_watches
from coordinator.adapters.kube.workloads import workload_watches
from coordinator.adapters.kube.writer import KubeClusterWriter, kube_nominator
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.profiles import Profiles
from coordinator.core.gangs.identity import workload_group_key
from coordinator.engine.gangs.running import bound_pods, budgets
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.loop import PostFilterHook, RuntimeSettings, Scheduler
from coordinator.engine.service import SchedulerRuntime
from coordinator.engine.view import ClusterView
from coordinator.inventory.dra import DraStore
from coordinator.inventory.store import Inventory

__all__ = ["kube_gang_runtime", "kube_runtime"]


def kube_runtime(
    client: KubeClient,
    inventory: Inventory,
    *,
    inventory_synced: asyncio.Event | None = None,
    framework: Framework | Profiles | None = None,
    settings: RuntimeSettings | None = None,
    post_filter: Sequence[PostFilterHook] = (),
    namespace: str | None = None,
    instance: str = "topos",
    events_client: KubeClient | None = None,
) -> SchedulerRuntime:
    """The scheduler fed by the pending-pod watches (one per profile: a field selector names
    one ``schedulerName``), binding through ``client``.

    ``inventory_synced``: set by whoever runs ``KubeSync`` once Nodes and bound pods are listed;
    scheduling waits for it, and for the first lists of pending pods and of namespaces (their
    labels, for affinity ``namespaceSelector``s) and of the DRA objects (ResourceSlices,
    DeviceClasses, ResourceClaims of ``namespace``; none where ``resource.k8s.io/v1`` is not
    served). ``events_client``: Events go
    through it (default: ``client``), as kube-scheduler's go through their own client and rate
    limit; a ComputeDomain placement cannot read gets a Warning Event through it too."""
    dra = DraStore()
    scheduler = Scheduler(
        view=ClusterView(inventory, dra=dra),
        writer=KubeClusterWriter(client, instance=instance, events=events_client),
        framework=framework,
        settings=settings,
        post_filter=post_filter,
    )
    owners = Owners(client, namespace=namespace)  # pods inherit their Job's / Deployment's keys
    watches = [
        inheriting_pending_watch(
            client, scheduler.queue, owners, scheduler_name=name, namespace=namespace
        )
        for name in scheduler.profiles.names
    ]
    namespaces = namespace_watch(client, scheduler)
    claims = dra_watch(client, dra, namespace=namespace)
    # a ComputeDomain refused (spec.numNodes) gets a Warning Event naming the field and value
    dra.subscribe(
        ComputeDomainWarnings(dra, EventRecorder(events_client or client), instance=instance)
    )
    # Services' and controllers' selectors: PodTopologySpread's default constraints.
    workloads = workload_watches(client, scheduler.view.workloads, owners, namespace=namespace)
    ready = [*(w.synced for w in watches), namespaces.synced, *claims.synced, *owners.synced]
    # PersistentVolumeClaims, PersistentVolumes, StorageClasses: VolumeBinding.
    workloads += volume_watches(client, scheduler.view.volumes, namespace=namespace)
    ready += [w.synced for w in workloads]
    ready += [inventory_synced] if inventory_synced is not None else []
    feeds = [
        *(w.run for w in watches),
        namespaces.run,
        *claims.feeds,
        *owners.feeds,
        *(w.run for w in workloads),
    ]
    jobs = owners.caches["Job"].objects
    return SchedulerRuntime(
        scheduler, feeds=feeds, ready=ready, jobs=jobs.values, controller=owners.controller
    )


def kube_gang_runtime(
    runtime: SchedulerRuntime,
    client: KubeClient,
    *,
    settings: GangSettings | None = None,
    namespace: str | None = None,
) -> GangRuntime:
    """Gangs on ``runtime`` with PodGroups (scheduler-plugins', the Workload API's, Volcano's and
    KAI's) and PodDisruptionBudgets watched through ``client``, and the PodGroups' status written;
    scheduling waits until the PodGroups are listed (a type the server does not serve counts as
    listed)."""
    holder: list[GangRuntime] = []

    def changed(key: tuple[str, str], obj: object) -> None:
        if holder:
            holder[0].step.podgroups_changed(*key)

    def workload_key(obj: dict[str, object]) -> tuple[str, str]:
        return workload_group_key(*object_key(obj))

    podgroups = ObjectCache(client, POD_GROUPS, namespace=namespace, on_change=changed)
    workload_groups = ObjectCache(
        client, WORKLOAD_POD_GROUPS, namespace=namespace, on_change=changed, key=workload_key
    )
    foreign_seen = asyncio.Event()  # the Volcano/KAI member-pod watch starts then

    def foreign_changed(key: tuple[str, str], obj: object) -> None:
        changed(key, obj)
        if obj is not None:
            foreign_seen.set()

    foreign = foreign_group_caches(client, namespace=namespace, on_change=foreign_changed)
    pdbs = ObjectCache(client, PDBS, namespace=namespace)
    scheduler = runtime.scheduler
    status = PodGroupStatusWriter(
        client,
        podgroups=podgroups.objects,
        workload_groups=workload_groups.objects,
        gangs=lambda: holder[0].step.manager.statuses() if holder else (),
        bound=lambda: bound_pods(scheduler.inventory),
        scheduler_name=runtime.scheduler.profiles.names,
        namespace=namespace,
        started=runtime.started,
        active=lambda: scheduler.binder.may_bind(),
    )
    foreign_status = ForeignGroupStatusWriter(
        client,
        groups={source: cache.objects for source, cache in foreign.items()},
        gangs=lambda: holder[0].step.manager.statuses() if holder else (),
        scheduler_names=runtime.scheduler.profiles.names,
        namespace=namespace,
        started=runtime.started,
        active=lambda: scheduler.binder.may_bind(),
        present=foreign_seen,
    )
    gangs = GangRuntime(
        runtime,
        settings=settings,
        podgroups=MergedObjects(
            podgroups.objects, workload_groups.objects, *(c.objects for c in foreign.values())
        ),
        budgets=lambda: budgets(pdbs.objects.values()),
        nominate=kube_nominator(client),
        feeds=[
            podgroups.run,
            workload_groups.run,
            *(c.run for c in foreign.values()),
            pdbs.run,
            *status.feeds,
            *foreign_status.feeds,
        ],
        namespace=namespace,
    )
    holder.append(gangs)
    for gate in (podgroups, workload_groups, *foreign.values()):
        runtime.add_gate(gate.synced)
    return gangs
