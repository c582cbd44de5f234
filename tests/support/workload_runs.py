"""What the workload controllers' end-to-end tests do to a running workload besides applying it:
hold back room and give it back, fail a pod as its kubelet would report it, read the gang Topos
wrote on the pods. The kubelet's part in deleting pods is
:class:`tests.support.gang_cluster.Controllers`."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from common.kube import NODES, PODS, NotFound
from devcluster import pods
from devcluster.kube_wait import scheduled_message, wait_for_pods
from tests.support.gang_cluster import LEAF, SPINE, GangCluster

GANG = "topos.io/gang"
GANG_RUN = "topos.io/gang-run"


async def hold_gpus(cluster: GangCluster, name: str, gpus: int) -> str:
    """A lone pod of ``gpus`` GPUs that Topos binds (the room a gang will lack); its node."""
    await cluster.create(pods.pod(name, namespace=None, gpus=gpus, cpu=None, memory=None))
    bound = await cluster.bound(name)
    return str(bound["spec"]["nodeName"])


async def release(cluster: GangCluster, name: str) -> None:
    """Delete the pod at once: the room it held is free again."""
    with contextlib.suppress(NotFound):
        await cluster.kube.delete(PODS, name, namespace=cluster.namespace, grace_period_seconds=0)


async def all_waiting(cluster: GangCluster, selector: str, count: int) -> list[dict[str, Any]]:
    """The ``count`` pods matching ``selector`` once every one is explained ``PodScheduled=False``
    by Topos; fails at once if any of them was bound (all or nothing)."""

    def waiting(listed: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
        live = [p for p in listed if not p["metadata"].get("deletionTimestamp")]
        bound = [p["metadata"]["name"] for p in live if p["spec"].get("nodeName")]
        assert not bound, f"part of the gang was bound: {bound}"
        told = [p for p in live if scheduled_message(p, status="False") is not None]
        return list(live) if len(live) == count and len(told) == count else None

    return await wait_for_pods(
        cluster.kube,
        cluster.namespace,
        waiting,
        label_selector=selector,
        what=f"{count} pods matching {selector} waiting, none bound",
    )


async def fail(cluster: GangCluster, name: str) -> None:
    """Pod ``name``'s container exits 1, as its kubelet would report it."""
    pod = await cluster.pod(name)
    container = pod["spec"]["containers"][0]["name"]
    terminated = {"exitCode": 1, "reason": "Error"}
    status = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": container,
                "image": pod["spec"]["containers"][0]["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }
    await cluster.kube.patch(
        PODS, name, {"status": status}, namespace=cluster.namespace, subresource="status"
    )


def runs(listed: Sequence[dict[str, Any]]) -> set[str]:
    """The gang runs Topos wrote on ``listed``."""
    return {p["metadata"]["labels"].get(GANG_RUN, "") for p in listed}


async def restart(cluster: GangCluster, name: str) -> None:
    """Pod ``name``'s container was killed and restarted, as its kubelet would report it."""
    pod = await cluster.pod(name)
    container = pod["spec"]["containers"][0]
    status = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": True,
                "restartCount": 1,
                "started": True,
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            }
        ],
    }
    await cluster.kube.patch(
        PODS, name, {"status": status}, namespace=cluster.namespace, subresource="status"
    )


async def large_host(cluster: GangCluster, name: str, leaf: str, spine: str = "spine-1") -> str:
    """An 8-GPU node with the CPU and memory of a current GPU host (224 cores, 2 TiB), where
    LWS's vLLM example (125 cores, 1124Gi a pod) fits; its name."""
    node = await cluster.add_node(name, "dgx-h100", labels_extra={LEAF: leaf, SPINE: spine})
    obj = await cluster.kube.get(NODES, node)
    room = {**obj["status"]["allocatable"], "cpu": "224", "memory": "2Ti"}
    status = {"status": {"capacity": room, "allocatable": room}}
    await cluster.kube.patch(NODES, node, status, subresource="status")
    cluster.leaf_of[node] = leaf
    return node
