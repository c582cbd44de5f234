"""End-to-end binding throughput on the real control plane with KWOK nodes (1,000 by default;
5,000 is Kubernetes' supported cluster size): Topos vs the real kube-scheduler of the same
Kubernetes version, same pods, same API server, one run.

One etcd + kube-apiserver (``devcluster``), KWOK managing ``--nodes`` fake DGX H100 Nodes (8
``nvidia.com/gpu`` each, Topos labels and topology annotation; ``benchmarks/kwok_cluster.py``).
For each workload (``--workload``: single-GPU pods; ``mixed``, half with required pod
anti-affinity per node and half spread over the leaves, as kube's scheduler_perf
``SchedulingPodAntiAffinity`` / ``TopologySpreading``; ``gang``, ``--gang-size`` 8-GPU pods in
one Topos gang) and client limit (``--limits``, default kube-scheduler's QPS 50 / burst 100,
then "unlimited") each scheduler in turn — kube-scheduler for ``schedulerName:
default-scheduler``, ``topos coordinator`` for ``schedulerName: topos`` — is started as its own
process with that QPS/burst in its config file, warmed up with one pod, then the pods are
created in a fresh namespace (32 creates in flight, no client-side limit on the creator) while a
watch records when each pod is seen bound and Running. A backlog run (single-GPU pods, limits in
``--backlog``) creates the pods first and starts the scheduler after. Only one scheduler runs at
a time; after its run it is stopped and its pods deleted (``deletecollection``, grace 0) so the
next run starts on the same empty nodes. Before the first run the cluster is brought to rest
(``benchmarks/kwok_settle.py``): the API server quiet after the Nodes turn Ready, then a warm-up
(``--no-warm-up`` skips it) of as many pods as a run, created, bound and given an Event by the
benchmark (a scheduler's requests, no scheduler) until Running and deleted, so that what a
fresh cluster does once (KWOK taking up each Node's pods, the pods' watch cache growing from
its smallest size) falls on no scheduler's run. ``--audit`` prints,
after each run, who listed and watched pods (``benchmarks/kwok_audit.py``).

Figures per run: pods bound per second from the first create sent (backlog: the first bind) to
the last bind seen on the watch; create→bound latency p50/p99 (client-side clock: the moment the
create request was sent → the watch event showing ``spec.nodeName``); the creation rate (the
ceiling for both); CPU seconds the scheduler process used, per bound pod; its resident memory at
the end; and the API requests it made per bound pod, from the API server's own
``apiserver_request_total`` read before and after the run (``benchmarks/apiserver_metrics.py``:
the counter names no client, so the rows only the benchmark and KWOK make are left out). The
Topos/kube-scheduler ratios are the goals (≥ 1.0× pods/s; CPU and requests per pod ≤ 1.0×).

    .venv/bin/python -m benchmarks.kwok_throughput [--nodes 1000] [--pods 2000]
        [--limits 50/100,unlimited] [--backlog unlimited] [--workload gpu,mixed,gang]
        [--rate PODS_PER_S] [--profile DIR] [--no-warm-up] [--audit] [--keep] [--series DIR]
        [--json]

``--profile DIR`` records the coordinator with ``py-spy`` during Topos runs (raw collapsed stacks,
one file per run). Needs ``python -m devcluster.binaries ensure --all`` (kube-scheduler, kwok,
stages).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from benchmarks.apiserver_metrics import (
    cpu_profile,
    requests_total,
    scheduler_share,
)
from benchmarks.kwok_audit import PodListers, audit_args
from benchmarks.kwok_cluster import (
    Limit,
    Process,
    kwok_cluster,
    parse_limits,
    start_kube_scheduler,
    start_profiler,
    start_topos,
)
from benchmarks.kwok_pods import pod_body
from benchmarks.kwok_run import Run, cpu_seconds
from benchmarks.kwok_settle import clear, settle, warm_up
from benchmarks.run_all import machine
from common.kube import NAMESPACES, PODS, KubeClient, KubeError
from devcluster.binaries import KUBERNETES_VERSION
from devcluster.controlplane import ControlPlane

SCHEDULERS = {"kube-scheduler": "default-scheduler", "topos": "topos"}
CREATORS = 32


#: Seconds of the API server's CPU profile taken at the start of each run (``--profile``).
APISERVER_PROFILE_S = 8


async def wait_bound(
    kube: KubeClient, namespace: str, name: str, timeout_s: float, gets: list[int]
) -> None:
    """Poll until bound; ``gets[0]`` counts the requests (not the scheduler's)."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        gets[0] += 1
        pod = await kube.get(PODS, name, namespace=namespace)
        if pod["spec"].get("nodeName"):
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{namespace}/{name} not bound after {timeout_s:.0f}s")


async def watch(kube: KubeClient, namespace: str, rv: str, run: Run, done: asyncio.Event) -> None:
    """Record when each pod is first seen bound and Running; resumes a broken watch."""
    while True:
        try:
            async for kind, obj in kube.watch(
                PODS, namespace=namespace, resource_version=rv, timeout_seconds=900
            ):
                now = time.perf_counter()
                meta = obj["metadata"]
                rv = meta.get("resourceVersion") or rv
                if kind not in ("ADDED", "MODIFIED"):
                    continue
                name = meta["name"]
                if name not in run.bound and obj["spec"].get("nodeName"):
                    run.bound[name] = now
                if name not in run.running and (obj.get("status") or {}).get("phase") == "Running":
                    run.running[name] = now
                if len(run.running) >= run.pods:
                    done.set()
        except KubeError as exc:
            print(f"watch of {namespace} broke ({exc}); resuming", file=sys.stderr)


async def one_run(
    plane: ControlPlane,
    kube: KubeClient,
    launch: Callable[[], Process],
    run: Run,
    namespace: str,
    *,
    timeout_s: float,
    running_grace_s: float,
    apiserver_profile: Path | None = None,
    rate: float = 0.0,
) -> Process:
    """One measured run; returns the scheduler process (still running) for the caller to stop.

    Streaming: start the scheduler, warm it up with one pod, then create the batch while it
    schedules. Backlog: create the batch first, then start the scheduler."""
    scheduler_name = SCHEDULERS[run.scheduler]
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    scheduler: Process | None = None
    requests0 = await asyncio.to_thread(requests_total, plane)
    gets = [0]
    if not run.backlog:
        scheduler = launch()
        # warm-up: the scheduler has synced and binds (its start-up is not what we measure)
        await kube.create(PODS, pod_body("warmup", scheduler_name), namespace=namespace)
        deadline = time.perf_counter() + 120
        while True:
            scheduler.check()
            with contextlib.suppress(RuntimeError):
                await wait_bound(kube, namespace, "warmup", 2, gets)
                break
            if time.perf_counter() > deadline:
                scheduler.stop()
                raise RuntimeError(f"{run.scheduler} did not bind the warm-up pod in 120 s")
    listed = await kube.list(PODS, namespace=namespace, limit=1)
    done = asyncio.Event()
    watcher = asyncio.create_task(watch(kube, namespace, listed["resourceVersion"], run, done))
    api0 = cpu_seconds(plane.state.apiserver_pid)
    cpu0 = 0.0 if scheduler is None else cpu_seconds(scheduler.pid)
    sem = asyncio.Semaphore(CREATORS)

    paced = rate > 0 and not run.backlog

    async def create(i: int) -> None:
        name = f"p-{i:05d}"
        body = pod_body(name, scheduler_name, workload=run.workload, index=i, size=run.pods)
        if paced:  # the i-th create is due i / rate seconds after the first
            await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
        async with sem:
            run.sent[name] = time.perf_counter()
            await kube.create(PODS, body, namespace=namespace)

    t0 = time.perf_counter()
    await asyncio.gather(*(create(i) for i in range(run.pods)))
    run.created_s = time.perf_counter() - t0
    if scheduler is None:
        api0 = cpu_seconds(plane.state.apiserver_pid)
        requests0 = await asyncio.to_thread(requests_total, plane)
        run.launched = time.perf_counter()
        scheduler = launch()
    profiler = None
    if apiserver_profile is not None:
        # From here on (streamed: the creates are under way; backlog: the scheduler starts).
        profiler = asyncio.create_task(
            asyncio.to_thread(cpu_profile, plane, APISERVER_PROFILE_S, apiserver_profile)
        )
    try:
        async with asyncio.timeout(timeout_s):
            while len(run.bound) < run.pods:
                scheduler.check()
                await asyncio.sleep(0.05)
    except TimeoutError:
        run.timed_out = True
    run.load = os.getloadavg()[0]
    run.cpu_s = cpu_seconds(scheduler.pid) - cpu0
    with contextlib.suppress(psutil.Error):
        run.rss_mib = psutil.Process(scheduler.pid).memory_info().rss / 2**20
    run.apiserver_cpu_s = cpu_seconds(plane.state.apiserver_pid) - api0
    run.requests = scheduler_share(requests0, await asyncio.to_thread(requests_total, plane))
    run.requests["GET", "pods", ""] -= gets[0]  # the warm-up's polling
    run.requests["LIST", "pods", ""] -= 1  # the benchmark's own list and watch
    run.requests["WATCH", "pods", ""] -= 1
    run.requests = +run.requests  # what is left above zero
    if profiler is not None:
        await profiler
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(running_grace_s):
            await done.wait()
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    return scheduler


async def bench(args: argparse.Namespace) -> list[Run]:
    runs: list[Run] = []

    def apiserver_args(work: Path) -> tuple[str, ...]:
        return (
            *(["--profiling=true"] if args.profile else []),
            *(audit_args(work) if args.audit else ()),
        )

    async with kwok_cluster(
        "topos-kwok-", args.nodes, apiserver_args=apiserver_args, keep=args.keep
    ) as cluster:
        binaries, work, plane, kube = cluster.binaries, cluster.work, cluster.plane, cluster.kube
        listers = PodListers(work / "audit.log", plane) if args.audit else None
        created, ready = cluster.created_s, cluster.ready_s
        quiet = await settle(plane)
        say(
            args,
            f"{args.nodes} Nodes created in {created:.1f}s, all Ready (KWOK) {ready:.1f}s later, "
            f"API server quiet {quiet:.1f}s after that",
        )
        if listers is not None:
            say(args, f"{'':14s} {listers.summary()}")
        if args.warm_up:
            say(args, (await warm_up(plane, kube, args.nodes, args.pods)).summary())
            if listers is not None:
                say(args, f"{'':14s} {listers.summary()}")
        backlog_for = {x.strip() for x in args.backlog.split(",") if x.strip()}
        plan = [
            (workload, limit, backlog)
            for workload in args.workload.split(",")
            for limit in parse_limits(args.limits)
            for backlog in (False, True)
            if not backlog or (limit.token in backlog_for and workload == "gpu")
        ]
        for i, (workload, limit, backlog) in enumerate(plan):
            pods = args.gang_size if workload == "gang" else args.pods
            for name in args.order.split(","):
                tag = f"{name}-{i}"
                run = Run(name, limit, pods, backlog=backlog, workload=workload)
                spy: list[subprocess.Popen[bytes]] = []

                def launch(
                    name: str = name,
                    tag: str = tag,
                    limit: Limit = limit,
                    spy: list[subprocess.Popen[bytes]] = spy,
                ) -> Process:
                    if name == "kube-scheduler":
                        proc = start_kube_scheduler(binaries, plane, work, limit, tag)
                    else:
                        proc = start_topos(plane, work, limit, tag, binds=args.binds)
                        if args.profile:
                            path = Path(args.profile) / f"topos-{tag}.txt"
                            spy.extend(p for p in [start_profiler(proc.pid, path)] if p)
                    return proc

                proc = await one_run(
                    plane,
                    kube,
                    launch,
                    run,
                    f"kwok-{tag}",
                    timeout_s=args.timeout,
                    rate=args.rate,
                    running_grace_s=10,
                    apiserver_profile=(
                        Path(args.profile) / f"apiserver-{tag}.pprof" if args.profile else None
                    ),
                )
                for p in spy:
                    p.send_signal(2)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        p.wait(20)
                proc.stop()
                runs.append(run)
                say(args, run.summary())
                if args.series:
                    run.write_series(Path(args.series) / f"{tag}-{run.mode}.csv")
                if listers is not None:
                    say(args, f"{'':14s} {listers.summary()}")
                await clear(kube, f"kwok-{tag}")
                if listers is not None:
                    listers.read()  # the clean-up's, not the next run's
    return runs


def say(args: argparse.Namespace, line: str) -> None:
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)


def rows(runs: Sequence[Run], nodes: int) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    pairs: dict[tuple[str, str, str], dict[str, Run]] = {}
    for r in runs:
        pairs.setdefault((r.workload, r.limit.label, r.mode), {})[r.scheduler] = r
    for (_, label, mode), pair in pairs.items():
        topos, kube = pair.get("topos"), pair.get("kube-scheduler")
        if topos is None or kube is None:
            continue
        ratio = topos.rate / kube.rate if kube.rate else float("nan")
        what = {
            "gpu": "1-GPU pods",
            "mixed": "anti-affinity/spread 1-GPU pods",
            "gang": "8-GPU pods in one gang",
        }[topos.workload]
        case = f"{nodes:,} KWOK nodes, {topos.pods:,} {what}, {label}"
        if mode == "backlog":
            figure = "pods bound/s, backlog (first → last bind)"
            case += ", created before the scheduler starts"
        else:
            figure = "pods bound/s (first create → last bound)"
        out.append(
            {
                "case": case,
                "figure": figure,
                "topos": f"{topos.rate:,.1f} ({ratio:.2f}×)",
                "baseline": f"{kube.rate:,.1f} (kube-scheduler v{KUBERNETES_VERSION})",
                "goal": "≥ 1.0× kube-scheduler" if "QPS" in label else "",
            }
        )
        if mode == "stream":
            out.append(
                {
                    "case": case,
                    "figure": "create→bound p50 / p99",
                    "topos": f"{topos.latency_ms(50):,.0f} / {topos.latency_ms(99):,.0f} ms",
                    "baseline": f"{kube.latency_ms(50):,.0f} / {kube.latency_ms(99):,.0f} ms",
                    "goal": "",
                }
            )
        out.append(
            {
                "case": case + (", backlog" if mode == "backlog" else ""),
                "figure": "scheduler CPU per bound pod; API requests per bound pod",
                "topos": f"{topos.cpu_ms_per_pod:.2f} ms; {topos.requests_per_pod:.2f}",
                "baseline": f"{kube.cpu_ms_per_pod:.2f} ms; {kube.requests_per_pod:.2f}",
                "goal": "≤ kube-scheduler",
            }
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=2000, help="single-GPU pods per run")
    ap.add_argument(
        "--limits", default="50/100,unlimited", help="client QPS/burst per pair of runs"
    )
    ap.add_argument(
        "--backlog",
        default="unlimited",
        help="limits (as in --limits) that also get a backlog run: pods created first, then "
        "the scheduler started; rate from first to last bind ('' for none)",
    )
    ap.add_argument(
        "--workload",
        default="gpu",
        help="comma-separated: gpu: single-GPU pods; mixed: half with required pod "
        "anti-affinity per node, half spread over the leaves (kube scheduler_perf's "
        "SchedulingPodAntiAffinity and TopologySpreading), each with one GPU; gang: "
        "--gang-size 8-GPU pods, one Topos gang (labels kube-scheduler ignores); only gpu "
        "gets a backlog run",
    )
    ap.add_argument("--gang-size", type=int, default=64, help="members of the gang workload")
    ap.add_argument("--order", default="kube-scheduler,topos", help="which runs first")
    ap.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="streamed runs: create the pods at this many per second (0: as fast as the API "
        "server takes them). Below what the machine sustains, both schedulers see the same "
        "arrivals and create→bound measures the scheduler, not the API server's headroom",
    )
    ap.add_argument("--binds", type=int, default=64, help="Topos scheduler.maxBindsInFlight")
    ap.add_argument("--timeout", type=float, default=120.0, help="per run, after the creates")
    ap.add_argument(
        "--profile",
        default="",
        help="py-spy the coordinator, and take the API server's CPU profile (pprof, first "
        f"{APISERVER_PROFILE_S} s of each run), into this directory",
    )
    ap.add_argument(
        "--warm-up",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="before the first run, put as many pods as a run straight onto the Nodes (one on "
        "each at least) until Running, then delete them: what a fresh cluster does once (KWOK "
        "taking up each Node's pods, the pods' watch cache growing) falls on no scheduler's run",
    )
    ap.add_argument(
        "--audit",
        action="store_true",
        help="the API server writes an audit log of pod LISTs/WATCHes; print them by client "
        "after each run",
    )
    ap.add_argument("--keep", action="store_true", help="keep the logs and configs")
    ap.add_argument(
        "--series",
        default="",
        help="write each run's pods (sent, bound, Running; seconds from the run's start) as "
        "CSV into this directory",
    )
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    args = ap.parse_args(argv)
    if args.rate < 0:
        ap.error("--rate must be 0 (as fast as possible) or a positive number of pods per second")
    info = machine()
    say(args, f"machine: {info['CPU']}, {info['cores']}, {info['memory']}, {info['Python']}")
    say(args, f"Kubernetes v{KUBERNETES_VERSION} (kube-apiserver, kube-scheduler), KWOK")
    started = time.perf_counter()
    for folder in (args.profile, args.series):
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
    runs = asyncio.run(bench(args))
    load = os.getloadavg()[0]
    table = rows(runs, args.nodes)
    notes = [
        f"machine: {info['CPU']}, {info['cores']}; load average {load:.1f} after the run",
        "one scheduler process at a time on the same API server, nodes and pod spec; "
        "latency from the client-side send of the create to the bind seen on a watch",
        *(r.summary() for r in runs),
        f"whole benchmark {time.perf_counter() - started:.0f} s",
    ]
    if args.json:
        print(json.dumps({"rows": table, "notes": notes}))
    else:
        for r in table:
            print(f"{r['case']}: {r['figure']}: Topos {r['topos']}, {r['baseline']} {r['goal']}")
        print(notes[0])
    return 0 if all(not r.timed_out for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
