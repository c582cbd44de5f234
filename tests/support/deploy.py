"""Helpers shared by the deploy tests: the rendered kustomization and applying parts of it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NAMESPACE = "topos-system"

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def render(kubectl: Kubectl) -> list[dict[str, Any]]:
    """``kubectl kustomize deploy/`` as a list of objects."""
    done = kubectl("kustomize", str(DEPLOY))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def apply_for_real(kubectl: Kubectl, *files: str) -> None:
    """``kubectl apply`` (not a dry run) of deploy/ files, e.g. the CRD, namespace and RBAC."""
    args: list[str] = []
    for name in files:
        args += ["-f", str(DEPLOY / name)]
    done = kubectl("apply", "--server-side", "--force-conflicts", *args)
    assert done.returncode == 0, done.stderr


def wait_crd_established(kubectl: Kubectl, name: str) -> None:
    done = kubectl(
        "wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s", timeout=90
    )
    assert done.returncode == 0, done.stderr
