"""Two coordinators at once, with leader election configured explicitly: only the leader binds,
and when it is SIGKILLed the other takes over.

Both run as ``topos coordinator`` processes over the same nodes and namespace, each with its own
agents' process (in a cluster the agents reach the leader through the Service; here each replica
has its agents already, so the figure is the election's and the first scheduling cycle's, not
the agents' reconnection). Who bound a pod is read from the API server: the ``Scheduled`` Event
about the pod's UID names the replica (``reportingInstance`` = its election identity), and the
Lease names the leader, and so does the ``topos.io/leader=true`` label the leader puts on its own
pod (a Pod object per coordinator, named in its ``POD_NAME``). Each trial binds a few pods (all
must be the leader's), SIGKILLs the leader, creates a pod at once and measures the time until it
is bound — by the other replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from common.kube import EVENTS, LEASES, NODES, PODS, KubeClient, NotFound
from coordinator.app.leadership import LEADER_LABEL
from devcluster.churn.checks import Violation, node_of, uid
from devcluster.churn.checks import name as object_name
from devcluster.churn.fleet import Agents, Coordinator, Election, register_nodes
from devcluster.churn.harness import Log
from devcluster.pods import gpu_pod

BIND_TIMEOUT_S = 90.0


@dataclass(frozen=True, slots=True)
class FailoverSettings:
    trials: int = 2
    pods_per_trial: int = 3
    election: Election | None = None
    """None: a lease of 4 s, renew deadline 3 s, retry period 0.5 s."""


@dataclass
class FailoverResult:
    failover_s: list[float] = field(default_factory=list)
    """SIGKILL of the leader → the new pod bound by the other replica."""
    takeover_s: list[float] = field(default_factory=list)
    """SIGKILL of the leader → the other replica named in the Lease."""
    binds: int = 0
    violations: list[Violation] = field(default_factory=list)

    def line(self) -> str:
        if not self.failover_s:
            return f"no failover measured; {len(self.violations)} violations"
        return (
            f"{len(self.failover_s)} failovers: kill → bind p50 "
            f"{statistics.median(self.failover_s):.1f} s, max {max(self.failover_s):.1f} s "
            f"(kill → lease taken p50 {statistics.median(self.takeover_s):.1f} s); "
            f"{self.binds} binds attributed, {len(self.violations)} violations"
        )


class _Trials:
    def __init__(
        self, kube: KubeClient, namespace: str, election: Election, pods: int, log: Log
    ) -> None:
        self.kube = kube
        self.pods_per_trial = pods
        self.namespace = namespace
        self.election = election
        self.log = log
        self.result = FailoverResult()
        self.serial = 0

    async def holder(self) -> str:
        try:
            lease = await self.kube.get(LEASES, self.election.lease_name, namespace=self.namespace)
        except NotFound:
            return ""
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    async def wait_holder(self, among: set[str]) -> str:
        deadline = time.monotonic() + BIND_TIMEOUT_S
        while (holder := await self.holder()) not in among:
            if time.monotonic() > deadline:
                raise AssertionError(f"no leader among {sorted(among)}; lease holder {holder!r}")
            await asyncio.sleep(0.05)
        return holder

    async def seen_holder(self, identity: str) -> float:
        """When the Lease was first seen naming ``identity`` (monotonic)."""
        await self.wait_holder({identity})
        return time.monotonic()

    async def create(self) -> tuple[str, str]:
        self.serial += 1
        name = f"probe-{self.serial}"
        pod = await self.kube.create(PODS, gpu_pod(name, 1), namespace=self.namespace)
        return name, uid(pod)

    async def bound(self, name: str) -> float:
        """When ``name`` was seen bound (monotonic)."""
        deadline = time.monotonic() + BIND_TIMEOUT_S
        while True:
            pod = await self.kube.get(PODS, name, namespace=self.namespace)
            if node_of(pod):
                return time.monotonic()
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} not bound after {BIND_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.02)

    async def binder(self, pod_uid: str) -> str:
        """``reportingInstance`` of the ``Scheduled`` Event about this pod (written after the
        bind, so waited for)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed = await self.kube.list(
                EVENTS,
                namespace=self.namespace,
                field_selector=f"involvedObject.uid={pod_uid},reason=Scheduled",
            )
            if listed["items"]:
                return str(listed["items"][0].get("reportingInstance") or "")
            await asyncio.sleep(0.1)
        return ""

    async def attribute(self, trial: int, name: str, pod_uid: str, leader: str) -> None:
        by = await self.binder(pod_uid)
        self.result.binds += 1
        if by != leader:
            self.result.violations.append(
                Violation(
                    trial,
                    "non-leader-bind",
                    name,
                    detail=f"bound by {by or '(no Scheduled event)'}; the leader was {leader}",
                )
            )

    async def labelled(self) -> set[str]:
        """Coordinators' pods carrying ``topos.io/leader=true``."""
        listed = await self.kube.list(
            PODS, namespace=self.namespace, label_selector=f"{LEADER_LABEL}=true"
        )
        return {object_name(p) for p in listed["items"]}

    async def trial(self, index: int, replicas: dict[str, Coordinator]) -> None:
        leader_id = await self.wait_holder(set(replicas))
        leader = replicas[leader_id]
        other = next(c for i, c in replicas.items() if i != leader_id)
        pods = [await self.create() for _ in range(self.pods_per_trial)]
        for pod, pod_uid in pods:
            await self.bound(pod)
            await self.attribute(index, pod, pod_uid, leader_id)
        if (labelled := await self.labelled()) != {leader.pod_name}:
            self.result.violations.append(
                Violation(
                    index,
                    "leader-label",
                    ", ".join(sorted(labelled)) or "(none)",
                    detail=f"labelled {LEADER_LABEL}=true; the Lease names {leader_id}",
                )
            )
        killed = time.monotonic()
        leader.kill()
        takeover = asyncio.create_task(self.seen_holder(other.identity))
        name, pod_uid = await self.create()
        bound_at = await self.bound(name)
        async with asyncio.timeout(BIND_TIMEOUT_S):
            took_at = await takeover
        taken = await self.holder()
        self.result.failover_s.append(bound_at - killed)
        self.result.takeover_s.append(took_at - killed)
        if taken != other.identity:
            self.result.violations.append(
                Violation(index, "non-leader-bind", name, detail=f"lease holder {taken!r}")
            )
        await self.attribute(index, name, pod_uid, other.identity)
        if other.pod_name not in await self.labelled():
            self.result.violations.append(
                Violation(index, "leader-label", other.pod_name, detail="new leader not labelled")
            )
        self.log(
            f"failover {index}: {leader_id} killed, {other.identity} bound {name} after "
            f"{bound_at - killed:.1f} s"
        )
        for n, _ in [*pods, (name, pod_uid)]:
            await self.kube.delete(PODS, n, namespace=self.namespace, grace_period_seconds=0)
        leader.start()  # back as a follower, under a new identity
        await leader.wait_serving()
        replicas.pop(leader_id)
        replicas[leader.identity] = leader


async def run_failover(
    kube: KubeClient,
    kubeconfig: Path,
    namespace: str,
    directory: Path,
    settings: FailoverSettings,
    log: Log = print,
) -> FailoverResult:
    run = uuid.uuid4().hex[:6]
    election = settings.election or Election(lease_name=f"churn-{run}")
    nodes = await register_nodes(kube, run, (("pcie-8x", 1),))
    a = Coordinator("a", kubeconfig, namespace, run, directory, election=election)
    b = Coordinator("b", kubeconfig, namespace, run, directory, election=election)
    fleets = [Agents(kubeconfig, nodes, c.url, directory / f"agents-{c.label}.log") for c in (a, b)]
    trials = _Trials(kube, namespace, election, settings.pods_per_trial, log)
    for c in (a, b):  # the coordinators' own pods, for the leader label (never scheduled)
        body = gpu_pod(c.pod_name, 0, scheduler="default-scheduler")
        await kube.create(PODS, body, namespace=namespace)
    try:
        a.start()
        await a.wait_serving()
        await trials.wait_holder({a.identity})  # A leads first: B starts as the follower
        b.start()
        await b.wait_serving()
        for agents in fleets:
            await agents.start()
        replicas = {a.identity: a, b.identity: b}
        for index in range(1, settings.trials + 1):
            await trials.trial(index, replicas)
    finally:
        for c in (a, b):
            c.stop()
        for agents in fleets:
            agents.stop()
        for node in nodes:
            with contextlib.suppress(NotFound):
                await kube.delete(NODES, node.name)
    log(trials.result.line())
    return trials.result
