"""Fixtures for the workload controllers' end-to-end tests: a ``GangCluster`` (nodes, a Topos
coordinator with its gang runtime) on the workloads' control plane, in a namespace of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.kube import KubeClient
from devcluster.controlplane import ControlPlane
from tests.support.gang_cluster import GangCluster


@pytest.fixture
def cluster(
    workload_kube: KubeClient, workload_plane: ControlPlane, workload_namespace: str
) -> GangCluster:
    kubeconfig: Path = workload_plane.kubeconfig
    return GangCluster(workload_kube, kubeconfig, workload_namespace)
