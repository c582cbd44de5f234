"""``ClusterWriter`` on the Kubernetes API server, through ``common.kube``.

Bind is one request: a POST to ``pods/binding`` guarded by ``metadata.uid`` (a pod recreated
under the same name is refused) that carries the decision annotations — the API server copies a
Binding's annotations onto the pod in the same update that sets ``spec.nodeName``, so the
annotations and the node appear together. Failures write a ``FailedScheduling`` Event and patch
the ``PodScheduled`` condition through ``pods/status`` (strategic merge on the condition type), as
kube-scheduler does. Events may go through their own client (``events=``), as kube-scheduler's
do, so that under a client-side QPS limit they don't take binds' turns. A preemptor's nominated
node is written as ``status.nominatedNodeName`` (:func:`kube_nominator`). An eviction carries the
pod's UID as a precondition (``deleteOptions.preconditions.uid``): one decided for a pod that was
deleted and re-created under its name since leaves the new pod alone and counts as done.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Final

from common.kube import (
    PODS,
    Conflict,
    Invalid,
    KubeClient,
    KubeError,
    NotFound,
    TooManyRequests,
    Unreachable,
)
from common.kube.types import ObjectReference
from coordinator.adapters.kube.claims import KubeClaimWriter
from coordinator.core.dra.model import ClaimAllocation
from coordinator.engine.ports import (
    COMPONENT,
    CONDITION_REASON,
    REASON_FAILED,
    REASON_SCHEDULED,
    BindConflict,
    ClusterError,
    PodRef,
)
from coordinator.engine.preemptor import Nominate

__all__ = ["KubeClusterWriter", "kube_nominator"]

_EVENT_MESSAGE_MAX: Final = 1024


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
        self._events = events or client
        self._instance = instance
        self._claims = KubeClaimWriter(client)

    async def allocate_claims(
        self, pod: PodRef, claims: Sequence[ClaimAllocation]
    ) -> tuple[ClaimAllocation, ...]:
        return await self._claims.allocate(pod, claims)

    async def release_claims(self, pod: PodRef, claims: Sequence[ClaimAllocation]) -> None:
        await self._claims.release(pod, claims)

    async def bind(self, pod: PodRef, node: str, annotations: Mapping[str, str]) -> None:
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
            raise ClusterError(f"bind {pod.key} to {node}: {exc}") from exc

    async def record_failure(self, pod: PodRef, message: str) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": CONDITION_REASON,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        body: dict[str, object] = {"status": {"conditions": [condition]}}
        if pod.uid:
            # Only on this pod: one re-created under its name since is another pod.
            body["metadata"] = {"uid": pod.uid}
        for attempt in (1, 2):
            try:
                await self._client.patch(
                    PODS,
                    pod.name,
                    body,
                    namespace=pod.namespace,
                    patch_type="strategic",
                    subresource="status",
                )
                break
            except NotFound:
                return  # deleted meanwhile: nothing to explain to anyone
            except (Conflict, Invalid) as exc:
                if pod.uid:
                    return  # a uid that no longer matches: the pod was re-created meanwhile
                raise ClusterError(f"condition on {pod.key}: {exc}") from exc
            except Unreachable as exc:
                # Setting the same condition twice is harmless: retry a dropped connection once.
                if attempt == 2:
                    raise ClusterError(f"condition on {pod.key}: {exc}") from exc
            except KubeError as exc:
                raise ClusterError(f"condition on {pod.key}: {exc}") from exc
        await self.event(pod, reason=REASON_FAILED, message=message, event_type="Warning")

    async def record_scheduled(self, pod: PodRef, message: str) -> None:
        await self.event(pod, reason=REASON_SCHEDULED, message=message)

    async def event(
        self, pod: PodRef, *, reason: str, message: str, event_type: str = "Normal"
    ) -> None:
        try:
            await self._events.create_event(
                regarding=_reference(pod),
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
