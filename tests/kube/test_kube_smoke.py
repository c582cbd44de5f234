"""The client adapter against the real kube-apiserver + etcd of the test harness.

Covers what the agent and coordinator rely on: Nodes with GPU capacity and status, label
patches (merge, strategic, JSON), pods for the ``topos`` scheduler bound through ``pods/binding``,
Events, watches, Leases with optimistic concurrency, TokenRequest +
TokenReview, eviction, and that each API failure arrives as the right ``common.kube`` error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.kube import (
    EVENTS,
    NODES,
    PODS,
    SERVICE_ACCOUNTS,
    AlreadyExists,
    Conflict,
    Forbidden,
    Invalid,
    KubeClient,
    KubeError,
    NotFound,
    Unauthorized,
    WatchEventType,
)
from devcluster.binaries import KUBERNETES_VERSION
from devcluster.controlplane import ControlPlane
from devcluster.pods import gpu_pod
from tests.support.kube_objects import create_node

pytestmark = pytest.mark.kube


def gpu_node_status() -> dict[str, Any]:
    resources = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    return {
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    }


async def test_server_reports_the_pinned_version(kube: KubeClient) -> None:
    version = await kube.version()
    assert version["gitVersion"] == f"v{KUBERNETES_VERSION}"


async def test_node_with_gpu_capacity_labels_and_status(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("gpu")
    await create_node(kube, name)
    await kube.patch(NODES, name, gpu_node_status(), subresource="status")
    await kube.patch(NODES, name, {"metadata": {"labels": {"topos.io/gpu.count": "8"}}})
    await kube.patch(
        NODES,
        name,
        {"metadata": {"labels": {"topos.io/leaf": "leaf-1"}}},
        patch_type="strategic",
    )
    await kube.patch(
        NODES,
        name,
        [{"op": "add", "path": "/metadata/annotations", "value": {"topos.io/topology": "{}"}}],
        patch_type="json",
    )
    # a merge patch with null removes a label
    await kube.patch(NODES, name, {"metadata": {"labels": {"topos.io/leaf": None}}})

    node = await kube.get(NODES, name)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert node["metadata"]["labels"]["topos.io/gpu.count"] == "8"
    assert "topos.io/leaf" not in node["metadata"]["labels"]
    assert node["metadata"]["annotations"] == {"topos.io/topology": "{}"}

    listed = await kube.list(NODES, label_selector="topos.io/gpu.count=8")
    assert name in {item["metadata"]["name"] for item in listed["items"]}
    assert all(item["kind"] == "Node" for item in listed["items"])
    assert listed["resourceVersion"]
    other = await kube.list(NODES, label_selector=f"kubernetes.io/hostname={name},absent=yes")
    assert other["items"] == []


async def test_pod_bound_through_binding_and_event_posted(
    kube: KubeClient, namespace: str, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("gpu")
    await create_node(kube, node)
    created = await kube.create(PODS, gpu_pod("train-0", 4), namespace=namespace)
    assert created["spec"]["schedulerName"] == "topos"
    assert "nodeName" not in created["spec"]

    pending = await kube.list(
        PODS, namespace=namespace, field_selector="spec.nodeName=,spec.schedulerName=topos"
    )
    assert [p["metadata"]["name"] for p in pending["items"]] == ["train-0"]

    await kube.bind(
        namespace=namespace, pod="train-0", node=node, pod_uid=created["metadata"]["uid"]
    )
    await kube.create_event(
        regarding=created,
        reason="Scheduled",
        message=f"Successfully assigned {namespace}/train-0 to {node}",
        action="Binding",
    )

    pod = await kube.get(PODS, "train-0", namespace=namespace)
    assert pod["spec"]["nodeName"] == node
    scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled
    assert scheduled[0]["status"] == "True"

    events = await kube.list(
        EVENTS, namespace=namespace, field_selector="involvedObject.name=train-0"
    )
    [event] = events["items"]
    assert event["reason"] == "Scheduled"
    assert event["involvedObject"]["uid"] == created["metadata"]["uid"]
    assert event["source"]["component"] == "topos"

    # a bound pod can't be bound again (that's how a second scheduler loses a race)
    with pytest.raises(Conflict):
        await kube.bind(namespace=namespace, pod="train-0", node=node)


async def test_event_about_a_node_lands_in_default(
    kube: KubeClient, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("gpu")
    node = await create_node(kube, name)
    posted = await kube.create_event(
        regarding=node, reason="GPUUnhealthy", message="GPU 3: XID 79", event_type="Warning"
    )
    assert posted["metadata"]["namespace"] == "default"
    events = await kube.list(
        EVENTS, namespace="default", field_selector=f"involvedObject.name={name}"
    )
    [event] = events["items"]
    assert (event["type"], event["reason"], event["message"]) == (
        "Warning",
        "GPUUnhealthy",
        "GPU 3: XID 79",
    )
    assert event["involvedObject"]["kind"] == "Node"


async def test_bind_with_stale_uid_is_refused(
    kube: KubeClient, namespace: str, unique_name: Callable[[str], str]
) -> None:
    node = unique_name("gpu")
    await create_node(kube, node)
    first = await kube.create(PODS, gpu_pod("p", 1), namespace=namespace)
    await kube.delete(PODS, "p", namespace=namespace, grace_period_seconds=0)
    await kube.create(PODS, gpu_pod("p", 1), namespace=namespace)  # same name, new uid
    with pytest.raises(Conflict):
        await kube.bind(namespace=namespace, pod="p", node=node, pod_uid=first["metadata"]["uid"])
    pod = await kube.get(PODS, "p", namespace=namespace)
    assert "nodeName" not in pod["spec"]


async def test_watch_sees_changes_after_list(kube: KubeClient, namespace: str) -> None:
    listed = await kube.list(PODS, namespace=namespace)
    seen: list[tuple[WatchEventType, str, str | None]] = []

    async def follow() -> None:
        async for kind, obj in kube.watch(
            PODS, namespace=namespace, resource_version=listed["resourceVersion"]
        ):
            labels = obj["metadata"].get("labels") or {}
            seen.append((kind, obj["metadata"]["name"], labels.get("phase")))
            if kind == "DELETED":
                return

    watcher = asyncio.create_task(follow())
    await kube.create(PODS, gpu_pod("w", 1), namespace=namespace)
    await kube.patch(PODS, "w", {"metadata": {"labels": {"phase": "two"}}}, namespace=namespace)
    await kube.delete(PODS, "w", namespace=namespace, grace_period_seconds=0)
    await asyncio.wait_for(watcher, timeout=60)
    assert seen[0] == ("ADDED", "w", None)
    assert ("MODIFIED", "w", "two") in seen
    assert seen[-1] == ("DELETED", "w", "two")  # the deletion may first show as MODIFIED


async def test_watch_ends_when_the_server_times_it_out(kube: KubeClient, namespace: str) -> None:
    listed = await kube.list(PODS, namespace=namespace)
    events = [
        event
        async for event in kube.watch(
            PODS,
            namespace=namespace,
            resource_version=listed["resourceVersion"],
            timeout_seconds=1,
        )
    ]
    assert events == []


async def test_errors_map_to_our_hierarchy(
    kube: KubeClient, namespace: str, unique_name: Callable[[str], str]
) -> None:
    with pytest.raises(NotFound) as missing:
        await kube.get(NODES, unique_name("absent"))
    assert missing.value.status == 404
    assert isinstance(missing.value, KubeError)

    await kube.create(PODS, gpu_pod("dup", 1), namespace=namespace)
    with pytest.raises(AlreadyExists):
        await kube.create(PODS, gpu_pod("dup", 1), namespace=namespace)

    pod = await kube.get(PODS, "dup", namespace=namespace)
    await kube.patch(PODS, "dup", {"metadata": {"labels": {"a": "b"}}}, namespace=namespace)
    stale = dict(pod)  # still carries the old resourceVersion
    with pytest.raises(Conflict) as conflict:
        await kube.replace(PODS, "dup", stale, namespace=namespace)
    assert not isinstance(conflict.value, AlreadyExists)

    negative = gpu_pod("neg", -1)
    with pytest.raises(Invalid) as invalid:
        await kube.create(PODS, negative, namespace=namespace)
    assert invalid.value.details.get("causes")

    with pytest.raises(Invalid):  # a JSON patch whose `test` op fails changes nothing
        await kube.patch(
            PODS,
            "dup",
            [
                {"op": "test", "path": "/metadata/labels/a", "value": "not-b"},
                {"op": "replace", "path": "/metadata/labels/a", "value": "c"},
            ],
            namespace=namespace,
            patch_type="json",
        )
    assert (await kube.get(PODS, "dup", namespace=namespace))["metadata"]["labels"] == {"a": "b"}

    with pytest.raises(NotFound):
        await kube.delete(PODS, "never-was", namespace=namespace)


async def test_leases_use_optimistic_concurrency(kube: KubeClient, namespace: str) -> None:
    assert await kube.get_lease(namespace=namespace, name="topos-coordinator") is None
    spec = {"holderIdentity": "a", "leaseDurationSeconds": 15}
    lease = await kube.create_lease(namespace=namespace, name="topos-coordinator", spec=spec)
    with pytest.raises(AlreadyExists):
        await kube.create_lease(namespace=namespace, name="topos-coordinator", spec=spec)

    renewed = await kube.update_lease(lease, {**spec, "leaseTransitions": 1})
    assert renewed["spec"]["leaseTransitions"] == 1
    # a contender still holding the first read loses
    with pytest.raises(Conflict):
        await kube.update_lease(lease, {**spec, "holderIdentity": "b"})
    current = await kube.get_lease(namespace=namespace, name="topos-coordinator")
    assert current is not None
    assert current["spec"]["holderIdentity"] == "a"


async def test_token_request_and_review(kube: KubeClient, namespace: str) -> None:
    await kube.create(
        SERVICE_ACCOUNTS,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "agent"}},
        namespace=namespace,
    )
    token = await kube.request_token(
        namespace=namespace, service_account="agent", audiences=["topos"]
    )
    review = await kube.review_token(token, audiences=["topos"])
    assert review["authenticated"]
    assert review["username"] == f"system:serviceaccount:{namespace}:agent"
    assert "system:serviceaccounts" in review["groups"]

    forged = await kube.review_token(token[:-4] + "AAAA", audiences=["topos"])
    assert not forged["authenticated"]
    wrong_audience = await kube.review_token(token, audiences=["someone-else"])
    assert not wrong_audience["authenticated"]


async def test_eviction_removes_the_pod(kube: KubeClient, namespace: str) -> None:
    await kube.create(PODS, gpu_pod("victim", 1), namespace=namespace)
    await kube.evict(namespace=namespace, pod="victim", grace_period_seconds=0)
    with pytest.raises(NotFound):
        await kube.get(PODS, "victim", namespace=namespace)


async def test_identities_without_rights_are_refused(
    control_plane: ControlPlane, tmp_path: Path, namespace: str
) -> None:
    nobody = control_plane.write_user_kubeconfig(tmp_path / "nobody", user="nobody")
    async with await KubeClient.connect(nobody) as client:
        with pytest.raises(Forbidden):
            await client.list(PODS, namespace=namespace)

    stranger = tmp_path / "stranger"
    stranger.write_text(
        control_plane.kubeconfig.read_text().split("users:")[0]
        + "users:\n- name: topos-admin\n  user:\n    token: not-a-real-token\n"
        + "contexts:"
        + control_plane.kubeconfig.read_text().split("contexts:")[1]
    )
    async with await KubeClient.connect(stranger) as client:
        with pytest.raises(Unauthorized):
            await client.list(PODS, namespace=namespace)
