"""Fixtures for the gang end-to-end tests: a fresh ``GangCluster`` per test (its own namespace and
run label), and the PodGroup CRDs (scheduler-plugins', Volcano's, KAI's) installed once per
session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.kube import KubeClient
from tests.support.gang_cluster import GangCluster, install_crd


@pytest.fixture(scope="session")
def podgroup_crd(kubectl: Callable[..., Any]) -> None:
    install_crd(kubectl)


@pytest.fixture(scope="session")
def foreign_crds(kubectl: Callable[..., Any]) -> None:
    """Volcano's and KAI's PodGroup CRDs, as those projects publish them."""
    install_crd(kubectl, "podgroups.scheduling.volcano.sh")
    install_crd(kubectl, "podgroups.scheduling.run.ai")


@pytest.fixture
def cluster(kube: KubeClient, kubeconfig: Path, namespace: str) -> GangCluster:
    return GangCluster(kube, kubeconfig, namespace)
