"""The reflector drops a watch event that changes nothing its handler reads (a bound pod's status
moving, a Node heartbeat) before decoding it, and hands every other one over: a label, a spec,
a deletion, a pod re-created under its name, the first event after a re-list, an error. Pods are
decoded into what their handlers read: a bound pod as ``bound_pod_fields`` leaves it, a pending
pod's ``DELETED`` as its metadata, and the queue still lets that pod go."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterable
from typing import Any, cast

import msgspec
import pytest

from common.kube import NODES, PODS, Gone, Invalid, KubeClient, KubeObject, Resource
from common.kube.watch import parse_watch_line
from coordinator.adapters.kube.inventory_sync import KubeSync
from coordinator.adapters.kube.pending import PendingPods
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.adapters.kube.watchdecode import (
    FingerprintOf,
    bound_pod_event,
    bound_pod_fingerprint,
    node_fingerprint,
    pending_pod_event,
)
from coordinator.core.queue import SchedulingQueue
from coordinator.inventory.state import BoundPod
from coordinator.inventory.store import Inventory
from coordinator.inventory.translate import bound_pod, bound_pod_fields
from devcluster.pods import gpu_pod


class Recorded:
    def __init__(self) -> None:
        self.applied: list[tuple[Change, KubeObject]] = []
        self.replaced: list[list[KubeObject]] = []

    def replace(self, items: list[KubeObject]) -> None:
        self.replaced.append(items)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        self.applied.append((kind, obj))


class Stream:
    """A client whose list is ``items`` and whose watches send what the test queues; it refuses
    a watch list as an API server without the ``WatchList`` feature does."""

    def __init__(self, items: list[KubeObject]) -> None:
        self.items = items
        self.lines: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self.lists = 0

    async def list(self, resource: Resource, **_: object) -> dict[str, Any]:
        self.lists += 1
        return {"items": copy.deepcopy(self.items), "resourceVersion": "1", "continue": ""}

    async def watch_lines(
        self, resource: Resource, *, initial_events: bool = False, **_: object
    ) -> AsyncIterator[bytes]:
        if initial_events:
            raise Invalid("sendInitialEvents is forbidden for watch", status=422)
        while True:
            line = await self.lines.get()
            if isinstance(line, BaseException):
                raise line
            yield line


def _line(kind: str, obj: KubeObject) -> bytes:
    return msgspec.json.encode({"type": kind, "object": obj}) + b"\n"


async def _through(
    stream: Stream, handler: Recorded, events: Iterable[tuple[str, KubeObject]]
) -> None:
    """Queue the events, then wait until the reflector has taken them all."""
    for kind, obj in events:
        stream.lines.put_nowait(_line(kind, obj))
    while not stream.lines.empty():  # noqa: ASYNC110 (the stream has no event to wait on)
        await asyncio.sleep(0)
    await asyncio.sleep(0)


async def _running(
    stream: Stream, fingerprint: FingerprintOf, resource: Resource = PODS
) -> tuple[Reflector, Recorded, list[int], asyncio.Task[None]]:
    handler, dropped = Recorded(), [0]
    reflector = Reflector(
        cast(KubeClient, stream),
        resource,
        handler,
        fingerprint=fingerprint,
        on_unchanged=lambda: dropped.__setitem__(0, dropped[0] + 1),
    )
    task = asyncio.create_task(reflector.run())
    await reflector.synced.wait()
    return reflector, handler, dropped, task


def _bound(uid: str, rv: int, **changes: Any) -> KubeObject:
    obj = gpu_pod("train", 1, node="gpu-1", namespace="ml", uid=uid)
    obj["metadata"]["resourceVersion"] = str(rv)
    obj["metadata"]["managedFields"] = [{"manager": "kwok", "time": f"t{rv}"}]
    obj["status"] = {"phase": "Running", "podIP": f"10.0.0.{rv}", "conditions": []}
    for path, value in changes.items():
        where = obj
        *parents, leaf = path.split("__")
        for key in parents:
            where = where.setdefault(key, {})
        where[leaf] = value
    return obj


async def test_status_churn_is_dropped_and_real_changes_pass() -> None:
    stream = Stream([])
    reflector, handler, dropped, task = await _running(stream, bound_pod_fingerprint)
    try:
        await _through(stream, handler, [("ADDED", _bound("u1", 2))])
        # status and resourceVersion only: twice dropped
        await _through(
            stream,
            handler,
            [
                ("MODIFIED", _bound("u1", 3, status__phase="Running")),
                ("MODIFIED", _bound("u1", 4, status__conditions=[{"type": "Ready"}])),
            ],
        )
        assert [k for k, _ in handler.applied] == ["ADDED"]
        assert dropped == [2]
        # a label, an annotation, a deletion in progress: each handed over
        await _through(
            stream,
            handler,
            [
                ("MODIFIED", _bound("u1", 5, metadata__labels={"team": "a"})),
                ("MODIFIED", _bound("u1", 6, metadata__annotations={"topos.io/x": "1"})),
                ("MODIFIED", _bound("u1", 7, metadata__deletionTimestamp="2026-01-01T00:00:00Z")),
                ("DELETED", _bound("u1", 8, metadata__deletionTimestamp="2026-01-01T00:00:00Z")),
            ],
        )
        kinds = [k for k, _ in handler.applied]
        assert kinds == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
        assert handler.applied[1][1]["metadata"]["labels"]["team"] == "a"
        # re-created under the same name, alike in every part: another pod, handed over
        await _through(
            stream, handler, [("ADDED", _bound("u2", 9)), ("MODIFIED", _bound("u2", 10))]
        )
        assert [obj["metadata"]["uid"] for _, obj in handler.applied[-1:]] == ["u2"]
        assert dropped == [3]
        # a MODIFIED a terminal phase (a watch without the phase selector): handed over
        await _through(stream, handler, [("MODIFIED", _bound("u2", 11, status__phase="Failed"))])
        assert handler.applied[-1][1]["status"]["phase"] == "Failed"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert reflector.relists == 1


async def test_the_first_event_after_a_relist_passes_and_errors_still_raise() -> None:
    stream = Stream([_bound("u1", 2)])
    reflector, handler, dropped, task = await _running(stream, bound_pod_fingerprint)
    try:
        await _through(stream, handler, [("MODIFIED", _bound("u1", 3))])
        await _through(stream, handler, [("MODIFIED", _bound("u1", 4))])
        assert len(handler.applied) == 1  # the list is not fingerprinted: the first one passes
        assert dropped == [1]
        # 410 Gone: the reflector lists again; what it handed over before is forgotten
        stream.lines.put_nowait(
            _line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "old"})
        )
        while reflector.relists < 2:  # noqa: ASYNC110
            await asyncio.sleep(0)
        await _through(stream, handler, [("MODIFIED", _bound("u1", 5))])
        assert len(handler.applied) == 2
        assert dropped == [1]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert stream.lists == 2


def test_an_error_line_is_not_taken_for_an_object() -> None:
    line = _line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "old"})
    seen = bound_pod_fingerprint(line)
    assert seen is not None
    assert seen[1][0] == ""  # no identity: never dropped
    assert bound_pod_fingerprint(b"not json") is None
    reflector = Reflector(cast(KubeClient, Stream([])), PODS, Recorded())
    with pytest.raises(Gone):
        reflector._event(line, "1")


def _node(rv: int, beat: str, **status: Any) -> KubeObject:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-1",
            "resourceVersion": str(rv),
            "labels": {"topos.io/leaf": "a"},
            "annotations": {"topos.io/topology": '{"gpus": 8}'},
        },
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "capacity": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": beat}],
            **status,
        },
    }


async def test_node_heartbeats_are_dropped_readiness_and_capacity_pass() -> None:
    stream = Stream([])
    _, handler, dropped, task = await _running(stream, node_fingerprint, NODES)
    try:
        await _through(
            stream,
            handler,
            [
                ("ADDED", _node(2, "t0")),
                ("MODIFIED", _node(3, "t1")),
                ("MODIFIED", _node(4, "t2", images=[{"names": ["x"]}])),
            ],
        )
        assert (len(handler.applied), dropped) == (1, [2])
        not_ready = _node(5, "t3")
        not_ready["status"]["conditions"][0]["status"] = "False"
        fewer = _node(6, "t4", allocatable={"nvidia.com/gpu": "7"})
        relabelled = _node(7, "t5")
        relabelled["metadata"]["labels"]["topos.io/leaf"] = "b"
        tainted = _node(8, "t6")
        tainted["spec"] = {"taints": [{"key": "k", "effect": "NoSchedule"}]}
        republished = _node(9, "t7")
        republished["metadata"]["annotations"]["topos.io/topology"] = '{"gpus": 4}'
        changes = [not_ready, fewer, relabelled, tainted, republished]
        await _through(stream, handler, [("MODIFIED", n) for n in changes])
        assert [obj["metadata"]["resourceVersion"] for _, obj in handler.applied[1:]] == [
            "5",
            "6",
            "7",
            "8",
            "9",
        ]
        assert dropped == [2]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_bound_pod_is_decoded_as_its_handler_reads_it() -> None:
    served = _bound("u1", 2, metadata__ownerReferences=[{"uid": "rs-1", "kind": "ReplicaSet"}])
    served["metadata"]["annotations"] = {"topos.io/assigned-gpus": "GPU-1"}
    served["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    line = _line("MODIFIED", served)
    kind, obj = bound_pod_event(line)
    assert kind == "MODIFIED"
    assert "managedFields" not in obj["metadata"]
    assert obj == bound_pod_fields(parse_watch_line(line, PODS)[1])
    pod = bound_pod(obj)
    assert pod is not None
    assert (pod.node, pod.assigned_gpus, pod.owner_uid, pod.terminating) == (
        "gpu-1",
        ("GPU-1",),
        "rs-1",
        True,
    )
    bookmark = _line("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "9"}})
    assert bound_pod_event(bookmark)[0] == "BOOKMARK"
    with pytest.raises(Gone):
        bound_pod_event(_line("ERROR", {"kind": "Status", "code": 410, "message": "old"}))
    odd = _bound("u1", 3)
    odd["metadata"]["labels"] = {"n": 1}  # not what an API server sends: decoded the slow way
    assert bound_pod_event(_line("MODIFIED", odd))[1]["metadata"]["labels"] == {"n": 1}


def test_a_pending_pods_deletion_is_its_metadata_and_the_pod_leaves_the_queue() -> None:
    queue = SchedulingQueue()
    handler = PendingPods(queue)
    pending = gpu_pod("wait", 1, namespace="ml", uid="u9")
    pending["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    kind, obj = pending_pod_event(_line("ADDED", pending))
    assert "managedFields" not in obj["metadata"]  # the queue keeps the object: not those
    meta = {k: v for k, v in pending["metadata"].items() if k != "managedFields"}
    assert obj == {**pending, "metadata": meta}  # the rest whole: the queue parses it
    handler.apply(kind, obj)
    assert len(queue) == 1
    kind, obj = pending_pod_event(_line("DELETED", pending))
    assert (kind, set(obj)) == ("DELETED", {"metadata"})
    assert obj["metadata"]["uid"] == "u9"
    handler.apply(kind, obj)
    assert len(queue) == 0


def test_a_pod_that_got_a_node_leaves_the_queue_and_is_never_queued_again() -> None:
    queue = SchedulingQueue()
    handler = PendingPods(queue)
    pending = gpu_pod("wait", 1, namespace="ml", uid="u9")
    # a manifest in an annotation names a node inside a JSON string: still pending
    pending["metadata"]["annotations"] = {"last-applied": '{"spec":{"nodeName":"gpu-9"}}'}
    kind, obj = pending_pod_event(_line("ADDED", pending))
    assert (kind, obj) == ("ADDED", pending)
    handler.apply(kind, obj)
    assert len(queue) == 1
    bound = copy.deepcopy(pending)
    bound["spec"]["nodeName"] = "gpu-1"  # bound (by us or anyone)
    bound["metadata"]["resourceVersion"] = "42"
    kind, obj = pending_pod_event(_line("MODIFIED", bound))
    assert kind == "DELETED"
    assert obj == {
        "metadata": {"name": "wait", "namespace": "ml", "uid": "u9", "resourceVersion": "42"}
    }
    handler.apply(kind, obj)
    assert len(queue) == 0
    # its status moving on its node, or its deletion there, never queues it again
    bound["status"] = {"phase": "Running"}
    bound["metadata"]["deletionTimestamp"] = "2026-11-25T04:00:00Z"
    for change in ("MODIFIED", "ADDED"):
        handler.apply(*pending_pod_event(_line(change, bound)))
    assert len(queue) == 0
    # a list (the fallback without watch lists) queues only the pods without a node
    handler.replace([copy.deepcopy(bound), copy.deepcopy(pending)])
    assert len(queue) == 1
    other = gpu_pod("other", 1, namespace="ml", uid="u10")
    other["spec"]["nodeName"] = "gpu-2"
    handler.replace([other])
    assert len(queue) == 0


def test_a_bound_pod_that_starts_is_not_translated_again_and_every_other_change_is() -> None:
    """The bound-pod watch's status-only change (the pod started) is applied to the pod the
    inventory holds, decoded as its status alone; the inventory ends as a whole decode would
    leave it. A spec or label change, an end, a re-list each go the whole way."""
    inventory = Inventory()
    sync = KubeSync(cast(KubeClient, Stream([])), inventory)
    watch = sync._reflectors[1]
    lines = watch._handler.lines  # type: ignore[attr-defined]
    decoded: list[KubeObject] = []
    decode = lines.decode

    def recording(line: bytes) -> tuple[str, KubeObject]:
        kind, obj = decode(line)
        decoded.append(obj)
        return kind, obj

    watch._decode = recording
    watch._handler.replace([])

    def served(rv: int, **changes: Any) -> bytes:
        obj = _bound("u1", rv, **changes)
        obj["status"].pop("conditions")
        return _line("MODIFIED" if rv > 2 else "ADDED", obj)

    def held() -> BoundPod | None:
        return inventory.bound_pod("u1")

    def whole(line: bytes) -> BoundPod | None:
        return bound_pod(bound_pod_fields(parse_watch_line(line, PODS)[1]))

    watch._event(served(2, status__phase="Pending"), "1")
    assert held() == whole(served(2, status__phase="Pending"))
    started = served(3, status__startTime="2026-12-01T09:00:01Z")
    watch._event(started, "1")
    assert "spec" not in decoded[-1]  # its status alone
    assert held() == whole(started)
    pod = held()
    assert pod is not None
    assert pod.started_at is not None
    relabelled = served(4, status__startTime="2026-12-01T09:00:01Z", metadata__labels={"a": "b"})
    watch._event(relabelled, "1")
    assert "spec" in decoded[-1]
    assert held() == whole(relabelled)
    watch._handler.replace([parse_watch_line(relabelled, PODS)[1]])  # a list: forget all
    again = served(5, status__startTime="2026-12-01T09:00:02Z", metadata__labels={"a": "b"})
    watch._event(again, "1")
    assert "spec" in decoded[-1]
    assert held() == whole(again)
    ended = served(6, status__phase="Succeeded", metadata__labels={"a": "b"})
    watch._event(ended, "1")
    assert held() is None
    assert inventory.ran_to_end("u1")
