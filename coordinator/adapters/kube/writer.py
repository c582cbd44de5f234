"""``ClusterWriter`` on the Kubernetes API server, through ``common.kube``.

Bind is one request: a POST to ``pods/binding`` guarded by ``metadata.uid`` (a pod recreated
under the same name is refused) that carries the decision annotations — the API server copies a
Binding's annotations onto the pod in the same update that sets ``spec.nodeName`` (and
``PodScheduled=True``), so the annotations and the node appear together. Failures patch the
``PodScheduled`` condition through ``pods/status`` (strategic merge on the condition type; the
scheduler then writes a ``FailedScheduling`` Event), as kube-scheduler does; a preemptor's
``status.nominatedNodeName`` goes in the same patch (:meth:`KubeClusterWriter.explain`), as
kube-scheduler's one ``pods/status`` write for a pod whose preemption succeeded.

Per pod (by UID) the condition and the bind are ordered: once a pod's bind is sent, no
``PodScheduled=False`` is sent for it any more — a condition write still waiting for its turn is
called off (:class:`~common.kube.Superseded`), and a bind waits for the answer to a condition
write already on the wire before it is sent, so the API server always applies the bind last.

Events and condition writes are deferrable (:class:`~common.kube.Deferrable`): under the
client's QPS limit they yield to binds; a condition carrying a nomination is not deferred. Events
are aggregated per pod and reason (:class:`~common.kube.recorder.EventRecorder`: one Event whose
count goes up) and may go through their own client (``events=``), as kube-scheduler's do. A
nomination alone (made without an explanation, or cleared) is written by :func:`kube_nominator`.
An eviction carries the pod's UID as a precondition (``deleteOptions.preconditions.uid``): one
decided for a pod that was deleted and re-created under its name since leaves the new pod alone
and counts as done.
"""

from __future__ import annotations

import asyncio
import datetime
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Final

from common.kube import (
    PODS,
    Conflict,
    Deferrable,
    Invalid,
    KubeClient,
    KubeError,
    NotFound,
    ServerError,
    Superseded,
    TooManyRequests,
    Unreachable,
)
from common.kube.recorder import EventRecorder
from common.kube.types import ObjectReference
from coordinator.adapters.kube.claims import KubeClaimWriter
from coordinator.adapters.kube.volumes import bind_volumes
from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.snapshot.volumes import VolumeWrites
from coordinator.engine.ports import (
    COMPONENT,
    CONDITION_REASON,
    REASON_FAILED,
    REASON_SCHEDULED,
    BindConflict,
    ClusterError,
    NoAnswer,
    Nominate,
    PodRef,
)

__all__ = ["KubeClusterWriter", "kube_nominator"]

_EVENT_MESSAGE_MAX: Final = 1024
#: Pods (UIDs) whose bind was sent, remembered so that no explanation follows the bind: far more
#: than the writes that can be waiting at once.
_BINDS_REMEMBERED: Final = 100_000


def _reference(pod: PodRef) -> ObjectReference:
    ref: ObjectReference = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod.name,
        "namespace": pod.namespace,
    }
    if pod.uid:
        ref["uid"] = pod.uid
    return ref


class KubeClusterWriter:
    """Writes through one ``KubeClient``; ``instance`` names this coordinator in Events."""

    def __init__(
        self, client: KubeClient, *, instance: str = COMPONENT, events: KubeClient | None = None
    ) -> None:
        self._client = client
        self._events = EventRecorder(events or client)
        self._instance = instance
        self._claims = KubeClaimWriter(client)
        self._bind_sent: OrderedDict[str, None] = OrderedDict()  # uid → (), newest last
        self._on_wire: dict[str, set[asyncio.Future[None]]] = {}  # uid → conditions sent

    def _bind_was_sent(self, pod: PodRef) -> bool:
        return bool(pod.uid) and pod.uid in self._bind_sent

    async def _binding(self, pod: PodRef) -> None:
        """From now on no condition is sent for ``pod``; one already sent is answered first."""
        if not pod.uid:
            return
        self._bind_sent[pod.uid] = None
        self._bind_sent.move_to_end(pod.uid)
        while len(self._bind_sent) > _BINDS_REMEMBERED:
            self._bind_sent.popitem(last=False)
        sent = self._on_wire.get(pod.uid)
        if sent:
            await asyncio.wait(tuple(sent))

    async def allocate_claims(
        self, pod: PodRef, claims: Sequence[ClaimAllocation]
    ) -> tuple[ClaimAllocation, ...]:
        return await self._claims.allocate(pod, claims)

    async def release_claims(self, pod: PodRef, claims: Sequence[ClaimAllocation]) -> None:
        await self._claims.release(pod, claims)

    async def bind_volumes(self, pod: PodRef, writes: VolumeWrites) -> None:
        await bind_volumes(self._client, pod, writes)

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
        await self._binding(pod)
        try:
            await self._client.bind(
                namespace=pod.namespace,
                pod=pod.name,
                node=node,
                pod_uid=pod.uid or None,
                annotations=annotations,
            )
        except (NotFound, Conflict) as exc:
            raise BindConflict(f"bind {pod.key} to {node}: {exc}") from exc
        except Invalid as exc:
            # A uid that no longer matches (the pod was recreated) is refused as invalid.
            raise BindConflict(f"bind {pod.key} to {node}: {exc}") from exc
        except KubeError as exc:
            if pod.uid and not isinstance(exc, Unreachable | ServerError):
                # Refused outright (not a bind that may have happened): it may be explained again.
                self._bind_sent.pop(pod.uid, None)
            if isinstance(exc, Unreachable):
                raise NoAnswer(f"bind {pod.key} to {node}: {exc}") from exc
            raise ClusterError(f"bind {pod.key} to {node}: {exc}") from exc

    async def explain(self, pod: PodRef, message: str, *, nominated: str = "") -> bool:
        if self._bind_was_sent(pod):
            return False  # bound (or being bound): an explanation now would be a stale one
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": CONDITION_REASON,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        status: dict[str, object] = {"conditions": [condition]}
        if nominated:
            status["nominatedNodeName"] = nominated
        body: dict[str, object] = {"status": status}
        if pod.uid:
            # Only on this pod: one re-created under its name since is another pod.
            body["metadata"] = {"uid": pod.uid}
        answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def send_now() -> bool:
            if self._bind_was_sent(pod):
                return False
            if pod.uid:
                self._on_wire.setdefault(pod.uid, set()).add(answered)
            return True

        try:
            if not nominated:
                await self._patch_condition(pod, body, Deferrable(send_now=send_now))
            elif send_now():  # a nomination waits for no one's rate limit
                await self._patch_condition(pod, body, None)
            else:
                return False
        except (Superseded, NotFound):
            return False  # bound meanwhile, re-created, or deleted: nothing to explain to anyone
        finally:
            answered.set_result(None)
            sent = self._on_wire.get(pod.uid)
            if sent is not None:
                sent.discard(answered)
                if not sent:
                    del self._on_wire[pod.uid]
        return not self._bind_was_sent(pod)

    async def _patch_condition(
        self, pod: PodRef, body: Mapping[str, object], deferrable: Deferrable | None
    ) -> None:
        for attempt in (1, 2):
            try:
                await self._client.patch(
                    PODS,
                    pod.name,
                    body,
                    namespace=pod.namespace,
                    patch_type="strategic",
                    subresource="status",
                    deferrable=deferrable,
                )
                return
            except (NotFound, Superseded):
                raise
            except (Conflict, Invalid) as exc:
                if pod.uid:
                    raise Superseded(str(exc)) from exc  # the pod was re-created meanwhile
                raise ClusterError(f"condition on {pod.key}: {exc}") from exc
            except Unreachable as exc:
                # Setting the same condition twice is harmless: retry a dropped connection once.
                if attempt == 2:
                    raise ClusterError(f"condition on {pod.key}: {exc}") from exc
            except KubeError as exc:
                raise ClusterError(f"condition on {pod.key}: {exc}") from exc

    async def record_scheduled(self, pod: PodRef, message: str) -> None:
        await self.event(pod, reason=REASON_SCHEDULED, message=message)

    async def event(
        self, pod: PodRef, *, reason: str, message: str, event_type: str = "Normal"
    ) -> None:
        try:
            await self._events.record(
                _reference(pod),
                reason=reason,
                message=message[:_EVENT_MESSAGE_MAX],
                event_type=event_type,
                action="Scheduling" if reason in (REASON_FAILED, REASON_SCHEDULED) else "",
                component=COMPONENT,
                instance=self._instance,
            )
        except KubeError as exc:
            raise ClusterError(f"event on {pod.key}: {exc}") from exc

    async def evict(self, pod: PodRef, *, grace_period_s: int | None = None) -> None:
        try:
            await self._client.evict(
                namespace=pod.namespace,
                pod=pod.name,
                pod_uid=pod.uid or None,
                grace_period_seconds=grace_period_s,
            )
        except NotFound:
            return
        except Conflict as exc:
            if pod.uid:
                return  # the UID precondition failed: the pod decided on is gone, re-created
            raise ClusterError(f"evict {pod.key}: {exc}") from exc
        except TooManyRequests as exc:  # a disruption budget says not now
            raise ClusterError(f"evict {pod.key}: {exc}") from exc
        except KubeError as exc:
            raise ClusterError(f"evict {pod.key}: {exc}") from exc


def kube_nominator(client: KubeClient) -> Nominate:
    """``status.nominatedNodeName`` through ``pods/status`` (``""`` removes it); a pod gone
    meanwhile is no error. With ``pod.uid`` only that pod: one re-created under its name since is
    left alone (the patch's ``metadata.uid`` no longer matches), as one gone."""

    async def nominate(pod: PodRef, node: str) -> None:
        body: dict[str, object] = {"status": {"nominatedNodeName": node or None}}
        if pod.uid:
            body["metadata"] = {"uid": pod.uid}
        try:
            await client.patch(PODS, pod.name, body, namespace=pod.namespace, subresource="status")
        except NotFound:
            return
        except (Conflict, Invalid) as exc:
            if pod.uid:
                return  # a uid that no longer matches: the pod was re-created meanwhile
            raise ClusterError(f"nominate {pod.key} for {node}: {exc}") from exc
        except KubeError as exc:
            raise ClusterError(f"nominate {pod.key} for {node}: {exc}") from exc

    return nominate
