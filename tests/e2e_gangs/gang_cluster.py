"""A leaf–spine GPU fabric on the real test control plane, a coordinator with its gang runtime, and
the parts of Kubernetes the test control plane lacks, played by the test.

Builds on the runtime's end-to-end helpers (``tests/e2e/e2e_cluster.py``: Node objects from
hardware profiles, the agents' hellos injected into the inventory, ``KubeSync`` feeding it, the
scheduler watching one namespace). Added here:

- :meth:`GangCluster.fabric` — ``spines × leaves × nodes`` Nodes labelled ``topos.io/spine`` /
  ``topos.io/leaf`` (leaf names count up across spines, so leaves of one spine are adjacent);
- :meth:`GangCluster.gang_coordinator` — the coordinator as it starts up, with
  :class:`~coordinator.gangs_runtime.GangRuntime` (PodGroup and PDB watches, gang step,
  preemption, recovery) attached;
- :class:`Controllers` — no kubelet and no controller-manager run here, so the test plays them:
  a pod being deleted (an eviction starts a graceful delete) is removed at once, as a kubelet
  would once its containers stopped; and pods labelled ``e2e/recreate`` are created again under
  the same name once gone, as their Job/StatefulSet would.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from e2e_cluster import RUN_LABEL, GpuCluster

from common.kube import EVENTS, PODS, KubeClient, KubeError, NotFound
from coordinator.gangs_runtime import GangRuntime, GangSettings
from coordinator.inventory.kube_sync import KubeSync
from coordinator.inventory.store import Inventory
from coordinator.runtime import RuntimeSettings, SchedulerRuntime

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CRD_FILE = DEPLOY / "crds" / "podgroups.scheduling.x-k8s.io.yaml"
LEAF = "topos.io/leaf"
SPINE = "topos.io/spine"
RECREATE = "e2e/recreate"


class ManualClock:
    """The inventory's clock, moved by the test (agent staleness without waiting)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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
    ) -> AsyncIterator[Coordinator]:
        """A coordinator starting up: inventory synced from the API server, agents' hellos,
        the scheduler over this test's nodes and namespace, and the gang runtime."""
        client = await KubeClient.connect(self.kubeconfig)
        clock = ManualClock()
        inventory = Inventory(stale_ttl_s=stale_ttl_s, clock=clock)
        synced = asyncio.Event()
        sync = KubeSync(client, inventory, on_synced=synced.set)
        self.hello(inventory)
        runtime = SchedulerRuntime.on_kube(
            client,
            inventory,
            inventory_synced=synced,
            namespace=self.namespace,
            settings=settings or RuntimeSettings(),
        )
        runtime.scheduler.view.node_filter = lambda node: node.labels.get(RUN_LABEL) == self.run
        gangs = GangRuntime.on_kube(
            runtime,
            client,
            settings=gang_settings or GangSettings(backoff_s=2.0),
            namespace=self.namespace,
        )
        sync_task = asyncio.create_task(sync.run())
        try:
            async with gangs, runtime:
                await asyncio.wait_for(runtime.started.wait(), 60)
                yield Coordinator(runtime, gangs, inventory, clock)
        finally:
            sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sync_task
            await client.close()

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
        self, selector: str, count: int, *, timeout_s: float = 60.0
    ) -> dict[str, str]:
        """Wait until ``count`` live pods match ``selector`` and every one is bound."""
        async with asyncio.timeout(timeout_s):
            while True:
                placed = await self.placement(selector)
                if len(placed) == count and all(placed.values()):
                    return {k: str(v) for k, v in placed.items()}
                await asyncio.sleep(0.1)

    async def events(self, name: str | None = None, reason: str | None = None) -> list[Any]:
        fields = []
        if name:
            fields.append(f"involvedObject.name={name}")
        if reason:
            fields.append(f"reason={reason}")
        listed = await self.kube.list(
            EVENTS, namespace=self.namespace, field_selector=",".join(fields) or None
        )
        return list(listed["items"])

    async def event(
        self, reason: str, *, name: str | None = None, timeout_s: float = 30.0
    ) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while True:
                found = await self.events(name, reason)
                if found:
                    return dict(found[0])
                await asyncio.sleep(0.1)

    async def condition(self, name: str, contains: str, *, timeout_s: float = 30.0) -> str:
        """The pod's ``PodScheduled=False`` message once it contains ``contains``."""
        async with asyncio.timeout(timeout_s):
            while True:
                pod = await self.pod(name)
                for cond in pod.get("status", {}).get("conditions") or ():
                    if cond.get("type") == "PodScheduled" and contains in cond.get("message", ""):
                        return str(cond["message"])
                await asyncio.sleep(0.1)

    async def delete_pods(self, selector: str) -> None:
        for pod in await self.pods(selector):
            with contextlib.suppress(NotFound):
                await self.kube.delete(
                    PODS, pod["metadata"]["name"], namespace=self.namespace, grace_period_seconds=0
                )

    async def set_node_ready(self, node: str, ready: bool) -> None:
        obj = await self.kube.get(NODES_RESOURCE, node)
        conditions = obj["status"]["conditions"]
        for cond in conditions:
            if cond["type"] == "Ready":
                cond["status"] = "True" if ready else "False"
                cond["reason"] = "KubeletReady" if ready else "NodeStatusUnknown"
        await self.kube.patch(
            NODES_RESOURCE, node, {"status": {"conditions": conditions}}, subresource="status"
        )


from common.kube import NODES as NODES_RESOURCE  # noqa: E402


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
) -> dict[str, Any]:
    """A training worker as a Job's or StatefulSet's template would make it."""
    meta: dict[str, Any] = {
        "name": name,
        "labels": {
            "topos.io/gang": gang,
            "topos.io/gang-min": str(min_member),
            **({RECREATE: "true"} if recreate else {}),
            **dict(labels or {}),
        },
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    spec: dict[str, Any] = {
        "schedulerName": "topos",
        "containers": [
            {
                "name": "worker",
                "image": "trainer:1",
                "resources": {
                    "requests": {"cpu": cpu, "memory": "8Gi"},
                    "limits": {"nvidia.com/gpu": str(gpus)} if gpus else {},
                },
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class Controllers:
    """The kubelet's and the workload controllers' part, for one namespace (see module doc)."""

    def __init__(self, cluster: GangCluster) -> None:
        self.cluster = cluster
        self._saved: dict[str, dict[str, Any]] = {}
        self.recreated: list[tuple[str, float]] = []
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
                "labels": dict(meta.get("labels") or {}),
                "annotations": {
                    k: v
                    for k, v in (meta.get("annotations") or {}).items()
                    if not k.startswith("topos.io/assigned") and k != "topos.io/placement-score"
                },
            },
            "spec": spec,
        }

    async def _round(self) -> None:
        kube, ns = self.cluster.kube, self.cluster.namespace
        live = await self.cluster.pods()
        names = set()
        for pod in live:
            meta = pod["metadata"]
            names.add(meta["name"])
            if (meta.get("labels") or {}).get(RECREATE):
                self._saved[meta["name"]] = self._template(pod)
            if meta.get("deletionTimestamp"):
                with contextlib.suppress(NotFound):
                    await kube.delete(
                        PODS, meta["name"], namespace=ns, grace_period_seconds=0, uid=meta["uid"]
                    )
        for name, template in tuple(self._saved.items()):
            if name not in names:
                with contextlib.suppress(KubeError):
                    await kube.create(PODS, template, namespace=ns)
                    self.recreated.append((name, time.monotonic()))

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(KubeError):
                await self._round()
            await asyncio.sleep(0.1)

    def forget(self, name: str) -> None:
        """Stop recreating ``name`` (the test deleted it on purpose)."""
        self._saved.pop(name, None)

    async def __aenter__(self) -> Controllers:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def install_crd(kubectl: Callable[..., Any]) -> None:
    done = kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    assert done.returncode == 0, done.stderr
    done = kubectl(
        "wait",
        "--for=condition=Established",
        "crd/podgroups.scheduling.x-k8s.io",
        "--timeout=60s",
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
