"""The real workload controllers (JobSet, LWS, Trainer, KubeRay) on a control plane of their own,
started on demand and kept for the session (``devcluster.workloads``).

Their control plane is not the shared one of ``tests/conftest.py``: its kube-controller-manager
runs the StatefulSet controller (LWS's groups are StatefulSets), which the shared plane leaves
out because other tests stand in for a StatefulSet's replicas, and their webhooks and CRDs stay
away from every other test.
"""

from __future__ import annotations

import threading
from pathlib import Path

from common.kube import Resource
from devcluster import controllers
from devcluster.binaries import Binaries
from devcluster.controlplane import ControlPlane, ControlPlaneSettings
from devcluster.workloads import build, launch
from devcluster.workloads.catalog import with_requirements

#: kube-controller-manager controllers of the workloads' plane: the shared plane's, StatefulSets.
PLANE_CONTROLLERS = controllers.PLAYGROUND


def start_plane(binaries: Binaries) -> ControlPlane:
    return ControlPlane.start(
        binaries=binaries, settings=ControlPlaneSettings(controllers=PLANE_CONTROLLERS)
    )


class WorkloadHarness:
    """Starts controllers on ``plane`` the first time a test needs them; ``stop()`` stops all."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._started: list[launch.WorkloadControllers] = []
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def need(self, name: str) -> build.Built:
        """Start ``name`` (and what it requires) unless running; its cached build.
        ``BinariesUnavailable`` if it cannot be built, ``WorkloadsError`` if it does not start."""
        with self._lock:
            built = {c.name: build.ensure(c) for c in with_requirements([name])}
            if name not in self._names:
                running = launch.start(
                    self.plane,
                    [name],
                    directory=self.directory / name,
                    running_already=self._names,
                )
                self._started.append(running)
                self._names.update(running.names)
            return built[name]

    @property
    def directory(self) -> Path:
        return self.plane.directory / "workloads"

    def stop(self) -> None:
        for running in reversed(self._started):
            running.stop()


JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", True, "JobSet")
LEADER_WORKER_SETS = Resource(
    "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", True, "LeaderWorkerSet"
)
TRAIN_JOBS = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", True, "TrainJob")
TRAINING_RUNTIMES = Resource(
    "trainer.kubeflow.org", "v1alpha1", "trainingruntimes", True, "TrainingRuntime"
)
RAY_CLUSTERS = Resource("ray.io", "v1", "rayclusters", True, "RayCluster")
