"""AI workloads made by their own controllers on KWOK nodes: Topos vs the real kube-scheduler of the
same Kubernetes version, same objects, same API server, one run.

One etcd + kube-apiserver + kube-controller-manager (Jobs, StatefulSets, garbage collection), the
real workload controllers built from their Go modules (JobSet v0.10.1, LeaderWorkerSet v0.7.0,
KubeRay v1.5.0: ``devcluster.workloads``, with their CRDs and webhooks), and KWOK managing
``--nodes`` fake DGX H100 Nodes (8 ``nvidia.com/gpu`` each) in ``--leaves`` leaves (8 leaves a
spine) with NVLink domains (``nvidia.com/gpu.clique``) of 8 Nodes inside each leaf
(``benchmarks/kwok_cluster.py``). The workloads (``benchmarks/kwok_workload_objects.py``; the runs:
``benchmarks/kwok_workload_runs.py``), with Topos' slice keys on their pod templates:

- (a) a JobSet of ``--jobs`` Jobs × 8 pods × 8 GPUs (64 pods), each Job a slice inside one leaf;
- (b) a LeaderWorkerSet of ``--groups`` groups of 4 pods × 8 GPUs, each group inside one NVLink
  domain;
- (c) a RayCluster of a head and ``--workers`` 8-GPU workers, all inside one leaf.

**Alone.** Each scheduler in turn (started as its own process, client QPS/burst ``--limit``,
warmed up with one pod; the other not running) gets each workload alone on the empty cluster:
the object is created (its pod templates name the scheduler) and the benchmark's watch records
when each pod is seen bound. Figures: apply → all bound (the create of the object sent → the last
pod's bind seen), and the share of slices whose pods' nodes all lie in one leaf, and in one NVLink
domain. Between runs the object is deleted and its pods removed, so every run starts on the same
empty nodes.

**Contention.** Pods created by the benchmark (bound by it, 8 GPUs each) fill every Node but a
few whole NVLink domains (``--free`` Nodes, fewer than the three workloads need together: about
70 % of them by default, spread over the leaves), then each scheduler in turn gets the three
objects at once. Once binding has stopped (every pod bound, or no pod created or bound for
``--quiet`` seconds) the gangs are counted: whole, partly bound (some but not all of a gang's
pods bound: GPUs held by a gang that cannot run), or not started. A gang is the JobSet, each LWS
group, the RayCluster (head and workers), as docs/gangs.md "Gangs from workload controllers" says;
kube-scheduler has no notion of them and places pod by pod.

    .venv/bin/python -m benchmarks.kwok_workloads [--quick] [--nodes 1000] [--leaves 16]
        [--jobs 8] [--groups 32] [--workers 32] [--free N] [--limit 50/100] [--quiet 10]
        [--timeout 180] [--keep] [--json]

``--quick``: 128 Nodes in 4 leaves, a JobSet of 2 Jobs, 8 LWS groups, 8 Ray workers (what
``benchmarks/tests/test_kwok_workloads.py`` runs). Needs ``python -m devcluster.binaries ensure
--all`` (kube-scheduler, kwok) and ``python -m devcluster.workloads ensure jobset lws kuberay``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.kwok_cluster import (
    APISERVER_ARGS,
    Limit,
    Process,
    compile_topos,
    create_nodes,
    parse_limits,
    start_kube_scheduler,
    start_kwok,
    start_topos,
    tear_down,
    wait_ready,
)
from benchmarks.kwok_settle import settle
from benchmarks.kwok_settle import warm_up as warm_up_cluster
from benchmarks.kwok_workload_runs import (
    CONTROLLERS,
    FULL,
    QUICK,
    SCHEDULERS,
    WORKLOADS,
    Alone,
    Contended,
    Sizes,
    fill,
    free_nodes,
    new_namespace,
    run_alone,
    run_contended,
    warm_up,
)
from benchmarks.run_all import machine
from common.kube import KubeClient
from devcluster import controllers
from devcluster.binaries import KUBERNETES_VERSION, Binaries, ensure
from devcluster.controlplane import ControlPlane, ControlPlaneSettings
from devcluster.workloads import launch


def launcher(
    binaries: Binaries, plane: ControlPlane, work: Path, limit: Limit
) -> Callable[[str, str], Process]:
    def launch_one(name: str, tag: str) -> Process:
        if name == "kube-scheduler":
            return start_kube_scheduler(binaries, plane, work, limit, tag)
        return start_topos(plane, work, limit, tag, binds=64)

    return launch_one


async def bench(
    args: argparse.Namespace,
    sizes: Sizes,
    plane: ControlPlane,
    start: Callable[[str, str], Process],
) -> tuple[list[Alone], list[Contended], str]:
    alone: list[Alone] = []
    contended: list[Contended] = []
    order = [s.strip() for s in args.order.split(",") if s.strip()]
    async with await KubeClient.connect(plane.kubeconfig) as kube:
        t0 = time.perf_counter()
        await create_nodes(kube, sizes.nodes, sizes.fabric)
        created = time.perf_counter() - t0
        ready = await wait_ready(kube, sizes.nodes)
        quiet = await settle(plane)
        say(
            args,
            f"{sizes.nodes} Nodes in {sizes.leaves} leaves created in {created:.1f}s, all Ready "
            f"(KWOK) {ready:.1f}s later, API server quiet {quiet:.1f}s after that",
        )
        if args.warm_up:
            say(args, (await warm_up_cluster(plane, kube, sizes.nodes, sizes.nodes)).summary())
        for name in order:
            scheduler = start(name, f"alone-{name}")
            try:
                await new_namespace(kube, f"wl-{name}-warm")
                await warm_up(kube, f"wl-{name}-warm", scheduler, name)
                for workload in WORKLOADS:
                    run = await run_alone(
                        kube, name, workload, sizes, scheduler=scheduler, timeout_s=args.timeout
                    )
                    alone.append(run)
                    say(args, run.summary())
            finally:
                scheduler.stop()
        keep_free = free_nodes(sizes, args.free or int(0.7 * sizes.demand()))
        filled = await fill(kube, sizes, keep_free)
        setting = (
            f"{filled:,} Nodes filled by 8-GPU pods, {len(keep_free)} free for "
            f"{sizes.demand()} Nodes' worth of pods"
        )
        say(args, setting)
        for name in order:
            scheduler = start(name, f"contention-{name}")
            try:
                await warm_up(kube, f"wl-{name}-warm", scheduler, name)
                run_c = await run_contended(
                    kube,
                    name,
                    sizes,
                    scheduler=scheduler,
                    quiet_s=args.quiet,
                    timeout_s=args.timeout,
                )
                contended.append(run_c)
                say(args, run_c.summary())
            finally:
                scheduler.stop()
    return alone, contended, setting


def rows(
    alone: Sequence[Alone], contended: Sequence[Contended], sizes: Sizes, setting: str
) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    base = f"kube-scheduler v{KUBERNETES_VERSION}"
    where = f"{sizes.nodes:,} KWOK nodes, {sizes.leaves} leaves"
    for workload in WORKLOADS:
        pair = {r.scheduler: r for r in alone if r.workload == workload}
        topos, kube = pair.get("topos"), pair.get("kube-scheduler")
        if topos is None or kube is None:
            continue
        case = f"{where}, {sizes.what(workload)}, alone"

        def done(r: Alone) -> str:
            if r.bound < r.pods:
                return f"{r.bound}/{r.pods} bound after the timeout"
            return f"{r.all_bound_s:.2f} s ({r.after_created_s:.2f} s)"

        out.append(
            {
                "case": case,
                "figure": "apply → all bound (last pod created → all bound)",
                "topos": done(topos),
                "baseline": f"{done(kube)} ({base})",
                "goal": "",
            }
        )
        out.append(
            {
                "case": case,
                "figure": f"{sizes.slices(workload)} (asked); in one leaf / one NVLink domain",
                "topos": f"{topos.in_leaf}/{topos.slices} / {topos.in_clique}/{topos.slices}",
                "baseline": f"{kube.in_leaf}/{kube.slices} / {kube.in_clique}/{kube.slices}",
                "goal": "every slice as asked",
            }
        )
    pair_c = {r.scheduler: r for r in contended}
    topos_c, kube_c = pair_c.get("topos"), pair_c.get("kube-scheduler")
    if topos_c is not None and kube_c is not None:
        case = f"{where}, the three at once, {setting}"

        def gangs(r: Contended) -> str:
            return f"{r.partial} ({r.partial_gpus} GPUs held); {r.whole} whole; {r.bound} pods"

        out.append(
            {
                "case": case,
                "figure": f"of {topos_c.gangs} gangs once binding stopped: partly bound (GPUs "
                "they hold); whole; pods bound",
                "topos": gangs(topos_c),
                "baseline": f"{gangs(kube_c)} ({base})",
                "goal": "0 partly bound",
            }
        )
    return out


def say(args: argparse.Namespace, line: str) -> None:
    print(line, file=sys.stderr if args.json else sys.stdout, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the small size (defaults below)")
    ap.add_argument("--nodes", type=int, help=f"KWOK Nodes (default {FULL.nodes})")
    ap.add_argument("--leaves", type=int, help=f"leaves (default {FULL.leaves})")
    ap.add_argument("--jobs", type=int, help=f"JobSet Jobs of 8 pods (default {FULL.jobs})")
    ap.add_argument("--groups", type=int, help=f"LWS groups of 4 (default {FULL.groups})")
    ap.add_argument("--workers", type=int, help=f"Ray workers (default {FULL.workers})")
    ap.add_argument(
        "--free",
        type=int,
        default=0,
        help="contention: Nodes left free (rounded up to whole NVLink domains; default 70 %% of "
        "what the three workloads need)",
    )
    ap.add_argument("--limit", default="50/100", help="both schedulers' client QPS/burst")
    ap.add_argument("--order", default="kube-scheduler,topos", help="which scheduler runs first")
    ap.add_argument("--quiet", type=float, default=10.0, help="contention: binding has stopped")
    ap.add_argument("--timeout", type=float, default=180.0, help="per run")
    ap.add_argument(
        "--warm-up",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="before the first run, a pod on every Node (created and bound by the benchmark) "
        "until Running, then deleted (benchmarks/kwok_settle.py): what a fresh cluster does "
        "once falls on no scheduler's run",
    )
    ap.add_argument("--keep", action="store_true", help="keep the logs and configs")
    ap.add_argument("--json", action="store_true", help="print rows as JSON (for run_all)")
    args = ap.parse_args(argv)
    default = QUICK if args.quick else FULL
    sizes = Sizes(
        nodes=args.nodes or default.nodes,
        leaves=args.leaves or default.leaves,
        jobs=args.jobs or default.jobs,
        groups=args.groups or default.groups,
        workers=args.workers or default.workers,
    )
    if sizes.demand() > sizes.nodes:
        ap.error(f"the workloads need {sizes.demand()} Nodes, more than --nodes {sizes.nodes}")
    if not 0 <= args.free < sizes.demand():
        ap.error(
            f"--free {args.free}: must leave fewer Nodes free than the {sizes.demand()} the "
            "workloads need together (contention), and not below 0"
        )
    if sorted(SCHEDULERS) != sorted(args.order.split(",")):
        ap.error(f"--order must name {' and '.join(SCHEDULERS)}, got {args.order!r}")
    (limit,) = parse_limits(args.limit)
    info = machine()
    say(args, f"machine: {info['CPU']}, {info['cores']}, {info['memory']}, {info['Python']}")
    started = time.perf_counter()
    binaries = ensure(extra=True, log=False)
    work = Path(tempfile.mkdtemp(prefix="topos-kwok-workloads-"))
    plane = ControlPlane.start(
        binaries=binaries,
        settings=ControlPlaneSettings(
            controllers=controllers.PLAYGROUND, extra_apiserver_args=APISERVER_ARGS
        ),
    )
    kwok: Process | None = None
    running: launch.WorkloadControllers | None = None
    try:
        kwok = start_kwok(binaries, plane, work)
        running = launch.start(plane, list(CONTROLLERS), directory=work / "workloads", log=False)
        versions = ", ".join(f"{p.name} {p.version}" for p in running.processes)
        say(
            args,
            f"Kubernetes v{KUBERNETES_VERSION} (kube-apiserver, kube-scheduler), KWOK, "
            f"{versions} (built from their modules)",
        )
        compile_topos()
        load0 = os.getloadavg()[0]
        alone, contended, setting = asyncio.run(
            bench(args, sizes, plane, launcher(binaries, plane, work, limit))
        )
    finally:
        if running is not None:
            running.stop()
        tear_down(kwok, plane, work, keep=args.keep)
    table = rows(alone, contended, sizes, setting)
    notes = [
        f"machine: {info['CPU']}, {info['cores']}; load average {load0:.1f} before the runs, "
        f"{os.getloadavg()[0]:.1f} after",
        f"one scheduler process at a time (QPS/burst {limit.label}) on the same API server, "
        "nodes and objects; the real JobSet, LWS and KubeRay controllers make the pods",
        *(r.summary() for r in alone),
        *(r.summary() for r in contended),
        f"whole benchmark {time.perf_counter() - started:.0f} s",
    ]
    if args.json:
        print(json.dumps({"rows": table, "notes": notes}))
    else:
        for r in table:
            print(f"{r['case']}: {r['figure']}: Topos {r['topos']}, {r['baseline']} {r['goal']}")
        for line in notes:
            print(line)
    complete = all(r.bound >= r.pods for r in alone)
    return 0 if complete and len(contended) == len(SCHEDULERS) else 1


if __name__ == "__main__":
    sys.exit(main())
