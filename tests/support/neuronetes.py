"""NeuroNetes AgentPools on the real test control plane: the CRDs installed from ``deploy/crds``,
the guide's manifests, the controller over a test's namespace, a kubelet played by the test and a
metrics server speaking vLLM's names in the Prometheus text format.

- :func:`install_crds` — ``kubectl apply`` of both CRDs, waiting until they are Established;
- :func:`guide_manifests` — every ``AgentPool`` / ``ToolBinding`` YAML block of the NeuroNetes
  guide (``/work/shared/seeds/000_*.txt`` or ``../shared``), or ``None`` where it is not there;
  :data:`GUIDE_SHAPES` holds our own copies of those shapes so the tests run without it;
- :class:`Kubelet` — bound pods of the namespace become Running and Ready with a pod IP, and
  pods being deleted are removed at once (no kubelet runs here);
- :class:`MetricsServer` — ``/<pod>/metrics`` per pod and ``/queue`` for a ToolBinding, the
  load set by the test; counters grow with wall-clock time at the set throughput;
- :func:`controller` — :class:`~coordinator.neuronetes.kube.controller.NeuronetesController` on the
  test's namespace, node labels read from the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from common.kube import NODES, PODS, KubeClient, KubeError, NotFound
from coordinator.adapters.kube.agentpools import AgentPoolWriter
from coordinator.neuronetes.decide.hooks import Policy
from coordinator.neuronetes.decide.settings import NeuronetesSettings
from coordinator.neuronetes.kube.controller import NeuronetesController
from tests.support.deploy import DEPLOY
from tests.support.gpu_cluster import RUN_LABEL

CRDS = ("agentpools.neuronetes.io", "toolbindings.neuronetes.io")
Kubectl = Callable[..., Any]

_SEEDS = (Path("/work/shared/seeds"), Path(__file__).resolve().parents[3] / "shared" / "seeds")


def install_crds(kubectl: Kubectl) -> None:
    args: list[str] = []
    for name in CRDS:
        args += ["-f", str(DEPLOY / "crds" / f"{name}.yaml")]
    done = kubectl("apply", "--server-side", "--force-conflicts", *args)
    assert done.returncode == 0, done.stderr
    for name in CRDS:
        done = kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
        assert done.returncode == 0, done.stderr


def guide_manifests() -> list[dict[str, Any]] | None:
    """The guide's AgentPool and ToolBinding manifests as written; None without the guide."""
    for folder in _SEEDS:
        found = sorted(folder.glob("000_*.txt")) if folder.is_dir() else []
        if found:
            text = found[0].read_text()
            blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
            docs = [yaml.safe_load(b) for b in blocks]
            return [
                d
                for d in docs
                if isinstance(d, dict) and d.get("kind") in ("AgentPool", "ToolBinding")
            ]
    return None


GUIDE_SHAPES = """
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: tensor-parallel-pool}
spec:
  gpuRequirements:
    count: 8
    type: A100
    topology: {locality: same-node, minBandwidth: 600Gi}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: small-model-pool}
spec:
  migProfile: "1g.5gb"
  gpuRequirements: {count: 1, type: A100}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: pipeline-parallel-pool}
spec:
  minReplicas: 4
  gpuRequirements:
    count: 2
    topology: {locality: same-node}
  scheduling:
    gangScheduling: {enabled: true, minMembers: 4}
---
apiVersion: neuronetes.io/v1alpha1
kind: ToolBinding
metadata: {name: queue-binding}
spec:
  queueConfig: {autoscaleOnLag: true, maxLagThreshold: 100}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: cost-optimized-pool}
spec:
  scheduling:
    priority: 100
    costOptimization:
      enabled: true
      sloHeadroomMs: 1000
      maxCostPerHour: 50.0
      spotEnabled: true
      spotMaxInterruptions: 2
      fallbackModel: smaller-model
      fallbackTrigger: {costExceeded: true, sloAtRisk: false}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: spot-pool}
spec:
  scheduling:
    costOptimization:
      spotEnabled: true
      sloHeadroomMs: 2000
      spotStrategy:
        instanceTypes: ["p4d.24xlarge", "p3dn.24xlarge"]
        onInterruption: migrate-to-on-demand
        maxSpotPercent: 80
      interruptionThreshold: {count: 3, window: 1h, action: disable-spot}
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: green-pool}
spec:
  scheduling:
    carbonAware:
      enabled: true
      preferredRegions: [us-west-2, eu-north-1]
      timeShifting: {enabled: true, cleanEnergyHours: "09:00-17:00"}
      maxCarbonIntensity: 100
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: rag-pool}
spec:
  scheduling:
    dataLocality:
      vectorStoreAffinity: [weaviate-shard-0, weaviate-shard-1]
      localityWeight: high
      antiAffinity: [training-jobs, batch-inference]
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: cached-pool}
spec:
  scheduling:
    cacheAware:
      enabled: true
      cacheHitWeight: 0.3
      preloadStrategy:
        nodes:
          labelSelector:
            matchLabels: {node-pool: gpu-primary}
        minCachedReplicas: 2
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: high-priority-pool}
spec:
  scheduling:
    priority: 1000
    preemption: {enabled: true, policy: lowest-priority-first}
"""


def shapes() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(GUIDE_SHAPES) if d]


class Kubelet:
    """The kubelet's part for one namespace: bound pods Running and Ready with an IP; pods being
    deleted removed at once."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self._task: asyncio.Task[None] | None = None
        self._ips = 0

    async def _round(self) -> str:
        listed = await self.kube.list(PODS, namespace=self.namespace)
        for pod in listed["items"]:
            meta, status = pod["metadata"], pod.get("status") or {}
            if meta.get("deletionTimestamp"):
                with contextlib.suppress(NotFound):
                    await self.kube.delete(
                        PODS, meta["name"], namespace=self.namespace, grace_period_seconds=0
                    )
            elif pod["spec"].get("nodeName") and status.get("phase", "Pending") == "Pending":
                self._ips += 1
                ready = {"type": "Ready", "status": "True"}
                # The listed resourceVersion is a precondition: a status another writer set
                # since the list (the test marking the pod Failed) is never turned back to
                # Running, as a real kubelet never moves a finished pod back.
                body = {
                    "metadata": {"resourceVersion": meta["resourceVersion"]},
                    "status": {
                        "phase": "Running",
                        "podIP": f"10.88.{self._ips // 250}.{self._ips % 250 + 1}",
                        "conditions": [*(status.get("conditions") or []), ready],
                    },
                }
                with contextlib.suppress(KubeError):
                    await self.kube.patch(
                        PODS, meta["name"], body, namespace=self.namespace, subresource="status"
                    )
        return str(listed["resourceVersion"])

    async def _run(self) -> None:
        while True:
            try:
                version = await self._round()
                async for _ in self.kube.watch(
                    PODS, namespace=self.namespace, resource_version=version, timeout_seconds=30
                ):
                    await self._round()
            except KubeError:
                await asyncio.sleep(0.1)

    async def __aenter__(self) -> Kubelet:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@dataclass
class MetricsServer:
    """Each pod waits ``waiting`` requests of ``prompt_tokens`` tokens and processes
    ``tokens_per_second``; ``garbage`` answers text that is no Prometheus format; ``queue`` is a
    RabbitMQ-style queue depth."""

    waiting: float = 0.0
    prompt_tokens: float = 100.0
    tokens_per_second: float = 1000.0
    garbage: bool = False
    queue: float = 0.0
    url: str = ""
    started: float = field(default_factory=time.monotonic)

    def text(self) -> str:
        if self.garbage:
            return "<html>this is not prometheus</html>\n{{{"
        done = (time.monotonic() - self.started) * self.tokens_per_second
        return (
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{model_name="m"}} {self.waiting}\n'
            "# TYPE vllm:request_prompt_tokens histogram\n"
            f'vllm:request_prompt_tokens_bucket{{model_name="m",le="+Inf"}} 10.0\n'
            f'vllm:request_prompt_tokens_count{{model_name="m"}} 10.0\n'
            f'vllm:request_prompt_tokens_sum{{model_name="m"}} {10 * self.prompt_tokens}\n'
            "# TYPE vllm:prompt_tokens_total counter\n"
            f'vllm:prompt_tokens_total{{model_name="m"}} {done / 2}\n'
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{model_name="m"}} {done / 2}\n'
        )

    async def _pod(self, request: web.Request) -> web.Response:
        return web.Response(text=self.text(), content_type="text/plain")

    async def _queue(self, request: web.Request) -> web.Response:
        body = (
            "# TYPE rabbitmq_queue_messages_ready gauge\n"
            f'rabbitmq_queue_messages_ready{{queue="tasks"}} {self.queue}\n'
        )
        return web.Response(text=body, content_type="text/plain")

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[MetricsServer]:
        app = web.Application()
        app.router.add_get("/queue", self._queue)
        app.router.add_get("/{pod}/metrics", self._pod)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        try:
            yield self
        finally:
            await runner.cleanup()


@contextlib.asynccontextmanager
async def controller(
    kubeconfig: Path,
    namespace: str,
    run: str,
    *,
    resync_s: float = 0.5,
    policies: Sequence[Policy] | None = None,
    ready: Sequence[asyncio.Event] = (),
) -> AsyncIterator[NeuronetesController]:
    """The controller on ``namespace``; GPU types checked against the nodes of run ``run``;
    reconciling only once every event of ``ready`` is set."""
    client = await KubeClient.connect(kubeconfig)
    labels: list[dict[str, str]] = []

    async def refresh() -> None:
        listed = await client.list(NODES, label_selector=f"{RUN_LABEL}={run}")
        labels[:] = [dict(n["metadata"].get("labels") or {}) for n in listed["items"]]

    await refresh()
    ctl = NeuronetesController(
        client,
        NeuronetesSettings(resync_s=resync_s),
        writes=AgentPoolWriter(client),
        namespace=namespace,
        node_labels=lambda: labels,
        policies=policies,
        ready=ready,
    )
    task = asyncio.create_task(ctl.run())
    try:
        yield ctl
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()
