"""Pod manifests for the tests, built one way: :func:`pod` with keywords for what a test varies,
:func:`gpu_pod` for a GPU job as submitted to an API server, :func:`gang_members` for a gang's
worth of pods, :func:`host_port` for a container port bound on
the node, :func:`yaml_pod` for a manifest written out in full.

Every pod has one container (``main``, ``busybox``) asking for ``cpu``/``memory`` (requests) and
``gpus`` (an ``nvidia.com/gpu`` limit, as the device plugin wants). ``cpu=None, memory=None``
leaves the requests out, as many real GPU jobs do. ``namespace=None`` leaves it out, for
pods created on an API server in a test's namespace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml


def pod(
    name: str,
    *,
    gpus: int = 0,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    namespace: str | None = "default",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gang: tuple[str, int] | None = None,
    scheduler: str | None = "topos",
    node: str | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    affinity: Mapping[str, Any] | None = None,
    ports: Sequence[Mapping[str, Any]] = (),
    uid: str | None = None,
    created: str | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Pod. ``gang=(name, min)`` labels it a member of a Topos gang; ``node`` binds it
    (``spec.nodeName``); ``spec`` adds or overrides any other ``spec`` field."""
    assert isinstance(name, str), f"{name!r} is not a pod's name"
    assert ":" not in name, f"{name!r} is a manifest, for yaml_pod()"
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    resources: dict[str, Any] = {"requests": requests} if requests else {}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    container: dict[str, Any] = {"name": "main", "image": "busybox", "resources": resources}
    if ports:
        container["ports"] = [dict(p) for p in ports]
    body: dict[str, Any] = {"containers": [container]}
    optional = {
        "schedulerName": scheduler,
        "nodeName": node,
        "priority": priority,
        "priorityClassName": priority_class,
        "nodeSelector": dict(node_selector) if node_selector else None,
        "tolerations": [dict(t) for t in tolerations] or None,
        "affinity": dict(affinity) if affinity else None,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    body.update(spec or {})
    all_labels = dict(labels or {})
    if gang is not None:
        all_labels.update({"topos.io/gang": gang[0], "topos.io/gang-min": str(gang[1])})
    meta: dict[str, Any] = {
        "name": name,
        "labels": all_labels,
        "annotations": dict(annotations or {}),
    }
    for key, value in (("namespace", namespace), ("uid", uid), ("creationTimestamp", created)):
        if value is not None:
            meta[key] = value
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def gpu_pod(name: str, gpus: int, **kw: Any) -> dict[str, Any]:
    """A GPU job as users often write one for an API server: an ``nvidia.com/gpu`` limit, no
    CPU/memory requests, no namespace (it lands in the one it is created in); ``kw`` as for
    :func:`pod`, and may set those too."""
    return pod(name, gpus=gpus, **{"namespace": None, "cpu": None, "memory": None, **kw})


def gang_members(
    gang: str, size: int, *, count: int | None = None, prefix: str | None = None, **kw: Any
) -> list[dict[str, Any]]:
    """``count`` (default ``size``) members of ``gang``, which needs ``size`` of them, named
    ``<prefix>-0``, ``<prefix>-1``… (the gang's name by default); ``kw`` as for :func:`pod`."""
    stem = prefix or gang
    return [
        pod(f"{stem}-{i}", gang=(gang, size), **kw) for i in range(size if count is None else count)
    ]


def host_port(port: int, *, protocol: str = "TCP", ip: str | None = None) -> dict[str, Any]:
    """A container port also bound on the node (``hostPort``), on every address or on ``ip``."""
    entry: dict[str, Any] = {"containerPort": port, "hostPort": port, "protocol": protocol}
    if ip:
        entry["hostIP"] = ip
    return entry


def yaml_pod(text: str) -> dict[str, Any]:
    """A Pod written in YAML; ``apiVersion``/``kind``, namespace ``default`` and scheduler
    ``topos`` are filled in when the text leaves them out."""
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    data.setdefault("apiVersion", "v1")
    data.setdefault("kind", "Pod")
    data.setdefault("metadata", {}).setdefault("namespace", "default")
    data.setdefault("spec", {}).setdefault("schedulerName", "topos")
    return data
