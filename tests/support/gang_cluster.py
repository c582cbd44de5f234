"""A leaf–spine GPU fabric on the real test control plane, a coordinator with its gang runtime, and
the parts of Kubernetes the test control plane lacks, played by the test.

Builds on the runtime's end-to-end helpers (:mod:`tests.support.gpu_cluster`: Node objects from
hardware profiles, the agents' hellos injected into the inventory, ``KubeSync`` feeding it, the
scheduler watching one namespace). Added here:

- :meth:`GangCluster.fabric` — ``spines × leaves × nodes`` Nodes labelled ``topos.io/spine`` /
  ``topos.io/leaf`` (leaf names count up across spines, so leaves of one spine are adjacent);
- :meth:`GangCluster.gang_coordinator` — the coordinator as it starts up, with
  :class:`~coordinator.engine.gangs.service.GangRuntime` (PodGroup and PDB watches, gang step,
  preemption, recovery) attached;
- :meth:`GangCluster.job` — a real Job for a gang's pods to belong to (the controller-manager's
  garbage collector deletes pods whose owner does not exist), which the Job controller leaves to
  the test (``spec.managedBy``);
- :class:`Controllers` — no kubelet runs here and the Job controller keeps off those Jobs, so the
  test plays them: a pod being deleted (an eviction starts a graceful delete) is removed at once,
  as a kubelet would once its containers stopped (not on a node in ``no_kubelet``: a deleted
  Node's); and pods labelled ``e2e/recreate`` are created again under the same name once gone, as
  their Job/StatefulSet would.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.kube import NODES, PODS, ClientSettings, KubeClient, KubeError, NotFound, Resource
from coordinator.adapters.kube.runtime import kube_gang_runtime
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.loop import RuntimeSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster import pods
from devcluster.kube_wait import (
    DEFAULT_TIMEOUT_S,
    scheduled_message,
    wait_for,
    wait_for_object,
    wait_for_pods,
)
from tests.support.clock import ManualClock
from tests.support.gpu_cluster import GpuCluster
from tests.support.nvl72 import tray_labels

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LEAF = "topos.io/leaf"
SPINE = "topos.io/spine"
RECREATE = "e2e/recreate"
JOBS = Resource("batch", "v1", "jobs", namespaced=True, kind="Job")
MANAGED_BY = "topos.io/e2e-test"


@dataclass
class Coordinator:
    runtime: SchedulerRuntime
    gangs: GangRuntime
    inventory: Inventory
    clock: ManualClock


@dataclass
class GangCluster(GpuCluster):
    leaf_of: dict[str, str] = field(default_factory=dict)
    spine_of: dict[str, str] = field(default_factory=dict)

    async def fabric(
        self,
        *,
        spines: int,
        leaves_per_spine: int,
        nodes_per_leaf: int,
        profile: str = "dgx-a100",
    ) -> list[str]:
        """Nodes in ``leaf-1 … leaf-N`` under ``spine-1 … spine-M``; returns their names."""
        specs = []
        for s in range(spines):
            for lf in range(leaves_per_spine):
                leaf = f"leaf-{s * leaves_per_spine + lf + 1}"
                for k in range(nodes_per_leaf):
                    specs.append((f"n{leaf[5:]}x{k}", leaf, f"spine-{s + 1}"))
        slots = asyncio.Semaphore(8)

        async def one(short: str, leaf: str, spine: str) -> str:
            async with slots:
                name = await self.add_node(short, profile, labels_extra={LEAF: leaf, SPINE: spine})
            self.leaf_of[name] = leaf
            self.spine_of[name] = spine
            return name

        return list(await asyncio.gather(*(one(*s) for s in specs)))

    @contextlib.asynccontextmanager
    async def gang_coordinator(
        self,
        *,
        gang_settings: GangSettings | None = None,
        settings: RuntimeSettings | None = None,
        stale_ttl_s: float = 3600.0,
        client_settings: ClientSettings | None = None,
    ) -> AsyncIterator[Coordinator]:
        """A coordinator starting up: inventory synced from the API server, agents' hellos,
        the scheduler over this test's nodes and namespace, and the gang runtime."""
        clock = ManualClock()
        inventory = Inventory(stale_ttl_s=stale_ttl_s, clock=clock)
        attached: list[GangRuntime] = []

        def gang_runtime(client: KubeClient, runtime: SchedulerRuntime) -> GangRuntime:
            gangs = kube_gang_runtime(
                runtime,
                client,
                settings=gang_settings or GangSettings(backoff_s=2.0),
                namespace=self.namespace,
            )
            attached.append(gangs)
            return gangs

        async with self.coordinator(
            settings=settings or RuntimeSettings(),
            inventory=inventory,
            attach=gang_runtime,
            client_settings=client_settings,
        ) as runtime:
            yield Coordinator(runtime, attached[0], inventory, clock)

    async def job(self, name: str) -> str:
        """A Job ``name`` (replacing one of that name, as ``kubectl delete job`` then
        ``kubectl apply`` would) whose pods the test makes itself; returns its UID, the
        ``owner`` of :func:`gang_pod`."""
        with contextlib.suppress(NotFound):
            await self.kube.delete(
                JOBS, name, namespace=self.namespace, propagation_policy="Background"
            )
        await wait_for(
            self.kube,
            JOBS,
            lambda jobs: True if not jobs else None,
            namespace=self.namespace,
            name=name,
            what=f"the old Job {name} gone",
        )
        template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "w"}]}}
        job = await self.kube.create(
            JOBS,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name},
                "spec": {"managedBy": MANAGED_BY, "template": template},
            },
            namespace=self.namespace,
        )
        return str(job["metadata"]["uid"])

    # --- reading back --------------------------------------------------------------------------

    async def pods(self, selector: str | None = None) -> list[dict[str, Any]]:
        listed = await self.kube.list(PODS, namespace=self.namespace, label_selector=selector)
        return list(listed["items"])

    async def placement(self, selector: str) -> dict[str, str | None]:
        """Pod name → node (None while pending) for pods matching ``selector``."""
        return {
            p["metadata"]["name"]: p["spec"].get("nodeName")
            for p in await self.pods(selector)
            if not p["metadata"].get("deletionTimestamp")
        }

    async def all_bound(
        self,
        selector: str,
        count: int,
        *,
        replaced: Mapping[str, str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> dict[str, str]:
        """Pod name → node once ``count`` live pods match ``selector`` and every one is bound;
        with ``replaced`` (pod name → uid), only once each of those pods is a new one."""
        gone = dict(replaced or {})

        def placed(pods: Sequence[dict[str, Any]]) -> dict[str, str] | None:
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in live}
            uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in live}
            if len(nodes) != count or not all(nodes.values()):
                return None
            if any(uids.get(name, uid) == uid for name, uid in gone.items()):
                return None
            return {k: str(v) for k, v in nodes.items()}

        return await wait_for_pods(
            self.kube,
            self.namespace,
            placed,
            label_selector=selector,
            timeout_s=timeout_s,
            what=f"{count} bound pods matching {selector}"
            + (f" ({', '.join(gone)} replaced)" if gone else ""),
        )

    async def none_left(self, selector: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait until no live pod matches ``selector``."""

        def empty(pods: Sequence[dict[str, Any]]) -> bool | None:
            return not any(not p["metadata"].get("deletionTimestamp") for p in pods) or None

        await wait_for_pods(
            self.kube,
            self.namespace,
            empty,
            label_selector=selector,
            timeout_s=timeout_s,
            what=f"no pods matching {selector}",
        )

    async def condition(
        self, name: str, contains: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> str:
        """The pod's ``PodScheduled=False`` message once it contains ``contains``."""
        pod = await wait_for_object(
            self.kube,
            PODS,
            name,
            lambda pod: contains in (scheduled_message(pod) or ""),
            namespace=self.namespace,
            timeout_s=timeout_s,
            what=f"pod {name}'s PodScheduled condition to say {contains!r}",
        )
        return str(scheduled_message(pod))

    async def delete_pods(self, selector: str) -> None:
        for pod in await self.pods(selector):
            with contextlib.suppress(NotFound):
                await self.kube.delete(
                    PODS, pod["metadata"]["name"], namespace=self.namespace, grace_period_seconds=0
                )

    async def set_node_ready(self, node: str, ready: bool) -> None:
        obj = await self.kube.get(NODES, node)
        conditions = obj["status"]["conditions"]
        for cond in conditions:
            if cond["type"] == "Ready":
                cond["status"] = "True" if ready else "False"
                cond["reason"] = "KubeletReady" if ready else "NodeStatusUnknown"
        await self.kube.patch(
            NODES, node, {"status": {"conditions": conditions}}, subresource="status"
        )


def gang_pod(
    name: str,
    gang: str,
    min_member: int,
    *,
    gpus: int = 8,
    cpu: str = "8",
    priority_class: str | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    recreate: bool = False,
    owner: str | None = None,
) -> dict[str, Any]:
    """A training worker as a Job's or StatefulSet's template would make it; ``recreate`` marks
    it for the fake controller to create again once deleted; ``owner``: the UID of the Job
    ``gang`` that made it (its controller ``ownerReference``; see :meth:`GangCluster.job`)."""
    obj = pods.pod(
        name,
        namespace=None,
        gang=(gang, min_member),
        gpus=gpus,
        cpu=cpu,
        memory="8Gi",
        priority_class=priority_class,
        annotations=annotations,
        labels={**({RECREATE: "true"} if recreate else {}), **dict(labels or {})},
    )
    if owner is not None:
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": gang, "uid": owner}
        obj["metadata"]["ownerReferences"] = [{**ref, "controller": True}]
    return obj


class Controllers:
    """The kubelet's and the workload controllers' part, for one namespace (see module doc)."""

    def __init__(self, cluster: GangCluster, *, terminal_phase: bool = False) -> None:
        self.cluster = cluster
        #: A pod being deleted is first marked ``Failed``, as a kubelet does once its containers
        #: stopped (a Job with a ``podFailurePolicy`` recreates a pod only once it is terminal).
        self.terminal_phase = terminal_phase
        #: Nodes whose kubelet is gone (a deleted Node): their pods being deleted stay so.
        self.no_kubelet: set[str] = set()
        self._saved: dict[str, dict[str, Any]] = {}
        self._task: asyncio.Task[None] | None = None

    def _template(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        meta = pod["metadata"]
        spec = copy.deepcopy(pod["spec"])
        for key in ("nodeName", "priority"):
            spec.pop(key, None)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": meta["name"],
                # Its controller's reference: recovery moves only pods a controller recreates.
                **{k: meta[k] for k in ("ownerReferences",) if k in meta},
                "labels": dict(meta.get("labels") or {}),
                "annotations": {
                    k: v
                    for k, v in (meta.get("annotations") or {}).items()
                    if not k.startswith("topos.io/assigned") and k != "topos.io/placement-score"
                },
            },
            "spec": spec,
        }

    async def _round(self) -> str:
        kube, ns = self.cluster.kube, self.cluster.namespace
        listed = await kube.list(PODS, namespace=ns)
        live = listed["items"]
        names = set()
        for pod in live:
            meta = pod["metadata"]
            names.add(meta["name"])
            if (meta.get("labels") or {}).get(RECREATE):
                self._saved[meta["name"]] = self._template(pod)
            if meta.get("deletionTimestamp") and pod["spec"].get("nodeName") not in self.no_kubelet:
                phase = (pod.get("status") or {}).get("phase")
                if self.terminal_phase and phase not in ("Failed", "Succeeded"):
                    with contextlib.suppress(NotFound):
                        await kube.patch(
                            PODS,
                            meta["name"],
                            {"status": {"phase": "Failed"}},
                            namespace=ns,
                            subresource="status",
                        )
                with contextlib.suppress(NotFound):
                    await kube.delete(
                        PODS, meta["name"], namespace=ns, grace_period_seconds=0, uid=meta["uid"]
                    )
        for name, template in tuple(self._saved.items()):
            if name not in names:
                with contextlib.suppress(KubeError):
                    await kube.create(PODS, template, namespace=ns)
        return str(listed["resourceVersion"])

    async def _run(self) -> None:
        """A round now and after every change to the namespace's pods (a watch, not a timer)."""
        kube, ns = self.cluster.kube, self.cluster.namespace
        while True:
            try:
                version = await self._round()
                async for _ in kube.watch(
                    PODS, namespace=ns, resource_version=version, timeout_seconds=30
                ):
                    await self._round()
            except KubeError:
                await asyncio.sleep(0.1)  # back off before listing again

    async def __aenter__(self) -> Controllers:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def install_crd(kubectl: Callable[..., Any], name: str = "podgroups.scheduling.x-k8s.io") -> None:
    """Apply ``deploy/crds/<name>.yaml`` (or, for a CRD Topos does not ship but tests need,
    ``tests/support/crds/<name>.yaml``) and wait until it is served."""
    path = DEPLOY / "crds" / f"{name}.yaml"
    if not path.exists():
        path = Path(__file__).resolve().parent / "crds" / f"{name}.yaml"
    done = kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    assert done.returncode == 0, done.stderr
    done = kubectl(
        "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s", timeout=90
    )
    assert done.returncode == 0, done.stderr


async def two_racks(cluster: GangCluster) -> dict[str, int]:
    """Two GB200 NVL72 racks of 4 trays in one leaf (``r<rack>-t<i>``, each labelled with its
    NVLink clique): node name → its rack (1 or 2)."""
    rack_of: dict[str, int] = {}
    for rack in (1, 2):
        for i in range(1, 5):
            labels = tray_labels(rack)
            name = await cluster.add_node(f"r{rack}-t{i}", "gb200-nvl72", labels_extra=labels)
            rack_of[name] = rack
    return rack_of


def pinned_pod(name: str, node: str, gpus: int, labels: Mapping[str, str]) -> dict[str, Any]:
    """A bare pod of ``gpus`` GPUs and 8 CPUs that only ``node`` may take."""
    return pods.pod(
        name,
        namespace=None,
        gpus=gpus,
        cpu="8",
        labels=dict(labels),
        node_selector={"kubernetes.io/hostname": node},
    )


async def hold_trays(cluster: GangCluster, nodes: Sequence[str]) -> None:
    """A bare 4-GPU pod (``held-<k>``, label ``app=held``) bound on each of ``nodes``: half of
    each tray taken by pods no gang owns."""
    for k, node in enumerate(nodes):
        await cluster.create(pinned_pod(f"held-{k}", node, 4, {"app": "held"}))
    await cluster.all_bound("app=held", len(nodes))
