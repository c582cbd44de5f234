"""Binding in the background, so the next pod is scheduled while earlier binds are on the wire.

The loop hands over a :class:`BindJob` once the decision is assumed (the assumption keeps the
GPUs taken meanwhile); :meth:`Binder.submit` waits only when ``max_in_flight`` binds are already
running (back-pressure). Each job checks that the node still exists, writes the decision's DRA
claims (``ClusterWriter.allocate_claims``: allocated and reserved for the pod — the gang step
has a gang's written for all members at once with :meth:`Binder.write_claims` before it submits
any, and they arrive here as ``written``), binds its WaitForFirstConsumer volumes to the node
(``VolumeWriter.bind_volumes``: PVs' ``claimRef``, claims' ``selected-node``), then
calls ``ClusterWriter.bind``; the outcome goes to ``on_bound`` / ``on_failed``. A bind refused
for good (:class:`~.ports.BindConflict`) releases the claims written for it; after a transient
error the bind may have happened, so they stay — the pod's claims are then allocated and reserved
for it, and its next attempt only binds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coordinator.core.dra.model import ClaimAllocation
from coordinator.core.framework.results import Decision
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.queue import QueuedPod
from coordinator.engine.ports import (
    BindConflict,
    ClusterError,
    ClusterWriter,
    PodRef,
    VolumeWriter,
)

log = logging.getLogger(__name__)

__all__ = ["BindJob", "Binder"]


@dataclass(frozen=True, slots=True)
class BindJob:
    entry: QueuedPod
    request: PodRequest
    decision: Decision
    #: The DRA claims to write before the bind (:func:`~.claims.claims_to_write`).
    claims: tuple[ClaimAllocation, ...] = ()
    #: The claims already written for it (a gang's, before any member binds); ``None``: the
    #: binder writes ``claims`` itself.
    written: tuple[ClaimAllocation, ...] | None = None
    #: A preemptor's bind (it waited for its victims to go): from its submit until its outcome
    #: the binder holds the scheduler's other background writes back (``hold``/``unhold``).
    urgent: bool = False

    @property
    def pod(self) -> PodRef:
        return PodRef(self.request.namespace, self.request.name, self.request.uid)


class Binder:
    def __init__(
        self,
        writer: ClusterWriter,
        *,
        node_exists: Callable[[str], bool],
        on_bound: Callable[[BindJob], None],
        on_failed: Callable[[BindJob, ClusterError], None],
        max_in_flight: int = 64,
        may_bind: Callable[[], bool] = lambda: True,
        on_claims: Callable[[BindJob, tuple[ClaimAllocation, ...]], None] = lambda job, c: None,
        hold: Callable[[], None] = lambda: None,
        unhold: Callable[[], None] = lambda: None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._writer = writer
        self._node_exists = node_exists
        self._on_bound = on_bound
        self._on_failed = on_failed
        self._on_claims = on_claims
        self._hold, self._unhold = hold, unhold
        self._slots = asyncio.Semaphore(max_in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self.max_in_flight = max_in_flight
        #: Asked before every bind (leader election: a replica that lost its lease stops).
        self.may_bind = may_bind

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def submit(self, job: BindJob) -> None:
        if job.urgent:
            self._hold()
        try:
            await self._slots.acquire()
        except BaseException:
            if job.urgent:
                self._unhold()
            raise
        task = asyncio.create_task(self._run(job), name=f"bind {job.request.key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, job: BindJob) -> None:
        written = job.written or ()
        try:
            node = job.decision.node
            if not self.may_bind():
                raise ClusterError("not the leader: binding is left to the leading replica")
            if not self._node_exists(node):
                raise BindConflict(f"node {node} is gone")
            if job.written is None and job.claims:
                written = await self._writer.allocate_claims(job.pod, job.claims)
                self._on_claims(job, written)
            volumes = job.decision.volumes
            if volumes is not None and (volumes.bind or volumes.provision):
                if not isinstance(self._writer, VolumeWriter):
                    raise BindConflict("this cluster cannot bind PersistentVolumeClaims")
                await self._writer.bind_volumes(job.pod, volumes)
            await self._writer.bind(job.pod, node, job.decision.annotations())
        except ClusterError as exc:
            if written and (isinstance(exc, BindConflict) or not self.may_bind()):
                await self.release_claims(job, written)  # never bound: nobody will use them
            self._report_failure(job, exc)
        except Exception as exc:  # a writer bug must not leave the assumption held forever
            log.exception("binding %s failed unexpectedly", job.request.key)
            self._report_failure(job, ClusterError(f"{type(exc).__name__}: {exc}"))
        else:
            try:
                self._on_bound(job)
            except Exception:
                log.exception("after binding %s", job.request.key)
        finally:
            self._slots.release()
            if job.urgent:
                self._unhold()

    async def write_claims(self, jobs: Sequence[BindJob]) -> list[BindJob] | None:
        """Write the DRA claims of pods that bind together (a gang), all or nothing, before any
        of them is submitted: the jobs with their claims written, or ``None`` when a write
        failed — then every claim written is given back and every job reported failed."""
        if not any(job.claims for job in jobs):
            return list(jobs)
        if not self.may_bind():
            error = ClusterError("not the leader: binding is left to the leading replica")
            for job in jobs:
                self._report_failure(job, error)
            return None
        outcomes = await asyncio.gather(
            *(self._writer.allocate_claims(job.pod, job.claims) for job in jobs),
            return_exceptions=True,
        )
        failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failed is None:
            out = []
            for job, written in zip(jobs, outcomes, strict=True):
                assert not isinstance(written, BaseException)
                self._on_claims(job, written)
                out.append(dataclasses.replace(job, written=written))
            return out
        for job, written in zip(jobs, outcomes, strict=True):
            if written and not isinstance(written, BaseException):
                await self.release_claims(job, written)
        error = (
            failed
            if isinstance(failed, ClusterError)
            else ClusterError(f"{type(failed).__name__}: {failed}")
        )
        log.info("claims of %d pods bound together not written: %s", len(jobs), error)
        for job in jobs:
            self._report_failure(job, error)
        return None

    async def release_claims(self, job: BindJob, claims: tuple[ClaimAllocation, ...]) -> None:
        """Undo claim writes for a pod that will not be bound (best effort, logged)."""
        try:
            await self._writer.release_claims(job.pod, claims)
        except Exception:
            log.exception("releasing the claims of %s failed", job.request.key)

    def _report_failure(self, job: BindJob, exc: ClusterError) -> None:
        try:
            self._on_failed(job, exc)
        except Exception:
            log.exception("after a failed bind of %s", job.request.key)

    async def drain(self) -> None:
        """Wait for every bind submitted so far."""
        while self._tasks:
            await asyncio.gather(*tuple(self._tasks), return_exceptions=True)

    async def cancel(self) -> None:
        for task in tuple(self._tasks):
            task.cancel()
        await asyncio.gather(*tuple(self._tasks), return_exceptions=True)
