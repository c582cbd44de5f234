"""The writer's ``PodScheduled=False`` patch, on a recording client (no API server): a
preemptor's nomination rides in the same ``pods/status`` patch and is not deferred; an
explanation alone is; a pod whose bind was sent gets neither, and a bind waits for the answer to
a combined patch already on the wire; a pod re-created under its name is left alone."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

from common.kube import PODS, Conflict, Deferrable, KubeClient, Superseded
from common.kube.resources import Resource
from coordinator.adapters.kube.writer import KubeClusterWriter
from coordinator.engine.ports import PodRef

POD = PodRef("ml", "train-0", "uid-1")


class Recording:
    """The two verbs the writer uses here: each request is recorded as it is sent; ``hold``
    keeps status patches on the wire until set; ``refuse`` answers them with it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.deferrable: list[Deferrable | None] = []
        self.hold: asyncio.Event | None = None
        self.refuse: Exception | None = None

    async def patch(
        self,
        resource: Resource,
        name: str,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        patch_type: str = "merge",
        subresource: str | None = None,
        deferrable: Deferrable | None = None,
    ) -> dict[str, Any]:
        assert (resource, subresource, patch_type) == (PODS, "status", "strategic")
        if deferrable is not None and not deferrable.send_now():
            raise Superseded("called off")
        self.sent.append((f"patch {namespace}/{name}", dict(body)))
        self.deferrable.append(deferrable)
        if self.refuse is not None:
            raise self.refuse
        if self.hold is not None:
            await self.hold.wait()
        return {}

    async def bind(self, *, namespace: str, pod: str, node: str, **_: Any) -> None:
        self.sent.append((f"bind {namespace}/{pod}", {"node": node}))


def writer_on(client: Recording) -> KubeClusterWriter:
    return KubeClusterWriter(cast(KubeClient, client))


async def test_a_nomination_and_its_explanation_are_one_patch_not_deferred() -> None:
    client = Recording()
    assert await writer_on(client).explain(POD, "0/4 nodes: preempting 1 pod", nominated="n1")
    [(what, body)] = client.sent
    assert what == "patch ml/train-0"
    assert body["metadata"] == {"uid": "uid-1"}  # only this pod, not one re-created since
    assert body["status"]["nominatedNodeName"] == "n1"
    [condition] = body["status"]["conditions"]
    assert condition["type"] == "PodScheduled"
    assert condition["status"] == "False"
    assert condition["reason"] == "Unschedulable"
    assert condition["message"] == "0/4 nodes: preempting 1 pod"
    assert client.deferrable == [None]  # a nomination waits for no one's rate limit


async def test_an_explanation_alone_is_deferrable_and_nominates_nothing() -> None:
    client = Recording()
    assert await writer_on(client).explain(POD, "0/4 nodes are available")
    [(_, body)] = client.sent
    assert "nominatedNodeName" not in body["status"]
    assert isinstance(client.deferrable[0], Deferrable)


async def test_a_pod_whose_bind_was_sent_is_neither_nominated_nor_explained() -> None:
    client = Recording()
    writer = writer_on(client)
    await writer.bind(POD, "n1", {})
    assert not await writer.explain(POD, "0/4 nodes: preempting 1 pod", nominated="n1")
    assert not await writer.explain(POD, "0/4 nodes are available")
    assert [what for what, _ in client.sent] == ["bind ml/train-0"]


async def test_a_bind_waits_for_the_answer_to_a_combined_patch_on_the_wire() -> None:
    client = Recording()
    client.hold = asyncio.Event()
    writer = writer_on(client)
    explained = asyncio.create_task(writer.explain(POD, "preempting", nominated="n1"))
    await asyncio.sleep(0)
    bound = asyncio.create_task(writer.bind(POD, "n1", {}))
    for _ in range(5):
        await asyncio.sleep(0)
    assert [what for what, _ in client.sent] == ["patch ml/train-0"]  # the bind waits
    client.hold.set()
    await bound
    # Answered before the bind went: it was written, but no Event follows (the pod is bound).
    assert not await explained
    assert [what for what, _ in client.sent] == ["patch ml/train-0", "bind ml/train-0"]


async def test_a_pod_re_created_since_is_left_alone_without_an_error() -> None:
    client = Recording()
    client.refuse = Conflict("uid mismatch", status=409)
    assert not await writer_on(client).explain(POD, "preempting", nominated="n1")
