"""The crash-and-churn harness, short, on the real control plane (the soak is
``benchmarks/churn_soak.py``). A failure lists every violation with its round, kind, pod, node
and GPU UUID, and the seed that reproduces the run: ``TOPOS_CHURN_SEED=<seed> pytest
tests/churn``."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from common.kube import KubeClient
from devcluster.binaries import find
from devcluster.churn.checks import report
from devcluster.churn.failover import FailoverSettings, run_failover
from devcluster.churn.harness import Churn, ChurnSettings
from tests.support.ci import skip_or_fail

pytestmark = pytest.mark.kube


def _seed() -> int:
    text = os.environ.get("TOPOS_CHURN_SEED")
    return int(text) if text else random.SystemRandom().randrange(1, 2**31)


async def test_churn_rounds_with_coordinator_kills_keep_every_invariant(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    """On the playground as users run it: KWOK is the nodes' kubelet, half the deletions are
    graceful and KWOK finishes them while the harness re-creates pods under the same names."""
    binaries = find(kwok=True)
    if binaries is None or binaries.kwok is None:
        skip_or_fail("kwok is not built (python -m devcluster.binaries ensure --all)")
    seed = _seed()
    print(f"churn seed {seed} (reproduce: TOPOS_CHURN_SEED={seed})")
    settings = ChurnSettings(
        seed=seed, rounds=20, kills=3, settle_timeout_s=20, time_limit_s=150, kwok=binaries.kwok
    )
    result = await Churn(kube, kubeconfig, namespace, tmp_path, settings).execute()
    assert not result.violations, report(result.violations, seed=seed)
    assert result.rounds_done >= 5, result.line()  # a loaded machine may stop it early, not at 0
    assert result.kills >= 1 or result.stopped_by_time, result.line()


async def test_two_coordinators_only_the_leader_binds_and_the_other_takes_over(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    result = await run_failover(
        kube, kubeconfig, namespace, tmp_path, FailoverSettings(trials=2, pods_per_trial=3)
    )
    assert not result.violations, report(result.violations, seed=0)
    assert len(result.failover_s) == 2, result.line()
