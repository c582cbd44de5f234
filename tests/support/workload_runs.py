"""What the workload controllers' end-to-end tests do to a running workload besides applying it:
hold back room and give it back, fail a pod as its kubelet would report it, read the gang Topos
wrote on the pods. The kubelet's part in deleting pods is
:class:`tests.support.gang_cluster.Controllers`."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from common.kube import PODS, NotFound
from devcluster import pods
from devcluster.kube_wait import scheduled_message, wait_for_pods
from tests.support.gang_cluster import GangCluster

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
