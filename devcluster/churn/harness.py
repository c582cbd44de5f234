"""The churn rounds: run a seeded plan against one ``topos coordinator`` process and check the
API server after every round.

A round does its actions (create pods and gangs, delete them, SIGKILL and restart the
coordinator at the planned moment), then *settles*: once a restarted coordinator serves again, it
lists the namespace's pods until every live pod is bound or has a reason, no gang is partly bound
(its binds are separate requests, so it may be for a moment) and the set of bound pods has not
changed for ``quiet_s`` — or until ``settle_timeout_s`` passed, when every pod still unexplained
is a violation. Then the invariants of :mod:`.checks` run on that list and the Nodes; a violation
found again in a later round (the same kind, pod, node and UUID) is reported once. The run stops
by itself after its rounds or its time limit, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.kube import EVENTS, NODES, PODS, AlreadyExists, KubeClient, NotFound
from devcluster.churn.checks import (
    GANG_LABEL,
    Violation,
    check_state,
    has_reason,
    is_live,
    name,
    node_of,
    partial_gangs,
    uid,
    vanished,
)
from devcluster.churn.fleet import (
    DEFAULT_FLEET,
    Agents,
    Coordinator,
    Kubelet,
    gpu_capacity,
    register_nodes,
)
from devcluster.churn.plan import Delete, Group, Kill, PlanSettings, Round, Submit, make_plan
from devcluster.pods import gpu_pod

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ChurnSettings:
    seed: int
    rounds: int
    kills: int
    settle_timeout_s: float = 30.0
    """A pod neither bound nor explained this long after its round is a violation."""
    quiet_s: float = 1.0
    """Bound pods unchanged this long: the round has settled."""
    time_limit_s: float = 600.0
    """Stop after this long even if rounds are left (reported as such)."""
    fleet: tuple[tuple[str, int], ...] = DEFAULT_FLEET
    kwok: Path | None = None
    """The ``kwok`` binary: KWOK plays the nodes' kubelet with the playground's stages and the
    agents' process removes deleted pods, as ``topos devcluster up`` runs them (pods run; half the
    deletions are graceful, as ``kubectl delete``, and the playground finishes them; the rest are
    forced). ``None``: no kubelet, every deletion forced."""


@dataclass
class ChurnResult:
    seed: int
    rounds_planned: int
    rounds_done: int = 0
    kills: int = 0
    pods_created: int = 0
    pods_deleted: int = 0
    gangs_created: int = 0
    graceful_deletes: int = 0
    violations: list[Violation] = field(default_factory=list)
    kill_rounds: list[int] = field(default_factory=list)
    settle_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    stopped_by_time: bool = False

    def line(self) -> str:
        return (
            f"seed {self.seed}: {self.rounds_done}/{self.rounds_planned} rounds, "
            f"{self.kills} coordinator kills"
            + (f" (rounds {self.kill_rounds})" if len(self.kill_rounds) <= 10 else "")
            + ", "
            f"{self.pods_created} pods created ({self.gangs_created} gangs), "
            f"{self.pods_deleted} deleted ({self.graceful_deletes} gracefully), "
            f"{len(self.violations)} violations, "
            f"{self.elapsed_s:.0f} s"
            + (" (stopped by the time limit)" if self.stopped_by_time else "")
        )


def manifest(group: Group, pod: str) -> dict[str, Any]:
    annotations = {"topos.io/numa-policy": "single-numa"} if group.single_numa else {}
    gang = (group.gang, group.min_member) if group.gang else None
    return gpu_pod(pod, group.gpus, annotations=annotations, gang=gang)


class Churn:
    """One run: the fleet, the plan, and what was found."""

    def __init__(
        self,
        kube: KubeClient,
        kubeconfig: Path,
        namespace: str,
        directory: Path,
        settings: ChurnSettings,
        log: Log = print,
    ) -> None:
        self.kube = kube
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.directory = directory
        self.settings = settings
        self.log = log
        self.run = uuid.uuid4().hex[:6]
        self.result = ChurnResult(seed=settings.seed, rounds_planned=settings.rounds)
        self.explained: set[str] = set()
        self.seen: set[tuple[str, str, str, str]] = set()
        """UIDs of pods a FailedScheduling Event explained."""
        self.mine: dict[str, str] = {}
        """The UID of each pod the harness created and has not deleted, by name."""
        self.graceful = random.Random(settings.seed ^ 0x6ACE)
        """Which deletions are graceful (its own stream: the plan of a seed stays the same)."""

    async def execute(self) -> ChurnResult:
        s = self.settings
        started = time.monotonic()
        nodes = await register_nodes(self.kube, self.run, s.fleet)
        coordinator = Coordinator("solo", self.kubeconfig, self.namespace, self.run, self.directory)
        agents = Agents(
            self.kubeconfig,
            nodes,
            coordinator.url,
            self.directory / "agents-solo.log",
            remove_deleted_pods=s.kwok is not None,
        )
        kubelet = Kubelet(s.kwok, self.kubeconfig, self.run, self.directory) if s.kwok else None
        plan = make_plan(s.seed, PlanSettings(s.rounds, s.kills, gpu_capacity(nodes)))
        self.log(
            f"churn seed {s.seed}: {s.rounds} rounds, {s.kills} kills planned, "
            f"{len(nodes)} nodes / {gpu_capacity(nodes)} GPUs, namespace {self.namespace}"
        )
        try:
            if kubelet is not None:
                kubelet.start()
            coordinator.start()
            await coordinator.wait_serving()
            await agents.start()
            for round_ in plan:
                if time.monotonic() - started > s.time_limit_s:
                    self.result.stopped_by_time = True
                    break
                await self._round(round_, coordinator)
                self.result.rounds_done += 1
                if round_.index % 50 == 0:
                    self.result.elapsed_s = time.monotonic() - started
                    self.log(f"… {self.result.line()}")
        finally:
            coordinator.stop()
            agents.stop()
            self.result.elapsed_s = time.monotonic() - started
            await self._clean(nodes=[n.name for n in nodes])
            if kubelet is not None:
                kubelet.stop()
        self.log(self.result.line())
        return self.result

    async def _round(self, round_: Round, coordinator: Coordinator) -> None:
        for action in round_.actions:
            if isinstance(action, Submit):
                for pod in action.group.pods:
                    await self._create(manifest(action.group, pod))
                    self.result.pods_created += 1
                self.result.gangs_created += action.group.gang is not None
            elif isinstance(action, Delete):
                for pod in action.group.pods:
                    await self._delete(pod)
                    self.result.pods_deleted += 1
            elif isinstance(action, Kill):
                await asyncio.sleep(action.delay_ms / 1000)
                coordinator.kill()
                self.result.kills += 1
                coordinator.start()  # at once, as a restarted container; not waited for
        if round_.kills:
            self.result.kill_rounds.append(round_.index)
            await coordinator.wait_serving()  # settling starts once it is back
        for v in await self._settle(round_.index):
            key = (v.kind, v.pod, v.node, v.uuid)
            if key in self.seen:
                continue  # the same state found again in a later round: reported once
            self.seen.add(key)
            self.result.violations.append(v)
            self.log(f"VIOLATION {v}")

    async def _create(self, body: dict[str, Any]) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                made = await self.kube.create(PODS, body, namespace=self.namespace)
                self.mine[name(made)] = uid(made)
                return
            except AlreadyExists:
                # the deleted pod of that name is not gone yet (a graceful deletion waits for
                # the kubelet; a forced one is immediate): try again shortly, as a user would
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    async def _delete(self, pod: str, *, force: bool | None = None) -> None:
        self.mine.pop(pod, None)
        if force is None:
            force = self.settings.kwok is None or self.graceful.random() < 0.5
        with contextlib.suppress(NotFound):
            await self.kube.delete(
                PODS, pod, namespace=self.namespace, grace_period_seconds=0 if force else None
            )
        self.result.graceful_deletes += not force

    async def _settle(self, round_: int) -> list[Violation]:
        s = self.settings
        started = time.monotonic()
        deadline = started + s.settle_timeout_s
        last_bound: frozenset[tuple[str, str]] | None = None
        quiet_since = started
        explained = self.explained
        while True:
            pods = (await self.kube.list(PODS, namespace=self.namespace))["items"]
            live = [p for p in pods if is_live(p)]
            waiting = [p for p in live if not has_reason(p, explained)]
            for pod in waiting:
                if await self._failed_event(uid(pod)):
                    explained.add(uid(pod))
            waiting = [p for p in waiting if uid(p) not in explained]
            bound = frozenset((uid(p), node_of(p)) for p in live if node_of(p))
            now = time.monotonic()
            if bound != last_bound:
                last_bound, quiet_since = bound, now
            # binds are separate requests, so a gang is partly bound while its binds are in
            # flight: it must be whole (or released) by the deadline, not at every instant
            partial = partial_gangs(round_, live)
            if not waiting and not partial and now - quiet_since >= s.quiet_s:
                break
            if now > deadline:
                break
            await asyncio.sleep(0.2)
        self.result.settle_s.append(time.monotonic() - started)
        nodes = (await self.kube.list(NODES, label_selector=f"topos-churn/run={self.run}"))["items"]
        found = [
            Violation(
                round_,
                "unexplained",
                name(p),
                detail=f"uid {uid(p)[:8]}: neither bound nor given a reason after "
                f"{s.settle_timeout_s:.0f} s"
                + (f" (gang {p['metadata']['labels'][GANG_LABEL]})" if _gang(p) else ""),
            )
            for p in waiting
        ]
        return found + vanished(round_, self.mine, pods) + check_state(round_, pods, nodes)

    async def _failed_event(self, pod_uid: str) -> bool:
        listed = await self.kube.list(
            EVENTS,
            namespace=self.namespace,
            field_selector=f"involvedObject.uid={pod_uid},reason=FailedScheduling",
        )
        return bool(listed["items"])

    async def _clean(self, *, nodes: list[str]) -> None:
        """Remove this run's pods and Nodes from the (possibly shared) control plane."""
        pods = (await self.kube.list(PODS, namespace=self.namespace))["items"]
        for pod in pods:
            await self._delete(name(pod), force=True)
        for node in nodes:
            with contextlib.suppress(NotFound):
                await self.kube.delete(NODES, node)


def _gang(pod: dict[str, Any]) -> bool:
    return bool((pod["metadata"].get("labels") or {}).get(GANG_LABEL))
