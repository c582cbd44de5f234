"""End to end on the real control plane: a pool whose name is longer than a label value may be
still gets its pods, and a reconcile the API server refuses is shown on the pool (condition and
Event, the step and the API server's words), retried with a doubling backoff, and recovers at
once when the spec is fixed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from common.kube import EVENTS, PODS, KubeClient
from coordinator.adapters.kube.agentpools import AGENT_POOLS
from devcluster.kube_wait import wait_for, wait_for_object, wait_for_pods
from tests.support.gang_cluster import GangCluster
from tests.support.gpu_cluster import Kubectl
from tests.support.neuronetes import controller, install_crds

#: A valid AgentPool name (a DNS subdomain, up to 253 characters) of 80 characters.
LONG = "summarization-agents-for-the-customer-support-knowledge-base-eu-west-1-production"


def _pool(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "neuronetes.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": name},
        "spec": {"model": "tiny", **spec},
    }


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    conds = (obj.get("status") or {}).get("conditions") or ()
    return next((c for c in conds if c["type"] == kind), None)


async def test_a_pool_named_longer_than_a_label_value_gets_its_pods(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    assert len(LONG) > 63
    install_crds(kubectl)
    cluster = GangCluster(kube, kubeconfig, namespace)
    spec = {"minReplicas": 2, "scheduling": {"gangScheduling": {"enabled": True}}}
    async with controller(kubeconfig, namespace, cluster.run):
        await kube.create(AGENT_POOLS, _pool(LONG, **spec), namespace=namespace)
        obj = await wait_for_object(
            kube,
            AGENT_POOLS,
            LONG,
            lambda o: bool((o.get("status") or {}).get("selector")),
            namespace=namespace,
            what="the long pool's status",
        )
        selector = obj["status"]["selector"]
        pods = await wait_for_pods(
            kube,
            namespace,
            lambda pods: pods if len(pods) == 2 else None,
            label_selector=selector,  # the scale subresource's selector finds the pods
            what="the long pool's two pods",
        )
    value = selector.removeprefix("neuronetes.io/pool=")
    assert len(value) <= 63
    assert value.startswith(LONG[:40])
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert labels["neuronetes.io/pool"] == value
        assert labels["topos.io/gang"] == value
        assert pod["metadata"]["ownerReferences"][0]["name"] == LONG
    assert _condition(obj, "Reconciled") is None  # it never failed


async def test_a_refused_reconcile_is_shown_backed_off_and_recovers(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    cluster = GangCluster(kube, kubeconfig, namespace)
    # A container name the API server refuses (not a DNS label): every pod create is a 422.
    bad = {"spec": {"containers": [{"name": "Server_1", "image": "vllm/vllm-openai:latest"}]}}
    async with controller(kubeconfig, namespace, cluster.run) as ctl:
        await kube.create(AGENT_POOLS, _pool("refused", template=bad), namespace=namespace)
        await kube.create(AGENT_POOLS, _pool("fine"), namespace=namespace)
        obj = await wait_for_object(
            kube,
            AGENT_POOLS,
            "refused",
            lambda o: "attempt 3;" in ((_condition(o, "Reconciled") or {}).get("message") or ""),
            namespace=namespace,
            what="the third failed reconcile on the pool",
        )
        cond = _condition(obj, "Reconciled")
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("False", "ReconcileFailed")
        # the step, the API server's words, and the backoff doubling (1 s, 2 s, 4 s)
        assert cond["message"].startswith("creating a pod: ")
        assert "Server_1" in cond["message"]
        assert cond["message"].endswith("(attempt 3; retrying in 4s)")
        assert ctl.failures[(namespace, "refused")].attempts == 3
        # one Warning Event for the streak, not one per attempt
        fields = "involvedObject.name=refused,reason=ReconcileFailed"
        events = (await kube.list(EVENTS, namespace=namespace, field_selector=fields))["items"]
        assert [(e["type"], e.get("count") or 1) for e in events] == [("Warning", 1)]
        assert re.search(r"creating a pod: .*Server_1", events[0]["message"])
        # the other pool was served meanwhile
        fine = await kube.list(PODS, namespace=namespace, label_selector="neuronetes.io/pool=fine")
        assert len(fine["items"]) == 1

        # The spec fixed (a new generation): retried at once, not after the backoff.
        good = {"spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:latest"}]}}
        await kube.patch(AGENT_POOLS, "refused", {"spec": {"template": good}}, namespace=namespace)
        await wait_for(
            kube,
            PODS,
            lambda pods: pods or None,
            namespace=namespace,
            label_selector="neuronetes.io/pool=refused",
            what="the fixed pool's pod",
            timeout_s=3.0,  # sooner than the 4 s backoff
        )
        await wait_for_object(
            kube,
            AGENT_POOLS,
            "refused",
            lambda o: (_condition(o, "Reconciled") or {}).get("status") == "True",
            namespace=namespace,
            what="Reconciled=True after the fix",
        )


async def test_fields_topos_does_not_act_on_are_named_on_the_pool(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl
) -> None:
    install_crds(kubectl)
    cluster = GangCluster(kube, kubeconfig, namespace)
    spec = {
        "prewarmPercent": 10,
        "scheduling": {"fastScheduling": {"enabled": True, "maxNodesToScore": 50}},
    }
    async with controller(kubeconfig, namespace, cluster.run):
        await kube.create(AGENT_POOLS, _pool("warm", **spec), namespace=namespace)
        obj = await wait_for_object(
            kube,
            AGENT_POOLS,
            "warm",
            lambda o: _condition(o, "SpecSupported") is not None,
            namespace=namespace,
            what="the pool's SpecSupported condition",
        )
        cond = _condition(obj, "SpecSupported")
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("False", "UnsupportedField")
        assert (
            "spec.prewarmPercent is set (10) but ignored: Topos keeps no warm pool"
            in (cond["message"])
        )
        assert "spec.scheduling.fastScheduling is set" in cond["message"]
        assert (
            "set scheduling.fastScheduling in the coordinator's configuration" in (cond["message"])
        )
        (event,) = await wait_for(
            kube,
            EVENTS,
            lambda evs: evs or None,
            namespace=namespace,
            field_selector="involvedObject.name=warm,reason=UnsupportedField",
            what="the UnsupportedField Event",
        )
        assert event["type"] == "Warning"
        # the pool is served all the same
        await wait_for_pods(
            kube,
            namespace,
            lambda pods: pods or None,
            label_selector="neuronetes.io/pool=warm",
            what="the pool's pod",
        )
        patch = {"spec": {"prewarmPercent": None, "scheduling": {"fastScheduling": None}}}
        await kube.patch(AGENT_POOLS, "warm", patch, namespace=namespace)
        await wait_for_object(
            kube,
            AGENT_POOLS,
            "warm",
            lambda o: (_condition(o, "SpecSupported") or {}).get("status") == "True",
            namespace=namespace,
            what="SpecSupported=True once the fields are gone",
        )
