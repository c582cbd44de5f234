"""The CRDs of the AI workload controllers, read from their own Go modules at the served versions
(the Go module cache, outside the repo), installed on the test control plane. Module, version
and CRD directory are those of the controller's row in ``devcluster.workloads.catalog``, so these
CRDs are the ones the real controllers serve.

``go mod download -json <module>@<version>`` gives the module's ``Dir``; the CRD is the file its
project installs. Without Go or the module the test is skipped (failed under ``CI=true``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from common.kube import Resource
from coordinator.adapters.kube.tree import KUEUE_TOPOLOGIES
from devcluster.workloads.catalog import JOBSET, KUBERAY, KUEUE, LWS, TRAINER, Controller
from tests.support.ci import skip_or_fail
from tests.support.workload_controllers import (
    JOBSETS,
    LEADER_WORKER_SETS,
    RAY_CLUSTERS,
    TRAIN_JOBS,
)

#: kind → the controller whose module ships its CRD (the catalog's row: module, exact version,
#: CRD directory), and the resource it defines.
CRDS: Final[dict[str, tuple[Controller, Resource]]] = {
    "JobSet": (JOBSET, JOBSETS),
    "LeaderWorkerSet": (LWS, LEADER_WORKER_SETS),
    "TrainJob": (TRAINER, TRAIN_JOBS),
    "RayCluster": (KUBERAY, RAY_CLUSTERS),
    "Topology": (KUEUE, KUEUE_TOPOLOGIES),  # Kueue's: a tree source (gangs.tree.source: kueue)
}


def _go() -> str | None:
    return shutil.which("go") or next(
        (str(p) for p in (Path("/usr/local/go/bin/go"),) if p.exists()), None
    )


def crd_file(kind: str) -> Path:
    """The CRD file of ``kind`` in its module's directory (downloaded into the module cache)."""
    controller, resource = CRDS[kind]
    module = controller.module_version
    (crd_dir,) = controller.crds
    path = f"{crd_dir}/{resource.group}_{resource.plural}.yaml"
    go = _go()
    if go is None:
        skip_or_fail(f"no Go toolchain to fetch {module} (its CRD {path})")
    done = subprocess.run(
        [go, "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        info: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        info = {}
    directory = info.get("Dir")
    if not directory:
        skip_or_fail(f"cannot download {module}: {info.get('Error') or done.stderr.strip()}")
    file = Path(directory) / path
    if not file.exists():
        skip_or_fail(f"{module} has no {path}")
    return file


def install_workload_crds(kubectl: Callable[..., Any], *kinds: str) -> None:
    """Apply the CRDs of ``kinds`` (server-side: some are larger than an annotation may hold)
    and wait until they are served."""
    for kind in kinds:
        file = crd_file(kind)
        done = kubectl("apply", "--server-side", "--force-conflicts", "-f", str(file), timeout=120)
        assert done.returncode == 0, done.stderr
        _, resource = CRDS[kind]
        name = f"{resource.plural}.{resource.group}"
        for _ in range(50):  # a CRD just created has no status yet: `kubectl wait` errs at once
            done = kubectl(
                "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s", timeout=90
            )
            if done.returncode == 0 or "accessor error" not in done.stderr:
                break
            time.sleep(0.1)
        assert done.returncode == 0, done.stderr


def remove_workload_crds(kubectl: Callable[..., Any], *kinds: str) -> None:
    """Delete the CRDs of ``kinds`` (and so every object of them) and wait until they are gone:
    a test that installed them on the shared control plane leaves it as it found it (where a
    JobSet's or LWS's CRD is served, Topos holds a pod carrying their labels until its JobSet
    or LWS is seen, so tests that make such pods without one would wait)."""
    for kind in kinds:
        _, resource = CRDS[kind]
        name = f"crd/{resource.plural}.{resource.group}"
        done = kubectl("delete", name, "--ignore-not-found", "--wait=true", timeout=180)
        assert done.returncode == 0, done.stderr
