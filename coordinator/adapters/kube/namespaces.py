"""Namespace labels, watched from the API server, for pod (anti-)affinity ``namespaceSelector``s.

A term's ``namespaceSelector`` is matched against the labels of each candidate pod's namespace,
as kube-scheduler's InterPodAffinity does. :class:`NamespaceLabels` keeps the scheduler's
:class:`~coordinator.engine.view.ClusterView` namespace table current through a
:class:`~.reflector.Reflector` over Namespaces (all of them: a term may select pods of any
namespace, whichever namespace the coordinator schedules). When a namespace appears, goes or
changes its labels, the pods waiting that the change may concern go back to the queue: those with
affinity terms (a selector may match that namespace now, or stop matching) and those of that
namespace (other pods' terms may now accept or refuse them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from common.kube import NAMESPACES, KubeClient, KubeObject
from coordinator.adapters.kube.reflector import Change, Reflector
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.queue import QueuedPod
from coordinator.engine.loop import Scheduler
from coordinator.engine.view import ClusterView

__all__ = ["NamespaceLabels", "namespace_watch"]


def _labels(obj: KubeObject) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


class NamespaceLabels:
    """The view's side of the Namespace watch. ``on_change(name)`` runs after each namespace
    that appeared, went or changed its labels."""

    def __init__(self, view: ClusterView, on_change: Callable[[str], None]) -> None:
        self._view = view
        self._on_change = on_change

    def _set(self, name: str, labels: Mapping[str, str] | None) -> None:
        if self._view.namespaces.get(name) == labels:
            return
        self._view.set_namespace(name, labels)
        self._on_change(name)

    def replace(self, items: list[KubeObject]) -> None:
        fresh = {str((obj.get("metadata") or {}).get("name") or ""): _labels(obj) for obj in items}
        for name in tuple(self._view.namespaces):
            if name not in fresh:
                self._set(name, None)
        for name, labels in fresh.items():
            self._set(name, labels)

    def apply(self, kind: Change, obj: KubeObject) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        self._set(name, None if kind == "DELETED" else _labels(obj))


def namespace_watch(client: KubeClient, scheduler: Scheduler) -> Reflector:
    """The reflector that keeps ``scheduler``'s namespace labels current; run it with ``run()``."""

    def requeue(namespace: str) -> None:
        def concerned(pod: QueuedPod) -> bool:
            req = pod.request
            return isinstance(req, PodRequest) and (
                req.has_affinity_terms or req.namespace == namespace
            )

        scheduler.queue.cluster_changed(concerned)

    return Reflector(
        client, NAMESPACES, NamespaceLabels(scheduler.view, requeue), what="namespaces"
    )
