"""Where the API server is and who we are: a kubeconfig file, or the pod's in-cluster identity."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration

from common.kube.errors import KubeError

_IN_CLUSTER_HOST = "KUBERNETES_SERVICE_HOST"


def _choose_kubeconfig(kubeconfig: str | os.PathLike[str] | None) -> Path | None:
    """The kubeconfig file to load, or ``None`` for the in-cluster identity."""
    given = kubeconfig or os.environ.get("KUBECONFIG")
    if given:
        # $KUBECONFIG may list several files; the first is the one we load.
        first = Path(str(given).split(os.pathsep)[0]).expanduser()
        if not first.is_file():
            raise KubeError(f"kubeconfig {first} does not exist")
        return first
    if os.environ.get(_IN_CLUSTER_HOST):
        return None
    default = Path.home() / ".kube" / "config"
    if default.is_file():
        return default
    raise KubeError(
        "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG or run in a pod"
    )


async def load_configuration(
    kubeconfig: str | os.PathLike[str] | None = None, *, context: str | None = None
) -> Any:
    """A client ``Configuration``.

    Order: the ``kubeconfig`` argument; else ``$KUBECONFIG``; else in-cluster (when running in a
    pod); else ``~/.kube/config``. Raises ``KubeError`` when none works.
    """
    configuration = Configuration()
    path = await asyncio.to_thread(_choose_kubeconfig, kubeconfig)
    try:
        if path is None:
            await asyncio.to_thread(
                kube_config.load_incluster_config, client_configuration=configuration
            )
        else:
            await kube_config.load_kube_config(
                config_file=str(path), context=context, client_configuration=configuration
            )
    except (
        kube_config.ConfigException,
        yaml.YAMLError,
        OSError,
        ValueError,
        KeyError,
        TypeError,
    ) as exc:
        raise KubeError(f"cannot load Kubernetes configuration from {path}: {exc}") from exc
    return configuration
