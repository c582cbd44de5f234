"""A GPU cluster on the real test control plane, and a Topos scheduler runtime over it.

Nodes are Node objects created through the API from hardware profiles: the agent's own labels and
annotations (``common.labeling``), the capacity the kubelet and device plugin would report
(``devcluster.nodes.capacity``), Ready. No kubelet runs; the agent's capacity-stream hello is
injected into the coordinator's inventory directly. The inventory is fed from the API server by
``KubeSync`` exactly as in production, and the runtime watches pending pods of one namespace and
binds through the API.

Each test gets its own run label: the runtime only places pods on nodes carrying it, so Nodes
other tests left in the shared control plane never take our pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.devices import discover_profile
from common.kube import EVENTS, NODES, PODS, ClientSettings, KubeClient, Resource
from common.labeling import LabelingSettings, labels
from common.model import NodeTopology
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.adapters.kube.runtime import kube_runtime
from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.profiles import Profiles
from coordinator.core.registry import build_profiles
from coordinator.engine.loop import RuntimeSettings
from coordinator.engine.service import SchedulerRuntime
from coordinator.inventory.store import Inventory
from devcluster.dra import publish_classes, publish_node
from devcluster.kube_wait import (
    DEFAULT_TIMEOUT_S,
    scheduled_message,
    wait_for_event,
    wait_for_object,
)
from devcluster.nodes import SimNode, capacity, node_status

RUN_LABEL = "topos-e2e/run"
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False, "PriorityClass")
Kubectl = Callable[..., subprocess.CompletedProcess[str]]
Attach = Callable[[KubeClient, SchedulerRuntime], contextlib.AbstractAsyncContextManager[Any]]


@dataclass
class GpuCluster:
    kube: KubeClient
    kubeconfig: Path
    namespace: str
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    topologies: dict[str, NodeTopology] = field(default_factory=dict)
    runtime: SchedulerRuntime | None = None

    async def add_node(
        self,
        name: str,
        profile: str,
        *,
        labels_extra: Mapping[str, str] | None = None,
        taints: Iterable[Mapping[str, str]] = (),
        gfd: bool = True,
        dra: bool = False,
    ) -> str:
        """A Ready Node from ``profile`` with the agent's labels; returns its (unique) name.
        With ``dra`` its GPUs are NVIDIA DRA devices (``tests.support.dra``: the DeviceClasses and
        a ResourceSlice whose device ``gpu-<i>`` has the UUID of the agent's GPU ``i``) and the
        node has no device-plugin resources."""
        node = f"{name}-{self.run}"
        topology = discover_profile(profile, hostname=node)
        published = labels(topology, LabelingSettings(gfd=gfd))
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node,
                "labels": {
                    **published.labels,
                    "kubernetes.io/hostname": node,
                    RUN_LABEL: self.run,
                    **dict(labels_extra or {}),
                },
                "annotations": dict(published.annotations),
            },
            "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        }
        await self.kube.create(NODES, body)
        sim = SimNode(name=node, profile=profile, leaf="", spine="", topology=topology)
        status = node_status(sim, device_plugin=not dra)
        await self.kube.patch(NODES, node, status, subresource="status")
        # The API server's TaintNodesByCondition admission adds node.kubernetes.io/not-ready on
        # create; the node lifecycle controller (not running here) would lift it once Ready.
        await self.kube.patch(NODES, node, {"spec": {"taints": [dict(t) for t in taints] or None}})
        self.topologies[node] = topology
        # Every profile used here has devices: whole GPUs, MIG instances or both.
        assert any(k.startswith("nvidia.com/") for k in capacity(topology))
        if dra:
            await publish_classes(self.kube)
            await publish_node(self.kube, node, profile)
        return node

    def hello(self, inventory: Inventory) -> None:
        """What each node's agent would send on connecting."""
        for node, topology in self.topologies.items():
            inventory.apply_hello(
                node,
                agent_id=f"e2e-{node}",
                agent_version="e2e",
                seq=0,
                topology=topology,
                allocations=(),
            )

    async def create(self, manifest: str | Mapping[str, Any]) -> dict[str, Any]:
        """Create one object from YAML (or a dict): Pods in our namespace, PriorityClasses."""
        obj = dict(yaml.safe_load(manifest) if isinstance(manifest, str) else manifest)
        if obj.get("kind") == "PriorityClass":
            return await self.kube.create(PRIORITY_CLASSES, obj)
        assert obj.get("kind", "Pod") == "Pod", obj.get("kind")
        return await self.kube.create(PODS, obj, namespace=self.namespace)

    async def create_all(self, manifests: str) -> list[dict[str, Any]]:
        return [await self.create(doc) for doc in yaml.safe_load_all(manifests) if doc]

    async def pod(self, name: str) -> dict[str, Any]:
        return await self.kube.get(PODS, name, namespace=self.namespace)

    async def bound(self, name: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """The pod once it has a node (watched, not polled)."""
        try:
            return await wait_for_object(
                self.kube,
                PODS,
                name,
                lambda pod: bool(pod["spec"].get("nodeName")),
                namespace=self.namespace,
                timeout_s=timeout_s,
                what=f"pod {name} to be bound",
            )
        except AssertionError as exc:
            attempt = None
            if self.runtime is not None:
                attempt = self.runtime.scheduler.last_attempt(f"{self.namespace}/{name}")
            raise AssertionError(
                f"{exc}; last attempt: {attempt and (attempt.outcome, attempt.message)}"
            ) from None

    async def unschedulable(self, name: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
        """The pod's ``PodScheduled=False`` message once the scheduler has explained itself."""
        pod = await wait_for_object(
            self.kube,
            PODS,
            name,
            lambda pod: (
                bool(pod["spec"].get("nodeName"))
                or scheduled_message(pod, status="False") is not None
            ),
            namespace=self.namespace,
            timeout_s=timeout_s,
            what=f"pod {name} to be explained as unschedulable",
        )
        assert not pod["spec"].get("nodeName"), f"{name} was bound"
        conditions = pod.get("status", {}).get("conditions") or ()
        cond = next(c for c in conditions if c.get("type") == "PodScheduled")
        assert cond.get("reason") == "Unschedulable"
        return str(cond.get("message", ""))

    async def events(self, name: str | None = None, reason: str | None = None) -> list[Any]:
        """The Events in this namespace now (about pod ``name``, with ``reason``)."""
        fields = [f"involvedObject.name={name}"] if name else []
        fields += [f"reason={reason}"] if reason else []
        listed = await self.kube.list(
            EVENTS, namespace=self.namespace, field_selector=",".join(fields) or None
        )
        return list(listed["items"])

    async def event(
        self, reason: str, *, name: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> dict[str, Any]:
        """The first Event with ``reason`` (about pod ``name``) in this namespace.

        The scheduler writes Events in the background after the bind or the condition, so a
        test that reads them (``kubectl describe``) waits for the one it needs first."""
        return await wait_for_event(
            self.kube, self.namespace, reason=reason, name=name, timeout_s=timeout_s
        )

    async def warning(self, name: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """The first ``FailedScheduling`` Event about pod ``name``."""
        return await self.event("FailedScheduling", name=name, timeout_s=timeout_s)

    @contextlib.asynccontextmanager
    async def coordinator(
        self,
        *,
        settings: RuntimeSettings | None = None,
        inventory: Inventory | None = None,
        attach: Attach | None = None,
        client_settings: ClientSettings | None = None,
        profiles: Profiles | None = None,
        kubeconfig: Path | None = None,
        gate: asyncio.Event | None = None,
    ) -> AsyncIterator[SchedulerRuntime]:
        """A fresh inventory synced from the API server, the agents' hellos, and the runtime —
        as a coordinator process starting up, scheduling only this test's namespace onto this
        test's nodes. ``attach(client, runtime)`` adds a component (the gang runtime) that is
        entered before the scheduler starts and left after it stops; ``client_settings``: the
        coordinator's client (its QPS/burst), which Events share here; ``profiles``: the
        scheduling profiles (default: the coordinator's, ``topos`` and ``topos-agentpools``);
        ``kubeconfig``: the coordinator's own (default: the cluster's); ``gate``: scheduling also
        waits for it (the runtime is yielded before its first cycle)."""
        client = await KubeClient.connect(kubeconfig or self.kubeconfig, settings=client_settings)
        inventory = inventory if inventory is not None else Inventory(stale_ttl_s=3600)
        synced = asyncio.Event()
        sync = KubeSync(client, inventory, on_synced=synced.set)
        self.hello(inventory)
        runtime = kube_runtime(
            client,
            inventory,
            inventory_synced=synced,
            namespace=self.namespace,
            settings=settings,
            framework=profiles if profiles is not None else build_profiles(load_config(None)),
        )
        runtime.scheduler.view.node_filter = lambda node: node.labels.get(RUN_LABEL) == self.run
        if gate is not None:
            runtime.add_gate(gate)
        sync_task = asyncio.create_task(sync.run())
        try:
            async with contextlib.AsyncExitStack() as stack:
                if attach is not None:
                    await stack.enter_async_context(attach(client, runtime))
                await stack.enter_async_context(runtime)
                if gate is None:
                    await asyncio.wait_for(runtime.started.wait(), DEFAULT_TIMEOUT_S)
                self.runtime = runtime
                yield runtime
        finally:
            self.runtime = None
            sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sync_task
            await client.close()


def assignment(pod: Mapping[str, Any]) -> tuple[str, list[str], list[int]]:
    """(node, assigned device ids, assigned NUMA nodes) as written on the pod."""
    ann = pod["metadata"].get("annotations") or {}
    gpus = [g for g in ann.get("topos.io/assigned-gpus", "").split(",") if g]
    numa = [int(n) for n in ann.get("topos.io/assigned-numa", "").split(",") if n]
    return str(pod["spec"]["nodeName"]), gpus, numa


def gpu_indices(topology: NodeTopology, uuids: Iterable[str]) -> list[int]:
    by_uuid = {g.uuid: g.index for g in topology.gpus}
    return sorted(by_uuid[u] for u in uuids)


def describe(kubectl: Kubectl, namespace: str, name: str) -> str:
    out = kubectl("describe", "pod", name, "-n", namespace)
    assert out.returncode == 0, out.stderr
    return out.stdout
