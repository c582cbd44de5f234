"""A coordinator's start-up against a big cluster: from the process's launch to its first bind.

One etcd + kube-apiserver (``devcluster``), ``--nodes`` Nodes as the KWOK benchmark makes them
(a DGX H100's labels, topology annotation and capacity; ``benchmarks/kwok_cluster.py``) but made
Ready by this script (no KWOK: nothing changes them afterwards), and ``--pods`` pending single-GPU
pods created before each start (the KWOK benchmark's backlog case). Each round starts
``topos-coordinator`` (``python -m coordinator.app.main``) from every ``--tree`` in turn (a
checkout: compare two commits in one session), waits for the first pod seen bound, stops it and
deletes the pods. Printed per start: seconds to ``scheduler started`` in its log (imports, config,
the first lists of Nodes and pods) and to the first bind, and the process's CPU seconds by then.

    .venv/bin/python -m benchmarks.startup_first_bind [--nodes 5000] [--pods 3000]
        [--rounds 3] [--tree .] [--tree ../base] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import psutil
import yaml

from benchmarks.kwok_cluster import (
    APISERVER_ARGS,
    compile_topos,
    create_nodes,
    node_name,
    start_profiler,
)
from benchmarks.kwok_pods import pod_body
from common.kube import NAMESPACES, NODES, PODS, KubeClient
from devcluster.binaries import ensure
from devcluster.controlplane import ControlPlane, ControlPlaneSettings
from devcluster.processes import free_port

ROOT = Path(__file__).resolve().parents[1]


async def _ready(kube: KubeClient, nodes: int) -> None:
    status = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            await kube.patch(NODES, node_name(i), status, subresource="status")

    await asyncio.gather(*(one(i) for i in range(nodes)))


async def _pods(kube: KubeClient, namespace: str, count: int) -> None:
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            await kube.create(PODS, pod_body(f"p-{i:05d}", "topos"), namespace=namespace)

    await asyncio.gather(*(one(i) for i in range(count)))


def _log_time(log: Path, message: str) -> float | None:
    for line in log.read_text(errors="replace").splitlines():
        if message in line:
            with_ts = json.loads(line)
            return datetime.fromisoformat(with_ts["ts"]).timestamp()
    return None


async def _start(
    plane: ControlPlane,
    kube: KubeClient,
    tree: Path,
    work: Path,
    namespace: str,
    profile: Path | None = None,
) -> tuple[float, float, float]:
    """(to ``scheduler started``, to the first bind, CPU seconds by then)."""
    kubeconfig = plane.write_user_kubeconfig(
        work / "topos.kubeconfig", user="bench-topos", groups=("system:masters",)
    )
    config = work / "topos.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "coordinator": {"listen": f"127.0.0.1:{free_port()}"},
                "auth": {"enabled": False},
                "leaderElection": {"enabled": False},
                "scheduler": {"enabled": True},
                "kube": {"qps": 0, "burst": 1},
            }
        )
    )
    rv = (await kube.list(PODS, namespace=namespace, limit=1))["resourceVersion"]
    log = work / f"topos-{namespace}.log"
    with log.open("wb") as out:
        wall0 = time.time()
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "coordinator.app.main", f"--kubeconfig={kubeconfig}"),
            f"--config={config}",
            cwd=tree,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        spy = None if profile is None else start_profiler(proc.pid, profile)
        try:
            async with asyncio.timeout(120):
                async for _, obj in kube.watch(PODS, namespace=namespace, resource_version=rv):
                    if obj["spec"].get("nodeName"):
                        break
            first = time.perf_counter() - t0
            cpu = psutil.Process(proc.pid).cpu_times()
            cpu_s = cpu.user + cpu.system
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                await asyncio.to_thread(spy.wait, 30)
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
    started = _log_time(log, '"msg":"scheduler started"')
    return (started - wall0 if started is not None else float("nan")), first, cpu_s


async def bench(args: argparse.Namespace) -> dict[str, list[tuple[float, float, float]]]:
    binaries = ensure(log=False)
    work = Path(tempfile.mkdtemp(prefix="topos-startup-"))
    plane = ControlPlane.start(
        binaries=binaries, settings=ControlPlaneSettings(extra_apiserver_args=APISERVER_ARGS)
    )
    results: dict[str, list[tuple[float, float, float]]] = {t: [] for t in args.tree}
    try:
        async with await KubeClient.connect(plane.kubeconfig) as kube:
            t0 = time.perf_counter()
            await create_nodes(kube, args.nodes)
            await _ready(kube, args.nodes)
            print(f"{args.nodes} Nodes created and Ready in {time.perf_counter() - t0:.1f}s")
            trees: list[Path] = args.paths
            for tree in trees:
                compile_topos(tree)
            for r in range(args.rounds):
                for i, (name, tree) in enumerate(zip(args.tree, trees, strict=True)):
                    namespace = f"start-{r}-{i}"
                    await _pods(kube, namespace, args.pods)
                    profile = Path(args.profile) / f"startup-{r}-{i}.txt" if args.profile else None
                    figures = await _start(plane, kube, tree, work, namespace, profile)
                    results[name].append(figures)
                    print(
                        f"round {r} {name}: scheduler started {figures[0]:.2f}s, first bind "
                        f"{figures[1]:.2f}s, CPU {figures[2]:.2f}s",
                        flush=True,
                    )
                    await kube.delete_collection(PODS, namespace=namespace, grace_period_seconds=0)
    finally:
        plane.stop()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", action="append", default=[], help="checkout to start (repeatable)")
    ap.add_argument("--profile", default="", help="py-spy each start into this directory")
    args = ap.parse_args(argv)
    args.tree = args.tree or [str(ROOT)]
    args.paths = [Path(tree).resolve() for tree in args.tree]
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)  # py-spy writes no directory
    results = asyncio.run(bench(args))
    for tree, figures in results.items():
        started, first, cpu = (statistics.median(f[k] for f in figures) for k in range(3))
        print(
            f"{tree}: median of {len(figures)}: scheduler started {started:.2f}s, first bind "
            f"{first:.2f}s, CPU {cpu:.2f}s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
