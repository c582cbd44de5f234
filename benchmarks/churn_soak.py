"""Crash-and-churn soak: many seeded rounds of pods, gangs, deletions, re-creations under reused
names and coordinator SIGKILLs on a real control plane, then leader failovers between two
coordinators; prints rounds, kills, violations by kind and the failover times (goal: 0
violations over at least 1,000 rounds).

Starts the harness's etcd + kube-apiserver on 127.0.0.1, four simulated GPU nodes (two DGX A100,
two 8-GPU PCIe boxes, 32 GPUs) with real agents on the fake NVML and KWOK as their kubelet with the
playground's stages (``--kubelet none``: no kubelet, every deletion forced), and a real
``topos coordinator`` process; the rounds and the invariants are the harness's
(``devcluster.churn``; ``tests/churn/test_churn.py`` runs a short version). The same seed
gives the same actions; the seed is printed, ``--seed`` reproduces a run.

    .venv/bin/python -m benchmarks.churn_soak --rounds 1000 --kills 100 --failovers 5
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from common.kube import NAMESPACES, KubeClient
from devcluster.binaries import ensure
from devcluster.churn.checks import report, summary
from devcluster.churn.failover import FailoverSettings, run_failover
from devcluster.churn.harness import Churn, ChurnSettings
from devcluster.controlplane import ControlPlane


async def _namespace(kube: KubeClient, stem: str) -> str:
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await kube.create(NAMESPACES, body)
    return name


async def soak(
    args: argparse.Namespace, kubeconfig: Path, directory: Path, kwok: Path | None
) -> int:
    settings = ChurnSettings(
        seed=args.seed,
        rounds=args.rounds,
        kills=args.kills if args.kills is not None else max(1, args.rounds // 10),
        settle_timeout_s=args.settle_timeout,
        time_limit_s=args.time_limit,
        kwok=kwok,
    )

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    async with await KubeClient.connect(kubeconfig) as kube:
        churn = Churn(
            kube, kubeconfig, await _namespace(kube, "churn"), directory, settings, log=say
        )
        result = await churn.execute()
        failover = None
        if args.failovers:
            failover = await run_failover(
                kube,
                kubeconfig,
                await _namespace(kube, "failover"),
                directory,
                FailoverSettings(trials=args.failovers),
                log=say,
            )
    violations = result.violations + (failover.violations if failover else [])
    settle = sorted(result.settle_s)
    print(f"seed: {args.seed}  (reproduce: --seed {args.seed})")
    print(
        f"rounds: {result.rounds_done} of {result.rounds_planned}"
        + (" (stopped by --time-limit)" if result.stopped_by_time else "")
        + f" in {result.elapsed_s:.0f} s; pods created {result.pods_created}, "
        f"deleted {result.pods_deleted} ({result.graceful_deletes} gracefully); "
        f"gangs created {result.gangs_created}; "
        f"kubelet: {'KWOK (the playground stages)' if kwok else 'none'}"
    )
    print(f"coordinator kills (SIGKILL + restart): {result.kills}")
    if settle:
        print(
            f"settle per round: p50 {statistics.median(settle):.1f} s, "
            f"max {settle[-1]:.1f} s (limit {settings.settle_timeout_s:.0f} s)"
        )
    print(f"violations by kind: {summary(violations) or 'none'}")
    if failover is not None:
        print(f"leader failover (two coordinators): {failover.line()}")
    verdict = "met" if not violations and result.rounds_done >= 1000 else "not met"
    print(
        f"goal: 0 violations over >= 1,000 rounds — {verdict} "
        f"({len(violations)} violations, {result.rounds_done} rounds)"
    )
    if violations:
        print(report(violations, seed=args.seed, limit=args.show))
    return 1 if violations else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--kills", type=int, default=None, help="rounds with a coordinator SIGKILL")
    ap.add_argument("--failovers", type=int, default=5, help="leader failovers to measure")
    ap.add_argument("--seed", type=int, default=None, help="default: a random one (printed)")
    ap.add_argument("--settle-timeout", type=float, default=30.0)
    ap.add_argument("--time-limit", type=float, default=3600.0, help="seconds for the rounds")
    ap.add_argument("--show", type=int, default=40, help="violations to list")
    ap.add_argument("--quiet", action="store_true", help="no per-event lines")
    ap.add_argument(
        "--kubelet",
        choices=("kwok", "none"),
        default="kwok",
        help="kwok: KWOK runs the pods with the playground's stages and finishes graceful "
        "deletions (default); none: pods stay bound, every deletion forced",
    )
    args = ap.parse_args(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 2**31)
    print(f"churn soak, seed {args.seed}", flush=True)
    started = time.monotonic()
    binaries = ensure(kwok=args.kubelet == "kwok")
    plane = ControlPlane.start(binaries=binaries)
    try:
        with tempfile.TemporaryDirectory(prefix="topos-churn-") as tmp:
            rc = asyncio.run(soak(args, plane.kubeconfig, Path(tmp), binaries.kwok))
    finally:
        plane.stop()
    print(f"total {time.monotonic() - started:.0f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
