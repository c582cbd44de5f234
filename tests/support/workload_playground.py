"""``topos devcluster up`` with workload controllers, through the real command line as a user runs
it, and ``kubectl`` against the playground it started (``--workloads``, ``--kueue``)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devcluster.binaries import find
from devcluster.playground import WORKLOADS_DIR
from devcluster.subprocess_env import subprocess_env
from devcluster.workloads import build
from devcluster.workloads.catalog import with_requirements
from devcluster.workloads.launch import Process, WorkloadControllers
from tests.support.ci import skip_or_fail

REPO = Path(__file__).resolve().parents[2]


def topos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=subprocess_env(),
    )


@dataclass
class Playground:
    directory: Path
    kubectl_path: Path
    kubeconfig: str
    stderr: str
    """What ``up`` said."""

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(self.kubectl_path), "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def pods(self, selector: str) -> list[dict[str, Any]]:
        return list(json.loads(self.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"])

    def controllers(self) -> list[Process]:
        """The workload controllers ``up`` recorded, in the order it started them."""
        running = WorkloadControllers.attach(self.directory / WORKLOADS_DIR)
        assert running is not None, f"no workload controllers recorded in {self.directory}"
        return running.processes


@contextlib.contextmanager
def workload_playground(directory: Path, flag: str, needs: Sequence[str]) -> Iterator[Playground]:
    """``topos devcluster up`` in ``directory`` with two simulated A100 nodes (KWOK), a
    coordinator, Jobs that run until deleted, and ``flag`` (``--workloads``, ``--kueue``);
    ``down`` afterwards. Skipped (failed under ``CI=true``) unless KWOK and the controllers
    ``needs`` (and what they require) are built."""
    binaries = find(extra=True)
    if binaries is None or binaries.kwok is None:
        skip_or_fail("kwok is not built (python -m devcluster.binaries ensure --all)")
    missing = [c.name for c in with_requirements(needs) if build.find(c) is None]
    if missing:
        skip_or_fail(f"workload controllers not built: {', '.join(missing)} (make controllers)")
    up = topos(
        "devcluster",
        "up",
        "--nodes",
        "dgx-a100:2",
        "--coordinator",
        "--job-duration",
        "0",
        flag,
        "--dir",
        str(directory),
    )
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.splitlines()[0].removeprefix("export KUBECONFIG=")
        yield Playground(directory, binaries.kubectl, kubeconfig, up.stderr)
    finally:
        topos("devcluster", "down", "--dir", str(directory))
