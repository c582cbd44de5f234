"""A real kube-scheduler beside the control plane, with one profile of its own scheduler name.

Pods that name it (``spec.schedulerName``) are scheduled by Kubernetes' own scheduler of the
harness's version — DRA included: it allocates their ResourceClaims from the published
ResourceSlices (first fit, no topology), creates the claims of KEP-5004 extended-resource pods,
reserves them and binds. Nothing else is touched, so it can share a control plane with Topos.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from types import TracebackType
from typing import Self

import yaml

from devcluster.controllers import tail
from devcluster.processes import free_port, spawn, stop_group, wait_https_ok


class SchedulerError(Exception):
    """kube-scheduler did not become ready; the message says why."""


class KubeScheduler:
    """A running kube-scheduler (``stop()`` is idempotent; also a context manager)."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.log = log
        self._process = process
        self._stopped = False

    @classmethod
    def start(
        cls,
        *,
        binary: Path,
        kubeconfig: Path,
        name: str,
        directory: Path,
        timeout_s: float = 120.0,
    ) -> KubeScheduler:
        """Start it with profile ``name``; return once ``/readyz`` (informers synced) is ok."""
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / f"{name}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(kubeconfig)},
                    "leaderElection": {"leaderElect": False},
                    "profiles": [{"schedulerName": name}],
                }
            )
        )
        port = free_port()
        log = directory / f"{name}.log"
        argv = [
            str(binary),
            f"--config={config}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--v=1",
        ]
        tied = threading.current_thread() is threading.main_thread()
        scheduler = cls(name, spawn(argv, log_path=log, die_with_parent=tied), log)
        failure = wait_https_ok(scheduler._process.poll, port, "/readyz", timeout_s=timeout_s)
        if failure is not None:
            scheduler.stop()
            raise SchedulerError(f"kube-scheduler {failure}; last log lines ({log}):\n{tail(log)}")
        return scheduler

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        stop_group(self._process.pid, grace_s=10.0, reap=self._process.poll)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
