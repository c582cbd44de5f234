"""NVLink clique placement benchmark: multi-tray gangs on GB200 NVL72 racks beside HGX nodes.

A seeded stream of jobs arrives and leaves on 8 GB200 NVL72 racks (144 ``gb200-nvl72`` trays of
4 GPUs, each rack one ``nvidia.com/gpu.clique``, 4 racks per leaf) plus 64 ``dgx-h100`` nodes of
8 GPUs (4 leaves of 16): 2–32-tray gangs (4-GPU members), 1–4-GPU pods and CPU-only pods. Every
arm sees the same stream, in one run:

- **topos**: the production gang cycle (``schedule_gang``: the clique tiers, the per-pod core
  confirming every member) and the per-pod core (``schedule_one``) for lone pods;
- **topos-nokeep**: the same without the domain-level stranding term (``CliqueKeep``);
- **clique-blind**: the same code with the clique tier and ``CliqueKeep`` switched off
  (``DomainKeys(clique="")``: Topos before cliques);
- **first-fit**: each member on the first node in name order with room.

Each tick: jobs whose time is up leave, new jobs queue, then every queued job is tried in arrival
order (a job that does not fit waits; later ones may pass it). Reported per arm: the share of
multi-tray gangs placed inside one NVLink domain (one clique, or one node), of those that could
have been (at most 18 trays and a clique with that many whole free trays when it was placed);
large-gang (≥ 8 trays) wait in ticks, p50 / p95; GPUs stranded in partly used cliques (free GPUs
of a clique some of whose GPUs are busy) and whole idle cliques, averaged over ticks; GPUs busy;
jobs left waiting at the end. Where the stranded GPUs are (the planner's arms): those in racks
holding gang members only (no lone pod), and the gangs placed over several cliques (how many, and
the mean number of cliques each spans).

``--engine`` replays the same streams through the production engine instead: the stream becomes
a ``coordinator/sim`` trace (a tick is a simulated minute; the fleet a ``coordinator/sim``
cluster description, each tray its rack's clique) and :class:`~coordinator.sim.replay.Simulator`
runs it — the scheduler and the gang runtime with their queues, backoff and timers on a
simulated clock, as ``topos coordinator --in-memory`` runs them — under three policies in one
run: ``topos``, ``clique-blind`` (the clique tier off, no ``CliqueKeep``) and ``firstfit`` (the
replay's baseline). The measures are read from where and when each job ran; a job waiting when
the stream ends is still placed (the replay runs until nothing is left), and its run time
stretches with its placement (:mod:`coordinator.sim.costmodel`), so load differs by arm.
Each arm's stranded GPUs are printed beside a bound (:mod:`benchmarks.clique_bound`): per tick,
the work the arm holds in racks re-packed into the fewest racks as if it could all be moved at no
cost (``re-packed perfectly``; ``gangs whole``: each gang of at most a rack's trays in one) — what
no placement of that rack work beats, moves included; it keeps what the arm put on the HGX nodes
and when each job started. The Topos arm's bound is also read as a multiple of clique-blind's.

``--defrag onDemand,background`` adds to ``--engine`` an arm per defragmentation mode
(``topos+<mode>``): Topos on the same stream with its pods movable — every lone pod a
ReplicaSet's (a Deployment replica), every gang a ``batch/v1`` Job whose ``podFailurePolicy``
ignores ``DisruptionTarget`` (a training job that checkpoints) — so that the engine may gather
a gang it would split over cliques into one and compact racks (docs/defragmentation.md);
reported besides: pods moved (by compaction) and the share of the GPU-seconds run that the moves
lost. ``background+racks`` is ``background`` with ``compactRacks`` (compaction may empty a whole
rack by moving its gangs whole into other racks in use). Each mode also runs
``clique-blind+<mode>``: the clique-blind arm with the same movable pods and the same
defragmentation (its compaction and gathering blind to cliques too), the base a
``topos+<mode>`` arm's stranding ratio is read against (``clique-blind`` when it is not run).
``--arms`` runs only the arms named. ``--max-loss-ratio`` and ``--evictions-per-hour`` set
defragmentation's ``maxLossRatio`` and ``evictionsPerHour`` in every ``--defrag`` arm (both
arms alike: docs/topology.md has the sweep).

``--causes`` (with ``--engine``) says, per arm, what the stranded GPUs are beside (:data:`CAUSES`,
means over the ticks): each rack in use by what it holds — a piece of a gang of ≤ 18 trays split
over racks (``split ≤18``), of a larger one (``split >18``), lone GPU pods only (``small only``),
whole gangs only (``gangs only``: the holes gangs smaller than the rack leave), whole gangs and
lone pods (``gangs+small``) — and the gap to the bound (72 GPUs for each rack in use beyond the
fewest that hold the arm's rack work) by the same causes, of the emptiest racks in use
(``extra …``); the bound's own stranded GPUs are the last rack's free trays (``bound rounding``)
and the free GPUs inside lone pods' trays (``bound fragments``). The fleet has no cordoned or
degraded trays.

``--replays K`` (with ``--engine``) replays each seed's stream K times, the k-th (k ≥ 1) with
every job arriving up to a second late (a seeded offset per job, the same for every arm): the
same work, only the order of events inside a simulated second changed. On the engine one seed's
stranded ratio moves by up to ±0.2 with that order alone — which compaction runs half a second
earlier, which of two equal nodes a lone pod gets, and, half an hour later, which rack a gang
breaks into (docs/topology.md) — so a change is read on the mean over replays and seeds.

Run: ``.venv/bin/python -m benchmarks.clique_placement [--engine [--defrag MODES] [--arms A]
[--causes] [--replays K] [--max-loss-ratio R] [--evictions-per-hour N]] [--ticks N] [--seed S]
[--seeds K] [--gang-rate R]``; with
``--seeds K`` the streams of seeds S … S+K-1, and the goals read over all of them (the lowest
share, the mean stranded ratio: one stream's ratio moves by ±0.15 from seed to seed); with
``--engine`` each Topos arm's figures over the seeds are printed too (its ratio by seed — with
replays, their mean and range —, the lowest one-clique share, the work lost, the pods moved).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.devices import discover_profile
from benchmarks.clique_bound import RackWork, fewest_racks, lone_trays, stranded_bound
from coordinator.core.domains.capacity import GPU, node_states
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.summary import clique_stranded
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.gangs.cycle import GangDecision, member_of, schedule_gang
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.preemption.defrag import DefragSettings
from coordinator.core.registry import PLUGINS, build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from coordinator.engine.gangs.service import GangSettings
from coordinator.forecast.engine import EngineSettings
from coordinator.sim.baselines.gangs import first_fit_members
from coordinator.sim.cluster import ClusterSpec, NodeGroup, build_nodes
from coordinator.sim.metrics import RunResult
from coordinator.sim.pods import NAMESPACE
from coordinator.sim.policies import Policy, make_policy
from coordinator.sim.replay import ReplaySettings, Simulator
from coordinator.sim.trace import Job as TraceJob

RACKS, TRAYS, HGX, HGX_LEAF = 8, 18, 64, 16
LEAF, SPINE, CLIQUE = "topos.io/leaf", "topos.io/spine", "nvidia.com/gpu.clique"
UUID = "5d0c9a3e-7f21-4c8b-a6e4-0b9f3d2c1e77"
LARGE = 8
GiB = 2**30


def snapshot() -> Snapshot:
    tray = discover_profile("gb200-nvl72", hostname="tray")
    hgx = discover_profile("dgx-h100", hostname="hgx")
    nodes = []
    for r in range(RACKS):
        for t in range(TRAYS):
            labels = {
                LEAF: f"leaf-r{r // 4 + 1}",
                SPINE: "spine-1",
                CLIQUE: f"{UUID}.{r + 1}",
            }
            alloc = {"cpu": 144_000, "memory": 900 * GiB, "pods": 110, GPU: 4}
            nodes.append(
                NodeInfo.build(
                    f"r{r + 1}-t{t + 1:02d}", labels=labels, allocatable=alloc, topology=tray
                )
            )
    for i in range(HGX):
        labels = {LEAF: f"leaf-h{i // HGX_LEAF + 1}", SPINE: "spine-1"}
        alloc = {"cpu": 224_000, "memory": 2048 * GiB, "pods": 110, GPU: 8}
        nodes.append(NodeInfo.build(f"hgx-{i:02d}", labels=labels, allocatable=alloc, topology=hgx))
    return Snapshot(nodes, namespaces={"ml": {}})


@dataclass
class Job:
    name: str
    arrive: int
    duration: int
    pods: list[PodRequest]
    trays: int  # members of a gang; 0 for a lone pod


def pod(name: str, gpus: int, cpu: int, gang: tuple[str, int] | None) -> PodRequest:
    labels = {"topos.io/gang": gang[0], "topos.io/gang-min": str(gang[1])} if gang else {}
    limits = {"cpu": f"{cpu}m", "memory": "8Gi"} | ({GPU: str(gpus)} if gpus else {})
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": labels},
        "spec": {
            "schedulerName": "topos",
            "containers": [{"name": "c", "image": "c", "resources": {"limits": limits}}],
        },
    }
    parsed = parse_pod(obj)
    assert isinstance(parsed, PodRequest), parsed
    return parsed


def stream(seed: int, ticks: int, gang_rate: float) -> list[Job]:
    rng = random.Random(seed)
    jobs: list[Job] = []
    for t in range(ticks):
        if rng.random() < gang_rate:  # a multi-tray gang
            size = rng.choice((2, 2, 4, 4, 4, 8, 8, 9, 12, 16, 16, 18, 24, 32))
            name = f"g{len(jobs)}"
            pods = [pod(f"{name}-{k}", 4, 8000, (name, size)) for k in range(size)]
            jobs.append(Job(name, t, rng.randint(20, 60), pods, size))
        for _ in range(rng.choice((0, 1, 1, 2, 3))):  # small GPU pods
            name = f"p{len(jobs)}"
            jobs.append(
                Job(name, t, rng.randint(4, 30), [pod(name, rng.randint(1, 4), 4000, None)], 0)
            )
        for _ in range(rng.choice((0, 1, 2))):  # CPU-only pods
            name = f"c{len(jobs)}"
            jobs.append(Job(name, t, rng.randint(4, 30), [pod(name, 0, 2000, None)], 0))
    return jobs


@dataclass
class Arm:
    name: str
    place: Callable[[Job, Snapshot], dict[str, str] | None]
    inside: int = 0
    could: int = 0
    waits: list[int] = field(default_factory=list)
    stranded: list[int] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    whole: list[int] = field(default_factory=list)
    # where the stranded GPUs are (the planner's arms): in racks holding gang members only
    gangs_only: list[int] = field(default_factory=list)
    split: list[int] = field(default_factory=list)  # cliques of each gang placed over several
    left: int = 0
    seconds: float = 0.0
    # the cost of moves (``--defrag`` arms): pods of started jobs moved, and the share of the
    # GPU-seconds run that they lost (their work started over)
    moved: int = 0
    compacted: int = 0  # of them, moved by background compaction
    lost: float = 0.0
    # per tick, the stranded GPUs of the arm's rack work re-packed perfectly (``--engine``;
    # :mod:`benchmarks.clique_bound`): trays anywhere, and each gang of ≤ 18 trays in one rack
    bound: list[int] = field(default_factory=list)
    bound_whole: list[int] = field(default_factory=list)
    # ``--causes``: per tick, the stranded GPUs put down to each of :data:`CAUSES`
    causes: dict[str, list[int]] = field(default_factory=dict)


def clique_room(snap: Snapshot) -> dict[str, int]:
    """Whole free trays per clique."""
    out: dict[str, int] = {}
    for n in node_states(snap):
        c = n.labels.get(CLIQUE)
        if c and n.gpus_free == n.gpus_total:
            out[c] = out.get(c, 0) + 1
    return out


def topos(keys: DomainKeys, *, keep: bool) -> Callable[[Job, Snapshot], dict[str, str] | None]:
    plugins = PLUGINS if keep else tuple(p for p in PLUGINS if p.name != "CliqueKeep")
    framework = build_framework(plugins=plugins)

    def place(job: Job, snap: Snapshot) -> dict[str, str] | None:
        if job.trays:
            got = schedule_gang(job.pods, snap, framework, min_member=len(job.pods), keys=keys)
            if not isinstance(got, GangDecision):
                return None
            for d in got.decisions:
                snap.assume(next(p for p in job.pods if p.key == d.pod_key), d.node, d.placement)
            return {d.pod_key: d.node for d in got.decisions}
        one = schedule_one(job.pods[0], snap, framework)
        if not isinstance(one, Decision):
            return None
        snap.assume(job.pods[0], one.node, one.placement)
        return {one.pod_key: one.node}

    return place


def first_fit() -> Callable[[Job, Snapshot], dict[str, str] | None]:
    framework = build_framework()

    def place(job: Job, snap: Snapshot) -> dict[str, str] | None:
        members = [member_of(p) for p in job.pods]
        nodes = sorted(node_states(snap), key=lambda n: n.name)
        chosen = first_fit_members(members, [n for n in nodes if n.schedulable])
        if chosen is None:
            return None
        done: list[str] = []
        for p in job.pods:
            d = schedule_one(p, snap, framework, candidate_nodes=(chosen[p.key],))
            if not isinstance(d, Decision):
                for key in done:
                    snap.forget(key)
                return None
            snap.assume(p, d.node, d.placement)
            done.append(p.key)
        return chosen

    return place


def run(arm: Arm, jobs: list[Job], ticks: int) -> None:
    snap = snapshot()
    queue: list[Job] = []
    running: list[tuple[int, Job]] = []
    by_tick: dict[int, list[Job]] = {}
    for j in jobs:
        by_tick.setdefault(j.arrive, []).append(j)
    clique_nodes: dict[str, list[str]] = {}
    for n in snap.nodes:
        c = n.labels.get(CLIQUE)
        if c:
            clique_nodes.setdefault(c, []).append(n.name)
    clique_of = {n: c for c, names in clique_nodes.items() for n in names}
    lone_in: dict[str, int] = {}  # clique → lone pods running there
    lone_at: dict[str, str] = {}  # lone pod → its clique
    t0 = time.process_time()
    for t in range(ticks):
        for end, job in [r for r in running if r[0] <= t]:
            for p in job.pods:
                snap.forget(p.key)
            running.remove((end, job))
            if job.name in lone_at:
                lone_in[lone_at.pop(job.name)] -= 1
        queue.extend(by_tick.get(t, []))
        waiting: list[Job] = []
        for job in queue:
            room = clique_room(snap) if job.trays >= 2 else {}
            free = sum(n.gpus_free for n in node_states(snap)) if job.trays else 1
            need = sum(p.requests.get(GPU, 0) for p in job.pods) if job.trays else 0
            got = arm.place(job, snap) if free >= need else None
            if got is None:
                waiting.append(job)
                continue
            running.append((t + job.duration, job))
            if not job.trays:
                if (home := clique_of.get(next(iter(got.values())))) is not None:
                    lone_at[job.name] = home
                    lone_in[home] = lone_in.get(home, 0) + 1
            elif len(cliques := {clique_of.get(n) for n in got.values()} - {None}) > 1:
                arm.split.append(len(cliques))
            if job.trays >= LARGE:
                arm.waits.append(t - job.arrive)
            if job.trays >= 2 and job.trays <= TRAYS and max(room.values(), default=0) >= job.trays:
                arm.could += 1
                arm.inside += one_nvlink_domain(snap, set(got.values()))
        queue = waiting
        states = {n.name: n for n in node_states(snap)}
        total = sum(n.gpus_total for n in states.values())
        arm.busy.append(sum(n.gpus_used for n in states.values()) / total)
        arm.whole.append(
            sum(all(states[n].gpus_used == 0 for n in names) for names in clique_nodes.values())
        )
        stranded = {c: clique_stranded([states[n] for n in ns]) for c, ns in clique_nodes.items()}
        arm.stranded.append(sum(stranded.values()))
        arm.gangs_only.append(sum(g for c, g in stranded.items() if not lone_in.get(c)))
    arm.left = len(queue)
    arm.seconds = time.process_time() - t0


def one_nvlink_domain(snap: Snapshot, nodes: set[str]) -> bool:
    """One node, or nodes of one clique."""
    if len(nodes) == 1:
        return True
    cliques = {info.labels.get(CLIQUE) for info in snap.in_order(nodes)}
    return len(cliques) == 1 and None not in cliques


def pct(values: list[int], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return float(values[min(len(values) - 1, int(q * len(values)))])


def report(arm: Arm) -> None:
    share = arm.inside / arm.could if arm.could else float("nan")
    print(
        f"  {arm.name:12s} in one NVLink domain {arm.inside:3d}/{arm.could:3d} = {share:6.1%}"
        f"  large-gang wait p50 {pct(arm.waits, 0.5):4.0f}"
        f" p95 {pct(arm.waits, 0.95):4.0f} ticks"
        f" ({len(arm.waits)} placed)"
        f"  stranded clique GPUs mean {statistics.fmean(arm.stranded):6.1f}"
        + (
            f" (racks of gangs only {statistics.fmean(arm.gangs_only):5.1f})"
            if arm.gangs_only
            else ""
        )
        + (
            f" (re-packed perfectly: {statistics.fmean(arm.bound):5.1f},"
            f" gangs whole {statistics.fmean(arm.bound_whole):5.1f})"
            if arm.bound
            else ""
        )
        + f"  idle cliques {statistics.fmean(arm.whole):4.2f}"
        f"  GPUs busy {statistics.fmean(arm.busy):4.0%}"
        + (
            f"  gangs split over cliques {len(arm.split)} (mean {statistics.fmean(arm.split):.1f})"
            if arm.split
            else ""
        )
        + (
            f"  moved {arm.moved} pods ({arm.compacted} by compaction),"
            f" {arm.lost:.2%} of GPU-seconds lost"
            if arm.moved
            else ""
        )
        + f"  left waiting {arm.left:3d}  ({arm.seconds:.0f} s)"
    )


def one_seed(seed: int, ticks: int, gang_rate: float) -> tuple[float, float, None]:
    """Run every arm on one seeded stream; (topos's share in one NVLink domain, its stranded
    clique GPUs as a multiple of clique-blind's)."""
    jobs = stream(seed, ticks, gang_rate)
    gangs = sum(1 for j in jobs if j.trays)
    print(
        f"{RACKS} NVL72 racks ({RACKS * TRAYS} trays, {RACKS * TRAYS * 4} GPUs) + {HGX} HGX nodes;"
        f" {len(jobs)} jobs over {ticks} ticks ({gangs} gangs of 2-32 trays), seed {seed}"
    )
    arms = [
        Arm("topos", topos(DomainKeys(), keep=True)),
        Arm("topos-nokeep", topos(DomainKeys(), keep=False)),
        Arm("clique-blind", topos(DomainKeys(clique=""), keep=False)),
        Arm("first-fit", first_fit()),
    ]
    shares: dict[str, float] = {}
    stranded: dict[str, float] = {}
    for arm in arms:
        run(arm, jobs, ticks)
        shares[arm.name] = arm.inside / arm.could if arm.could else 1.0
        stranded[arm.name] = statistics.fmean(arm.stranded)
        report(arm)
    ratio = stranded["topos"] / stranded["clique-blind"] if stranded["clique-blind"] else 0.0
    return shares["topos"], ratio, None


# --- the same streams replayed through the production engine (coordinator/sim) ----------------

TICK_S = 60.0


def engine_nodes() -> list[NodeInfo]:
    """The same fleet as a ``coordinator/sim`` cluster description (each node its own devices,
    the agent's labels; the trays' clique per rack)."""
    racks = [
        NodeGroup(
            profile="gb200-nvl72",
            count=TRAYS,
            name_prefix=f"r{r + 1}",
            leaf=f"leaf-r{r // 4 + 1}",
            spine="spine-1",
            labels={CLIQUE: f"{UUID}.{r + 1}"},
        )
        for r in range(RACKS)
    ]
    hgx = [
        NodeGroup(
            profile="dgx-h100",
            count=HGX_LEAF,
            name_prefix=f"hgx{i + 1}",
            leaf=f"leaf-h{i + 1}",
            spine="spine-1",
        )
        for i in range(HGX // HGX_LEAF)
    ]
    spec = ClusterSpec(name="nvl72", groups=(*racks, *hgx))
    return build_nodes(spec, lambda profile: discover_profile(profile, hostname=profile))


def trace(jobs: list[Job], jitter: int = 0) -> list[TraceJob]:
    """The stream as a ``coordinator/sim`` trace: a tick is a minute. ``jitter`` > 0: each job
    arrives up to a second late (a seeded offset per job, to the millisecond; the same for
    every arm), so that only the order of events inside a simulated second changes."""
    late = random.Random(jitter)
    out = []
    for j in jobs:
        offset = round(late.random(), 3) if jitter else 0.0
        gpus = j.pods[0].gpus
        cpu = 8.0 if j.trays else (4.0 if gpus else 2.0)
        out.append(
            TraceJob(
                job_id=j.name,
                arrival_s=j.arrive * TICK_S + offset,
                duration_s=j.duration * TICK_S,
                gpus=gpus,
                gang_size=max(1, j.trays),
                cpu=cpu,
                memory_gib=8.0,
            )
        )
    return out


def clique_blind(
    pods: Sequence[PodRequest], snapshot: Snapshot, framework: Framework, **kw: Any
) -> GangDecision | Status:
    """The gang planner with the clique tier off (Topos before cliques)."""
    keys = kw.pop("keys", None) or DomainKeys()
    return schedule_gang(pods, snapshot, framework, keys=replace(keys, clique=""), **kw)


def engine_arms() -> list[Policy]:
    blind = build_framework(plugins=tuple(p for p in PLUGINS if p.name != "CliqueKeep"))
    return [
        make_policy("topos"),
        Policy("clique-blind", blind, clique_blind),
        make_policy("firstfit"),
    ]


def replay_metrics(
    arm: Arm,
    result: RunResult,
    jobs: list[Job],
    nodes: Sequence[NodeInfo],
    ticks: int,
    *,
    causes: bool = False,
) -> None:
    """The benchmark's measures from the replay's outcomes: where and when each job ran
    (``causes``: also :func:`stranded_causes` each tick)."""
    clique_of = {n.name: n.labels.get(CLIQUE) for n in nodes}
    gpus_of = {n.name: n.allocatable.get(GPU, 0) for n in nodes}
    by_id = {j.name: j for j in jobs}
    spans = []  # (start, end, {node: gpus}, outcome): every run, those moved (cut short) too
    first: dict[str, float] = {}  # job → when it first started
    for o in (*result.interrupted, *result.outcomes.values()):
        use: dict[str, int] = {}
        for node, placement in o.placements:
            use[node] = use.get(node, 0) + len(placement.gpus)
        spans.append((o.start_s, o.end_s, use, o))
        first[o.job.job_id] = min(o.start_s, first.get(o.job.job_id, o.start_s))

    def used_at(t: float, skip: object = None) -> dict[str, int]:
        used: dict[str, int] = {}
        for start, end, use, o in spans:
            if start <= t < end and o is not skip:
                for node, g in use.items():
                    used[node] = used.get(node, 0) + g
        return used

    for start, _, use, o in spans:
        job = by_id[o.job.job_id]
        if job.trays >= LARGE and start == first[job.name]:
            arm.waits.append(round((start - o.job.arrival_s) / TICK_S))
        if 2 <= job.trays <= TRAYS:
            used = used_at(start, skip=o)
            room: dict[str, int] = {}
            for node, c in clique_of.items():
                if c and not used.get(node):
                    room[c] = room.get(c, 0) + 1
            cliques = {clique_of[n] for n in use}
            if len(cliques - {None}) > 1:
                arm.split.append(len(cliques - {None}))
            if max(room.values(), default=0) >= job.trays:
                arm.could += 1
                arm.inside += len(use) == 1 or (len(cliques) == 1 and None not in cliques)

    def rack_work_at(t: float) -> RackWork:
        gangs: list[int] = []
        lone: list[int] = []
        large = 0
        for start, end, use, o in spans:
            if not start <= t < end:
                continue
            if o.job.gang_size > 1:
                trays = sum(1 for node in use if clique_of[node])
                if o.job.gang_size > TRAYS:
                    large += trays
                elif trays:
                    gangs.append(trays)
            else:
                lone.extend(g for node, g in use.items() if clique_of[node] and g)
        return RackWork(tuple(sorted(gangs)), large, tuple(lone))

    total = sum(gpus_of.values())
    for t in range(ticks):
        used = used_at(t * TICK_S)
        work = rack_work_at(t * TICK_S)
        if causes:
            for cause, gpus in stranded_causes(t * TICK_S, spans, clique_of, work).items():
                arm.causes.setdefault(cause, []).append(gpus)
        arm.bound.append(stranded_bound(work, TRAYS, whole=False))
        arm.bound_whole.append(stranded_bound(work, TRAYS, whole=True))
        arm.busy.append(sum(used.values()) / total)
        per: dict[str, tuple[int, int]] = {}
        for node, c in clique_of.items():
            if c:
                u, f = per.get(c, (0, 0))
                per[c] = (u + used.get(node, 0), f + gpus_of[node] - used.get(node, 0))
        arm.stranded.append(sum(f for u, f in per.values() if u))
        arm.whole.append(len([u for u, _ in per.values() if not u]))
    arm.left = len(jobs) - len(result.outcomes)
    arm.seconds = result.wall_s
    arm.moved = result.lost_pods
    arm.compacted = result.compacted_pods
    run_gpu_s = sum(o.job.gpus * o.job.gang_size * (o.end_s - o.start_s) for *_, o in spans)
    arm.lost = result.lost_gpu_s / run_gpu_s if run_gpu_s else 0.0


#: what the stranded GPUs of a rack in use are put down to (``--causes``), by what the rack holds,
#: the first that applies: a piece of a gang of ≤ 18 trays that runs outside the rack too (no rack
#: had room for it whole), a piece of a larger gang, lone GPU pods only, gangs wholly inside it
#: only (the holes gangs smaller than the rack leave), whole gangs and lone pods
RACK_CAUSES = ("split ≤18", "split >18", "small only", "gangs only", "gangs+small")
#: besides: the free GPUs inside trays lone pods use (of every cause); the gap to the bound
#: (72 × the racks in use beyond the fewest that hold the work) put down to the causes of the
#: emptiest racks in use, one rack each (``extra <cause>``); the bound's own stranded GPUs: the
#: last rack's free trays and the free GPUs inside the lone pods' trays. The fleet has no
#: cordoned or degraded trays, so none are stranded that way.
CAUSES = (
    *RACK_CAUSES,
    "tray fragments",
    *(f"extra {c}" for c in RACK_CAUSES),
    "bound rounding",
    "bound fragments",
)


def stranded_causes(
    t: float,
    spans: Sequence[tuple[float, float, dict[str, int], Any]],
    clique_of: dict[str, str | None],
    work: RackWork,
) -> dict[str, int]:
    """The stranded GPUs at ``t`` put down to :data:`CAUSES` (each rack in use its class)."""
    gpus = 4  # a tray's
    racks: dict[str, dict[str, int]] = {}  # clique → node → GPUs used
    kinds: dict[str, set[str]] = {}  # clique → what it holds
    for start, end, use, o in spans:
        if not start <= t < end:
            continue
        cliques = {clique_of[n] for n in use}
        for node, g in use.items():
            c = clique_of[node]
            if c is None or not g:
                continue
            racks.setdefault(c, {})[node] = racks.get(c, {}).get(node, 0) + g
            if o.job.gang_size <= 1:
                kind = "small"
            elif len(cliques) > 1:
                kind = "split ≤18" if o.job.gang_size <= TRAYS else "split >18"
            else:
                kind = "gang"
            kinds.setdefault(c, set()).add(kind)
    out = dict.fromkeys(CAUSES, 0)
    by_rack: list[tuple[int, str]] = []
    for c, nodes in racks.items():
        held = kinds[c]
        cause = next((k for k in RACK_CAUSES[:2] if k in held), None) or (
            "small only"
            if held == {"small"}
            else "gangs only"
            if held == {"gang"}
            else "gangs+small"
        )
        used = sum(nodes.values())
        out[cause] += TRAYS * gpus - used
        out["tray fragments"] += sum(gpus - g for g in nodes.values() if g < gpus)
        by_rack.append((used, cause))
    fewest = fewest_racks(work, TRAYS, whole=False)
    for _, cause in sorted(by_rack)[: max(0, len(by_rack) - fewest)]:
        out[f"extra {cause}"] += TRAYS * gpus
    trays = sum(work.gangs) + work.large + lone_trays(work.lone)
    out["bound rounding"] = (fewest * TRAYS - trays) * gpus
    out["bound fragments"] = lone_trays(work.lone) * gpus - sum(work.lone)
    return out


#: ``--defrag`` arms: Topos with the stream's pods movable and defragmentation in this mode
#: (``background+racks``: ``background`` with ``compactRacks``: racks emptied by moving gangs)
DEFRAG_MODES = ("onDemand", "background", "background+racks")


def defrag_settings(mode: str, **tune: Any) -> DefragSettings:
    """The settings of a ``--defrag`` mode; ``tune``: fields of :class:`DefragSettings` set
    otherwise (``--max-loss-ratio``, ``--evictions-per-hour``), the same in every arm."""
    base, _, racks = mode.partition("+")
    return DefragSettings(mode=base, compact_racks=racks == "racks", **tune)


def movable(sim: Simulator) -> None:
    """The stream's pods as movable workloads (``--defrag`` arms): every lone pod (GPU or
    CPU-only) a ReplicaSet's (a Deployment replica: movable), every gang a ``batch/v1`` Job of
    its members whose ``podFailurePolicy`` ignores ``DisruptionTarget`` (a training job that
    checkpoints: an evicted member is recreated without failing the Job, so the gang may move
    whole — :mod:`coordinator.core.preemption.jobretries`)."""
    out, jobs = [], []
    for job, manifests in zip(sim.jobs, sim.manifests, strict=True):
        gang = job.gang_size > 1
        kind, api = ("Job", "batch/v1") if gang else ("ReplicaSet", "apps/v1")
        ref = {
            "apiVersion": api,
            "kind": kind,
            "name": job.job_id,
            "uid": f"{kind.lower()}-{job.job_id}",
            "controller": True,
        }
        out.append(
            [{**m, "metadata": {**m["metadata"], "ownerReferences": [ref]}} for m in manifests]
        )
        if gang:
            jobs.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": job.job_id, "namespace": NAMESPACE, "uid": ref["uid"]},
                    "spec": {
                        "parallelism": job.gang_size,
                        "completions": job.gang_size,
                        "podFailurePolicy": {
                            "rules": [
                                {
                                    "action": "Ignore",
                                    "onPodConditions": [{"type": "DisruptionTarget"}],
                                }
                            ]
                        },
                    },
                }
            )
    sim.manifests = tuple(out)
    sim.job_objects = tuple(jobs)


def engine_run(
    seed: int,
    ticks: int,
    gang_rate: float,
    defrag: Sequence[str] = (),
    arms: Sequence[str] = (),
    *,
    causes: bool = False,
    jitter: int = 0,
    tune: Mapping[str, Any] | None = None,
) -> list[Arm]:
    """Every arm on one stream, replayed as a ``coordinator/sim`` trace by
    :class:`~coordinator.sim.replay.Simulator`: the scheduler and the gang runtime, their queues
    and timers on a simulated clock, as ``topos coordinator --in-memory`` runs them. ``defrag``:
    also Topos with the pods movable (:func:`movable`) and defragmentation in each of these
    modes (arm ``topos+<mode>``); ``arms``: only these (default: all); ``causes``: each arm's
    stranded GPUs put down to :data:`CAUSES` too; ``jitter``: the arrivals up to a second late
    (:func:`trace`); ``tune``: :func:`defrag_settings`' fields set otherwise."""
    jobs = stream(seed, ticks, gang_rate)
    nodes = engine_nodes()
    streamed = trace(jobs, jitter)
    sim = Simulator(nodes, streamed)
    runs: list[tuple[Policy, Simulator]] = [(policy, sim) for policy in engine_arms()]
    for mode in defrag:
        # A framework keeps its rotating start for the nodes it samples from one replay to the
        # next: each arm gets its own, or an arm run after another starts where it stopped.
        for policy, keys in (
            (make_policy("topos"), DomainKeys()),
            (engine_arms()[1], DomainKeys(clique="")),
        ):
            gangs = GangSettings(defrag=defrag_settings(mode, **(tune or {})), keys=keys)
            moving = Simulator(
                nodes, streamed, settings=ReplaySettings(engine=EngineSettings(gangs=gangs))
            )
            movable(moving)
            runs.append((replace(policy, name=f"{policy.name}+{mode}"), moving))
    out = []
    for policy, replay in runs:
        if arms and policy.name not in arms:
            continue
        arm = Arm(policy.name, lambda job, snap: None)
        replay_metrics(arm, replay.run(policy), jobs, nodes, ticks, causes=causes)
        out.append(arm)
    return out


def blind_base(name: str, ran: Collection[str]) -> str | None:
    """The clique-blind arm Topos arm ``name`` is read against, of those that ``ran``: the one
    with the same pods and the same defragmentation (``clique-blind+<mode>``), else
    ``clique-blind``; ``None`` when none of them ran."""
    mode = name.partition("+")[2]
    tried = (f"clique-blind+{mode}", f"clique-blind+{mode.partition('+')[0]}") if mode else ()
    return next((b for b in (*tried, "clique-blind") if b in ran), None)


#: per Topos arm, per replay of a seed: (stranded ÷ its clique-blind base, share inside one clique,
#: stranded GPUs, share of GPU-seconds lost, pods moved, the seed)
Tally = dict[str, list[tuple[float, float, float, float, int, int]]]


def one_seed_engine(
    seed: int,
    ticks: int,
    gang_rate: float,
    defrag: Sequence[str] = (),
    only: Sequence[str] = (),
    tally: Tally | None = None,
    causes: dict[str, list[dict[str, float]]] | None = None,
    jitter: int = 0,
    tune: Mapping[str, Any] | None = None,
) -> tuple[float, float, float]:
    """:func:`one_seed` through the production engine (:func:`engine_run`); with ``defrag``,
    the goals read on the last ``topos+<mode>`` arm, each arm's ratio printed (and added to
    ``tally``); also the bound (:mod:`benchmarks.clique_bound`: that arm's rack work re-packed
    perfectly each tick) as a multiple of the same clique-blind arm's stranded GPUs; with
    ``causes``, each arm's :data:`CAUSES` (mean GPUs) printed and added to it; ``jitter``: the
    arrivals up to a second late (:func:`trace`)."""
    late = f", arrivals up to 1 s late (jitter {jitter})" if jitter else ""
    print(
        f"{RACKS} NVL72 racks + {HGX} HGX nodes; {ticks} ticks (1 tick = 1 simulated minute), "
        f"seed {seed}{late}, on the production engine"
    )
    ran = engine_run(
        seed, ticks, gang_rate, defrag, only, causes=causes is not None, jitter=jitter, tune=tune
    )
    arms = {arm.name: arm for arm in ran}
    for arm in arms.values():
        report(arm)
        if causes is not None:
            means = {c: statistics.fmean(v) for c, v in arm.causes.items()}
            causes.setdefault(arm.name, []).append(means)
            print(f"    {arm.name} stranded by cause: " + causes_line(means))

    def base_of(name: str) -> tuple[str, float]:
        blind = blind_base(name, arms) or "clique-blind"
        return blind, statistics.fmean(arms[blind].stranded) if blind in arms else 0.0

    for arm in arms.values():
        blind, base = base_of(arm.name)
        if arm.name.startswith("topos") and base:
            if tally is not None:
                share = arm.inside / arm.could if arm.could else 1.0
                own = statistics.fmean(arm.stranded)
                row = (own / base, share, own, arm.lost, arm.moved, seed)
                tally.setdefault(arm.name, []).append(row)
            print(
                f"  {arm.name}: stranded {statistics.fmean(arm.stranded) / base:.2f}× {blind}'s;"
                f" its rack work re-packed perfectly {statistics.fmean(arm.bound) / base:.2f}×"
                f" (gangs whole {statistics.fmean(arm.bound_whole) / base:.2f}×)"
            )
    topos = arms[f"topos+{defrag[-1]}" if defrag else "topos"]
    share = topos.inside / topos.could if topos.could else 1.0
    base = base_of(topos.name)[1]
    if not base:
        return share, 0.0, 0.0
    return share, statistics.fmean(topos.stranded) / base, statistics.fmean(topos.bound) / base


def mean_of(replays: Sequence[tuple[float, float, float]]) -> tuple[float, float, float]:
    """One seed's goals over its replays: the lowest one-clique share, the mean ratios."""
    return (
        min(r[0] for r in replays),
        statistics.fmean(r[1] for r in replays),
        statistics.fmean(r[2] for r in replays),
    )


def by_seed(ratios: Sequence[tuple[int, float]]) -> list[str]:
    """Each seed's ratio, in order: with several replays of a seed, their mean and range."""
    seeds: dict[int, list[float]] = {}
    for seed, ratio in ratios:
        seeds.setdefault(seed, []).append(ratio)
    return [
        f"{statistics.fmean(r):.2f}" + (f" ({min(r):.2f}–{max(r):.2f})" if len(r) > 1 else "")
        for r in seeds.values()
    ]


def causes_line(means: dict[str, float]) -> str:
    return ", ".join(f"{c} {means.get(c, 0.0):.1f}" for c in CAUSES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--seeds", type=int, default=1, help="streams to run: --seed, --seed + 1, …"
    )
    parser.add_argument("--gang-rate", type=float, default=0.45, help="gangs arriving per tick")
    parser.add_argument(
        "--engine",
        action="store_true",
        help="replay through the production engine (coordinator/sim) instead of the planner",
    )
    parser.add_argument(
        "--defrag",
        default="",
        help="with --engine: comma-separated defragmentation modes (onDemand, background), each "
        "an arm topos+<mode> with the pods movable; the goals are read on the last",
    )
    parser.add_argument(
        "--arms", default="", help="with --engine: comma-separated arms to run (default: all)"
    )
    parser.add_argument(
        "--replays",
        type=int,
        default=1,
        help="with --engine: each seed's stream replayed this many times, the k-th (k ≥ 1) with "
        "every arrival up to a second late (seeded): only the order of events inside a simulated "
        "second changes; each seed's figures are the mean of its replays",
    )
    parser.add_argument(
        "--causes",
        action="store_true",
        help="with --engine: each arm's stranded GPUs put down to causes (what the racks hold)",
    )
    parser.add_argument(
        "--max-loss-ratio",
        type=float,
        default=None,
        help="with --defrag: defragmentation's maxLossRatio in every defrag arm (default 0.05: "
        "the GPU-seconds a move may lose, as a share of what it frees × horizonSeconds)",
    )
    parser.add_argument(
        "--evictions-per-hour",
        type=int,
        default=None,
        help="with --defrag: compaction's evictionsPerHour in every defrag arm (default 20)",
    )
    args = parser.parse_args()
    tune: dict[str, Any] = {}
    if args.max_loss_ratio is not None:
        tune["max_loss_ratio"] = args.max_loss_ratio
    if args.evictions_per_hour is not None:
        tune["evictions_per_hour"] = args.evictions_per_hour
    if tune and not args.defrag:
        parser.error("--max-loss-ratio, --evictions-per-hour: they set --defrag arms; add one")
    try:
        defrag_settings("background", **tune)
    except ValueError as e:
        parser.error(str(e))
    defrag = [m for m in args.defrag.split(",") if m]
    if bad := [m for m in defrag if m not in DEFRAG_MODES]:
        parser.error(f"--defrag: {bad[0]!r} is none of {', '.join(DEFRAG_MODES)}")
    only = [a for a in args.arms.split(",") if a]
    if args.replays < 1 or (args.replays > 1 and not args.engine):
        parser.error("--replays: 1 or more, and more than 1 only with --engine")
    if args.causes and not args.engine:
        parser.error("--causes: the causes are read on the engine's replay; add --engine")
    goal = f"topos+{defrag[-1]}" if defrag else "topos"
    if only and goal not in only:
        parser.error(f"--arms: the goals are read on {goal}; include it")
    ran = {"clique-blind", *(f"clique-blind+{m}" for m in defrag)}.intersection(only)
    if only and blind_base(goal, ran) is None:
        parser.error(f"--arms: {goal} is read against a clique-blind arm; include one")
    seeds = range(args.seed, args.seed + args.seeds)
    results: list[tuple[float, float, float | None]]
    tally: Tally = {}
    causes: dict[str, list[dict[str, float]]] | None = {} if args.causes else None
    if args.engine:
        results = [
            mean_of(
                [
                    one_seed_engine(
                        s, args.ticks, args.gang_rate, defrag, only, tally, causes, k, tune
                    )
                    for k in range(args.replays)
                ]
            )
            for s in seeds
        ]
        for name, per_seed in (causes or {}).items():
            means = {c: statistics.fmean(r[c] for r in per_seed) for c in CAUSES}
            print(f"{name} stranded by cause, mean of the seeds: {causes_line(means)}")
        for name, rows in tally.items():
            each = " / ".join(by_seed([(r[5], r[0]) for r in rows]))
            print(
                f"{name}: stranded {statistics.fmean(r[0] for r in rows):.2f}× its clique-blind"
                f" base (by seed {each}), {statistics.fmean(r[2] for r in rows):.1f} GPUs;"
                f" inside one clique ≥ {min(r[1] for r in rows):.1%};"
                f" GPU-seconds lost {min(r[3] for r in rows):.2%}–{max(r[3] for r in rows):.2%}"
                f" (mean {statistics.fmean(r[3] for r in rows):.2%});"
                f" pods moved {min(r[4] for r in rows)}–{max(r[4] for r in rows)}"
            )
    else:
        results = [one_seed(s, args.ticks, args.gang_rate) for s in seeds]
    share = min(r[0] for r in results)
    met = "met" if share >= 0.95 else "missed"
    print(f"goal ≥ 95 % of the gangs that could fit one clique inside one: {share:.1%} ({met})")
    ratios = [r[1] for r in results]
    mean = statistics.fmean(ratios)
    met = "met" if mean <= 0.5 else "missed"
    each = " / ".join(f"{r:.2f}" for r in ratios)
    print(f"goal stranded clique GPUs ≤ 0.5× clique-blind's: {mean:.2f}× ({met}; by seed {each})")
    if bounds := [r[2] for r in results if r[2] is not None]:
        each = " / ".join(f"{b:.2f}" for b in bounds)
        print(
            f"no placement of {goal}'s rack work beats {statistics.fmean(bounds):.2f}×"
            f" clique-blind's (re-packed perfectly each tick; by seed {each})"
        )


if __name__ == "__main__":
    main()
