"""``devcluster up`` installs every CustomResourceDefinition in ``deploy/crds/`` (adding a CRD to
the playground is adding a file there) and waits until the API server serves each one
(condition ``Established``).

The files are read from ``devcluster/deploy_crds/``: in a checkout a symbolic link to
``deploy/crds`` (the one source, which the kustomize base and the Helm chart use too), in an
installed wheel the copies setuptools made of it (package data), so ``topos devcluster up``
installs the same CRDs either way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import yaml

from common.kube import AlreadyExists, KubeClient
from common.kube.resources import Resource

CRD_DIR: Final = Path(__file__).resolve().parent / "deploy_crds"
CRDS: Final = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    namespaced=False,
    kind="CustomResourceDefinition",
)

# libyaml's loader where PyYAML has it (its manylinux wheels do): the workload modules' CRDs are
# megabytes, and KubeRay's 3 MB take 8.5 s of CPU to parse in Python, 1.5 s in C.
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CrdError(Exception):
    """A CRD file is unreadable, refused, or never Established; the message names it."""


def definitions(directory: Path = CRD_DIR) -> list[tuple[Path, dict[str, Any]]]:
    """The CRDs in ``directory`` (``*.yaml``, several documents per file allowed), in name
    order; other kinds in those files are an error."""
    found: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            documents = [d for d in yaml.load_all(path.read_text(), Loader=YAML_LOADER) if d]
        except (OSError, yaml.YAMLError) as exc:
            raise CrdError(f"{path}: {exc}") from exc
        for document in documents:
            if not isinstance(document, dict) or document.get("kind") != CRDS.kind:
                kind = document.get("kind") if isinstance(document, dict) else type(document)
                raise CrdError(f"{path}: expected CustomResourceDefinition documents, got {kind}")
            found.append((path, document))
    return found


async def install(
    kube: KubeClient, directory: Path = CRD_DIR, *, timeout_s: float = 60.0
) -> list[str]:
    """Create (or update) each CRD, then wait until all are Established; their names."""
    names: list[str] = []
    for path, body in definitions(directory):
        name = str(body["metadata"]["name"])
        try:
            await kube.create(CRDS, body)
        except AlreadyExists:
            await kube.patch(CRDS, name, body, patch_type="merge")
        except Exception as exc:  # the API server's refusal, with its reason
            raise CrdError(f"{path.name}: {exc}") from exc
        names.append(name)
    await established(kube, names, timeout_s=timeout_s)
    return names


async def established(kube: KubeClient, names: Iterable[str], *, timeout_s: float = 60.0) -> None:
    """Wait until the API server serves each CRD of ``names`` (condition ``Established``);
    ``CrdError`` naming those it does not after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    pending = set(names)
    while pending:
        for name in sorted(pending):
            obj = await kube.get(CRDS, name)
            conditions = (obj.get("status") or {}).get("conditions") or []
            if any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                pending.discard(name)
        if pending and time.monotonic() > deadline:
            raise CrdError(f"not Established after {timeout_s:.0f}s: {', '.join(sorted(pending))}")
        if pending:
            await asyncio.sleep(0.1)
