"""End to end on the real control plane: AgentPools scaled on the load their pods report, a
ToolBinding's queue lag scaling its pool, and bad input named in conditions and Events while
other pools are served.

The serving pods' ``/metrics`` come from a test server in vLLM's metric names (Prometheus text):
requests waiting, prompt length, token counters growing at a set throughput. The controller reads
them every half second.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from common.kube import EVENTS, PODS, KubeClient
from coordinator.adapters.kube.agentpools import AGENT_POOLS, TOOL_BINDINGS
from devcluster.kube_wait import wait_for, wait_for_event, wait_for_object, wait_for_pods
from tests.support.gang_cluster import GangCluster
from tests.support.gpu_cluster import Kubectl
from tests.support.neuronetes import Kubelet, MetricsServer, controller, install_crds


def _pool(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "neuronetes.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name},
        "spec": {"gpuRequirements": {"count": 1, "type": "A100"}, **spec},
    }


async def _running(kube: KubeClient, ns: str, pool: str, count: int) -> list[dict[str, Any]]:
    def done(pods: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        ok = len(live) == count and all(p["spec"].get("nodeName") for p in live)
        return live if ok else None

    return await wait_for_pods(
        kube, ns, done, label_selector=f"neuronetes.io/pool={pool}", what=f"{count} {pool} pods"
    )


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    conds = (obj.get("status") or {}).get("conditions") or ()
    return next((c for c in conds if c["type"] == kind), None)


async def _events(kube: KubeClient, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    fields = f"involvedObject.name={name},reason={reason}"
    return list((await kube.list(EVENTS, namespace=ns, field_selector=fields))["items"])


async def test_token_load_scales_a_pool_up_then_down(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    cluster = GangCluster(kube, kubeconfig, namespace)
    for i in range(2):
        await cluster.add_node(f"dgx{i}", "dgx-a100")
    load = MetricsServer(tokens_per_second=1000.0, prompt_tokens=100.0)
    async with (
        load.serving(),
        cluster.coordinator(),
        controller(kubeconfig, namespace, cluster.run),
        Kubelet(kube, namespace),
    ):
        autoscaling = {
            "slo": {"ttftMs": 1000},
            "cooldownSeconds": 2,
            "metrics": {"url": load.url + "/{pod}/metrics"},
        }
        pool = _pool("chat", model="llama-3-8b", maxReplicas=4, autoscaling=autoscaling)
        await kube.create(AGENT_POOLS, pool, namespace=namespace)
        (first,) = await _running(kube, namespace, "chat", 1)
        assert first["metadata"]["annotations"]["neuronetes.io/model"] == "llama-3-8b"

        # 25 requests of 100 tokens at 1,000 tokens/s: 2.5 s to the first token, SLO 1 s: ceil
        # (2,500 / (1,000 x 1)) = 3 replicas.
        load.waiting = 25
        await _running(kube, namespace, "chat", 3)
        obj = await wait_for_object(
            kube,
            AGENT_POOLS,
            "chat",
            lambda o: (o.get("status") or {}).get("desiredReplicas") == 3,
            namespace=namespace,
            what="status: 3 desired",
        )
        assert obj["spec"]["replicas"] == 3
        reason = obj["status"]["lastScaleReason"]
        assert re.match(r"expected TTFT 2[45]\d\dms > SLO 1000ms: 2500 tokens queued", reason)
        up = await wait_for_event(kube, namespace, name="chat", reason="ScaledUp")
        assert up["message"].startswith("1 → 3 replicas: expected TTFT")

        # Drained: one replica fewer per cooldown, down to minReplicas.
        load.waiting = 0
        await _running(kube, namespace, "chat", 1)
        await wait_for_object(
            kube,
            AGENT_POOLS,
            "chat",
            lambda o: (o.get("status") or {}).get("readyReplicas") == 1,
            namespace=namespace,
            what="status: 1 ready",
        )
        downs = await _events(kube, namespace, "chat", "ScaledDown")
        assert sorted(e["message"][:5] for e in downs) == ["2 → 1", "3 → 2"]
        listed = kubectl("get", "agentpools", "-n", namespace)
        assert listed.returncode == 0, listed.stderr
        row = listed.stdout.splitlines()[1].split()
        assert row[:4] == ["chat", "1", "1", "A100"]

        # Garbage from the endpoint: SignalsAvailable=False with the reason; replicas kept.
        load.garbage = True
        load.waiting = 300
        obj = await wait_for_object(
            kube,
            AGENT_POOLS,
            "chat",
            lambda o: (_condition(o, "SignalsAvailable") or {}).get("status") == "False",
            namespace=namespace,
            what="SignalsAvailable=False",
        )
        cond = _condition(obj, "SignalsAvailable")
        assert cond is not None
        assert "not Prometheus text" in cond["message"]
        assert obj["spec"]["replicas"] == 1
        warning = await wait_for_event(kube, namespace, name="chat", reason="Unreadable")
        assert warning["type"] == "Warning"


async def test_toolbinding_lag_scales_its_pool(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    cluster = GangCluster(kube, kubeconfig, namespace)
    await cluster.add_node("dgx", "dgx-a100")
    queue = MetricsServer(queue=40.0)
    async with (
        queue.serving(),
        cluster.coordinator(),
        controller(kubeconfig, namespace, cluster.run),
        Kubelet(kube, namespace),
    ):
        await kube.create(AGENT_POOLS, _pool("workers", maxReplicas=5), namespace=namespace)
        binding = {
            "apiVersion": "neuronetes.io/v1alpha1",
            "kind": "ToolBinding",
            "metadata": {"name": "tasks"},
            "spec": {
                "agentPoolRef": {"name": "workers"},
                "queueConfig": {
                    "autoscaleOnLag": True,
                    "maxLagThreshold": 100,
                    "prefetch": 10,
                    "throughput": 2,
                    "metrics": {"url": queue.url + "/queue"},
                },
            },
        }
        await kube.create(TOOL_BINDINGS, binding, namespace=namespace)
        await _running(kube, namespace, "workers", 1)
        tb = await wait_for_object(
            kube,
            TOOL_BINDINGS,
            "tasks",
            lambda o: (o.get("status") or {}).get("queueDepth") == 40,
            namespace=namespace,
            what="the binding's queue depth",
        )
        assert tb["status"]["lag"] == 20  # 40 - 1 x 10 x 2, under the threshold
        # 200 queued: lag 180 > 100 → ceil((200 - 100) / 20) = 5 replicas.
        queue.queue = 200
        await _running(kube, namespace, "workers", 5)
        obj = await kube.get(AGENT_POOLS, "workers", namespace=namespace)
        assert (
            obj["status"]["lastScaleReason"] == "ToolBinding tasks: lag 180 > maxLagThreshold 100"
        )


async def test_bad_pools_are_named_and_the_others_served(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    cluster = GangCluster(kube, kubeconfig, namespace)
    await cluster.add_node("dgx", "dgx-a100")
    bad = {
        "mig-zero": _pool("mig-zero", migProfile="1g.5gb", gpuRequirements={"count": 0}),
        "no-such-gpu": _pool("no-such-gpu", gpuRequirements={"count": 1, "type": "Z9000"}),
        "negative": _pool("negative", minReplicas=-2),
    }
    async with cluster.coordinator(), controller(kubeconfig, namespace, cluster.run):
        for body in bad.values():
            await kube.create(AGENT_POOLS, body, namespace=namespace)
        await kube.create(AGENT_POOLS, _pool("good"), namespace=namespace)
        orphan = {
            "apiVersion": "neuronetes.io/v1alpha1",
            "kind": "ToolBinding",
            "metadata": {"name": "queue-binding"},
            "spec": {"queueConfig": {"autoscaleOnLag": True, "maxLagThreshold": 100}},
        }
        await kube.create(TOOL_BINDINGS, orphan, namespace=namespace)
        await _running(kube, namespace, "good", 1)
        messages = {}
        for name in bad:
            obj = await wait_for_object(
                kube,
                AGENT_POOLS,
                name,
                lambda o: (_condition(o, "Ready") or {}).get("reason") == "Invalid",
                namespace=namespace,
                what=f"{name} invalid",
            )
            cond = _condition(obj, "Ready")
            assert cond is not None
            assert cond["status"] == "False"
            messages[name] = cond["message"]
            (event,) = await wait_for(
                kube,
                EVENTS,
                lambda evs: evs or None,
                namespace=namespace,
                field_selector=f"involvedObject.name={name},reason=Invalid",
                what=f"{name}'s Invalid Event",
            )
            assert event["type"] == "Warning"
            assert event["message"] == cond["message"]
        assert "count is 0 but spec.migProfile asks for '1g.5gb'" in messages["mig-zero"]
        assert "unknown GPU type 'Z9000'" in messages["no-such-gpu"]
        assert "nodes have: A100" in messages["no-such-gpu"]
        assert messages["negative"] == "spec.minReplicas: -2 is negative"
        tb = await wait_for_object(
            kube,
            TOOL_BINDINGS,
            "queue-binding",
            lambda o: _condition(o, "PoolBound") is not None,
            namespace=namespace,
            what="the binding's PoolBound condition",
        )
        cond = _condition(tb, "PoolBound")
        assert cond is not None
        assert "names no AgentPool" in cond["message"]
        for name in bad:  # nothing was made for them
            pods = await kube.list(
                PODS,
                namespace=namespace,
                label_selector=f"neuronetes.io/pool={name}",
            )
            assert pods["items"] == []
