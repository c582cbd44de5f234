"""scheduler_perf's ops that order a workload's pods rather than make them: ``barrier``,
``deletePods``, ``startCollectingMetrics``/``stopCollectingMetrics`` and ``updateAny`` — read and
run as upstream's ``test/integration/scheduler_perf/{operations.go,executor.go,update.go}``
(v1.36.3) do — and the book of pods they wait on.

- ``barrier`` waits until the pods of its ``namespaces`` (every namespace pods were created in
  when none is given) matching its ``labelSelector`` are bound — as many as the
  ``skipWaitToCompletion`` createPods ops sent there since the last barrier on it — or, with
  ``stageRequirement: Attempted``, bound or given a ``PodScheduled`` condition (the scheduler
  tried them; the API server gives a gated pod one at its create). A ``Scheduled`` barrier
  forgets the namespaces it waited on, as upstream's does.
- ``deletePods`` deletes a namespace's pods (those matching ``labelSelector``): all at once
  (one delete-collection), or ``deletePodsPerSecond`` one by one; ``skipWaitToCompletion`` runs
  it beside the next ops (the turn ends when it does).
- ``startCollectingMetrics`` opens the measured phase over its ``namespaces``' pods matching
  ``labelSelector``; ``stopCollectingMetrics`` closes it.
- ``updateAny`` replaces ``count`` objects from a file (rendered with each one's index), then
  their status, ``updatePerSecond`` a second (0: at once); with ``subresources`` the first
  write goes to that subresource (a Pod's ``resize``).

The wait is on :class:`PodBook`: one list and watch of every pod in the cluster (as upstream's
runner shares one pod informer), counted locally.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.scheduler_perf_objects import (
    WorkloadError,
    flag,
    known_keys,
    positive_int,
    resource_of,
)
from benchmarks.scheduler_perf_templates import ObjectTemplate
from common.kube import PODS, KubeClient
from common.kube.errors import KubeError

__all__ = [
    "ATTEMPTED",
    "SCHEDULED",
    "Barrier",
    "DeletePods",
    "PodBook",
    "StartMetrics",
    "StopMetrics",
    "UpdateAny",
    "WaitTimeout",
    "barrier_op",
    "delete_op",
    "delete_pods",
    "drop_finalizers",
    "selector_text",
    "start_op",
    "stop_op",
    "update_any",
    "update_op",
]

SCHEDULED, ATTEMPTED = "Scheduled", "Attempted"


class WaitTimeout(RuntimeError):
    """Pods a step or barrier waits for did not get there in time: the turn stops there."""


Selector = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Barrier:
    namespaces: tuple[str, ...]  # as the workload names them; () is every one with pods sent
    selector: Selector = ()
    stage: str = SCHEDULED


@dataclass(frozen=True, slots=True)
class DeletePods:
    namespace: str
    selector: Selector = ()
    per_second: int = 0  # 0: one delete-collection
    skip_wait: bool = False


@dataclass(frozen=True, slots=True)
class StartMetrics:
    name: str
    namespaces: tuple[str, ...]
    selector: Selector = ()


@dataclass(frozen=True, slots=True)
class StopMetrics:
    pass


@dataclass(frozen=True, slots=True)
class UpdateAny:
    template: ObjectTemplate
    namespace: str | None
    count: int = 1
    per_second: int = 0
    subresources: tuple[str, ...] = ()


def _selector(op: Mapping[str, Any], where: str) -> Selector:
    value = op.get("labelSelector")
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise WorkloadError(f"{where}.labelSelector: {value!r} is not a map of label to value")
    return tuple(sorted(value.items()))


def _names(op: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = op.get(key) or []
    if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
        raise WorkloadError(f"{where}.{key}: {value!r} is not a list of namespaces")
    return tuple(value)


def _namespace(op: Mapping[str, Any], where: str, *, required: bool) -> str | None:
    value = op.get("namespace")
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise WorkloadError(f"{where}.namespace: {value!r} is not a namespace")
    return value


def _rate(op: Mapping[str, Any], key: str, where: str) -> int:
    return positive_int(op, key, where, minimum=0) if key in op else 0


BARRIER_KEYS = frozenset({"opcode", "namespaces", "labelSelector", "stageRequirement"})


def barrier_op(op: Mapping[str, Any], where: str) -> Barrier:
    known_keys(op, BARRIER_KEYS, "barrier", where)
    stage = op.get("stageRequirement") or SCHEDULED
    if stage not in (SCHEDULED, ATTEMPTED):
        raise WorkloadError(
            f"{where}.stageRequirement: {stage!r} is not {SCHEDULED} or {ATTEMPTED}"
        )
    return Barrier(_names(op, "namespaces", where), _selector(op, where), stage)


DELETE_KEYS = frozenset(
    {"opcode", "namespace", "labelSelector", "skipWaitToCompletion", "deletePodsPerSecond"}
)


def delete_op(op: Mapping[str, Any], where: str) -> DeletePods:
    known_keys(op, DELETE_KEYS, "deletePods", where)
    namespace = _namespace(op, where, required=True)
    assert namespace is not None
    return DeletePods(
        namespace,
        _selector(op, where),
        _rate(op, "deletePodsPerSecond", where),
        flag(op, "skipWaitToCompletion", where),
    )


START_KEYS = frozenset({"opcode", "name", "namespaces", "labelSelector"})


def start_op(op: Mapping[str, Any], where: str) -> StartMetrics:
    known_keys(op, START_KEYS, "startCollectingMetrics", where)
    namespaces = _names(op, "namespaces", where)
    if not namespaces:
        raise WorkloadError(f"{where}.namespaces: {op.get('namespaces')!r}: give at least one")
    name = op.get("name", "")
    if not isinstance(name, str):
        raise WorkloadError(f"{where}.name: {name!r} is not a name")
    return StartMetrics(name, namespaces, _selector(op, where))


def stop_op(op: Mapping[str, Any], where: str) -> StopMetrics:
    known_keys(op, frozenset({"opcode"}), "stopCollectingMetrics", where)
    return StopMetrics()


UPDATE_KEYS = frozenset(
    {
        "opcode",
        "namespace",
        "templatePath",
        "count",
        "countParam",
        "updatePerSecond",
        "subresources",
    }
)


def update_op(template: ObjectTemplate, op: Mapping[str, Any], count: int, where: str) -> UpdateAny:
    known_keys(op, UPDATE_KEYS, "updateAny", where)
    resource = resource_of(template.render(0, max(count, 1)), f"{where}.templatePath")
    namespace = _namespace(op, where, required=False)
    if bool(namespace) != resource.namespaced:
        raise WorkloadError(
            f"{where}.namespace: {namespace!r}, but {resource.kind} is "
            f"{'namespaced' if resource.namespaced else 'cluster-scoped'}"
        )
    subresources = op.get("subresources") or []
    if not isinstance(subresources, list) or not all(
        isinstance(s, str) and s for s in subresources
    ):
        raise WorkloadError(f"{where}.subresources: {subresources!r} is not a list of names")
    if len(subresources) > 1:
        raise WorkloadError(f"{where}.subresources: {subresources!r}: this runner reads one")
    return UpdateAny(
        template, namespace, count, _rate(op, "updatePerSecond", where), tuple(subresources)
    )


def selector_text(selector: Selector) -> str | None:
    """As a ``labelSelector`` query (``a=b,c=d``); None for none."""
    return ",".join(f"{k}={v}" for k, v in selector) or None


def _matches(labels: Mapping[str, str], selector: Selector) -> bool:
    return all(labels.get(k) == v for k, v in selector)


@dataclass(slots=True)
class _Pod:
    labels: dict[str, str]
    bound: bool
    attempted: bool


class PodBook:
    """Every pod of the cluster, from one list and watch: what a barrier counts."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: where binds are recorded (a measured window): run's ``bound``, namespaces, selector
        self._recording: tuple[dict[str, float], frozenset[str], Selector] | None = None

    def record(
        self,
        bound: dict[str, float] | None,
        namespaces: frozenset[str] = frozenset(),
        selector: Selector = (),
    ) -> None:
        """From now on, note in ``bound`` when each pod of ``namespaces`` matching ``selector``
        is first seen bound (None: stop)."""
        self._recording = None if bound is None else (bound, namespaces, selector)

    def _see(self, kind: str, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        if kind == "DELETED":
            self._pods.pop(key, None)
        else:
            conditions = (obj.get("status") or {}).get("conditions") or ()
            pod = _Pod(
                dict(meta.get("labels") or {}),
                bool(obj["spec"].get("nodeName")),
                any(c.get("type") == "PodScheduled" for c in conditions),
            )
            self._pods[key] = pod
            if pod.bound and self._recording is not None:
                bound, namespaces, selector = self._recording
                if key[0] in namespaces and _matches(pod.labels, selector):
                    bound.setdefault(key[1], time.perf_counter())
        self._changed.set()

    async def start(self) -> None:
        listed = await self._kube.list(PODS)
        for obj in listed["items"]:
            self._see("ADDED", obj)
        self._task = asyncio.create_task(self._watch(listed["resourceVersion"]))

    async def _watch(self, rv: str) -> None:
        while True:
            try:
                async for kind, obj in self._kube.watch(
                    PODS, resource_version=rv, timeout_seconds=900
                ):
                    rv = obj["metadata"].get("resourceVersion") or rv
                    self._see(kind, obj)
            except KubeError as exc:
                print(f"watch of every pod broke ({exc}); resuming", file=sys.stderr)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def count(self, namespace: str, selector: Selector = (), stage: str = SCHEDULED) -> int:
        """The namespace's pods matching ``selector`` that are bound (``Scheduled``), or bound
        or tried (``Attempted``)."""
        return sum(
            1
            for (ns, _), pod in self._pods.items()
            if ns == namespace
            and _matches(pod.labels, selector)
            and (pod.bound or (stage == ATTEMPTED and pod.attempted))
        )

    async def wait(
        self,
        namespace: str,
        want: int,
        *,
        selector: Selector = (),
        stage: str = SCHEDULED,
        check: Callable[[], None] = lambda: None,
        timeout_s: float = 600,
    ) -> None:
        """Until :meth:`count` reaches ``want``; ``check`` is called on every change (the
        scheduler still runs), and an error names what is missing after ``timeout_s``."""
        deadline = time.perf_counter() + timeout_s
        while (got := self.count(namespace, selector, stage)) < want:
            if self._task is None:
                raise RuntimeError(f"{namespace}: waiting for pods on a book not watching")
            check()
            self._changed.clear()
            left = deadline - time.perf_counter()
            try:
                async with asyncio.timeout(max(left, 0)):
                    await self._changed.wait()
            except TimeoutError:
                raise WaitTimeout(
                    f"{namespace}: {got} of {want} pods {stage.lower()}"
                    f"{f' ({selector_text(selector)})' if selector else ''} in {timeout_s:g} s"
                ) from None


async def delete_pods(
    kube: KubeClient, op: DeletePods, namespace: str, own: Counter[tuple[str, str, str]]
) -> None:
    """Delete the namespace's pods matching the op's selector (see the module); ``own`` counts
    the requests that the API server's totals should not give the scheduler."""
    selector = selector_text(op.selector)
    if op.per_second == 0:
        own["DELETECOLLECTION", "pods", ""] += 1  # the API server's row for it
        await kube.delete_collection(PODS, namespace=namespace, label_selector=selector)
        return
    own["LIST", "pods", ""] += 1
    listed = await kube.list(PODS, namespace=namespace, label_selector=selector)
    interval = 1 / op.per_second
    start = time.perf_counter()
    for i, obj in enumerate(listed["items"]):
        await asyncio.sleep(max(0.0, start + (i + 1) * interval - time.perf_counter()))
        with contextlib.suppress(KubeError):  # gone already
            await kube.delete(PODS, obj["metadata"]["name"], namespace=namespace)


async def update_any(
    kube: KubeClient,
    op: UpdateAny,
    namespace: str | None,
    own: Counter[tuple[str, str, str]],
    dress: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> None:
    """Replace the op's objects and then their status (see the module), ``updatePerSecond`` a
    second; ``own`` counts the writes (the scheduler's share leaves them out); ``dress``: what
    the runner adds to each body (a Node's KWOK annotation and labels, as when it was made)."""
    resource = resource_of(op.template.render(0, op.count), str(op.template.path))
    first = op.subresources[0] if op.subresources else ""
    interval = 1 / op.per_second if op.per_second else 0.0
    start = time.perf_counter()
    for i in range(op.count):
        if interval:
            await asyncio.sleep(max(0.0, start + (i + 1) * interval - time.perf_counter()))
        body = op.template.render(i, op.count)
        if dress is not None:
            body = dress(body)
        name = body["metadata"]["name"]
        own["PUT", resource.plural, first] += 1
        await kube.replace(resource, name, body, namespace=namespace, subresource=first or None)
        own["PUT", resource.plural, "status"] += 1
        await kube.replace(resource, name, body, namespace=namespace, subresource="status")


async def drop_finalizers(kube: KubeClient, namespace: str) -> int:
    """Take the finalizers off the namespace's pods (upstream's pod-with-finalizer.yaml: a
    deleted one stays until they go), so that they can be cleared; returns how many."""
    listed = await kube.list(PODS, namespace=namespace)
    held = [p["metadata"]["name"] for p in listed["items"] if p["metadata"].get("finalizers")]
    sem = asyncio.Semaphore(32)

    async def one(name: str) -> None:
        async with sem:
            with contextlib.suppress(KubeError):  # gone meanwhile
                await kube.patch(
                    PODS, name, {"metadata": {"finalizers": None}}, namespace=namespace
                )

    await asyncio.gather(*(one(n) for n in held))
    return len(held)
