"""The Services, ReplicationControllers, ReplicaSets and StatefulSets of each namespace, by their
selectors: what kube-scheduler's default topology spreading selects a pod's siblings with.

:meth:`WorkloadSelectors.default_selector` is ``helper.DefaultSelector``: the labels of every
Service in the pod's namespace whose (non-empty) selector matches the pod, ANDed with the
selector of the ReplicationController, ReplicaSet or StatefulSet that controls it (looked up by
the controller reference's name in the pod's namespace). ``None`` when that selects nothing: a
pod no Service or controller of those kinds selects gets no default spreading.

The adapters keep one instance current (:meth:`~WorkloadSelectors.put` with each object as the
API server returns it, :meth:`~WorkloadSelectors.remove`, :meth:`~WorkloadSelectors.clear`
before a fresh list); a snapshot reads it as it is at the start of a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from coordinator.core.podspec.affinity import label_selector
from coordinator.core.podspec.fields import FieldError
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.podspec.selectors import LabelSelector, Requirement

__all__ = ["CONTROLLER_KINDS", "KINDS", "WorkloadSelectors"]

#: The controller kinds whose selector counts, with the apiVersion their reference must carry.
CONTROLLER_KINDS: Final[Mapping[str, str]] = {
    "ReplicationController": "v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
}

#: Every kind kept.
KINDS: Final = ("Service", *CONTROLLER_KINDS)


def _selector(kind: str, spec: Mapping[str, object]) -> LabelSelector | None:
    """The object's selector; ``None`` for one that selects nothing, or cannot be read (as
    kube-scheduler ignores a selector it cannot parse)."""
    raw = spec.get("selector")
    if kind in ("Service", "ReplicationController"):
        if not isinstance(raw, Mapping) or not raw:
            return None
        return LabelSelector(tuple(sorted((str(k), str(v)) for k, v in raw.items())))
    try:
        return label_selector(raw, "spec.selector")
    except FieldError:
        return None


class WorkloadSelectors:
    """Event-loop only (a cycle reads it between changes)."""

    __slots__ = ("_controllers", "_services")

    def __init__(self) -> None:
        # namespace → Service name → spec.selector (Services without one are not kept)
        self._services: dict[str, dict[str, Mapping[str, str]]] = {}
        # (namespace, kind, name) → the controller's selector as requirements
        self._controllers: dict[tuple[str, str, str], tuple[Requirement, ...]] = {}

    def put(self, kind: str, obj: Mapping[str, object]) -> None:
        """A Service, ReplicationController, ReplicaSet or StatefulSet, added or changed."""
        meta = obj.get("metadata")
        spec = obj.get("spec")
        meta = meta if isinstance(meta, Mapping) else {}
        spec = spec if isinstance(spec, Mapping) else {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        selector = _selector(kind, spec)
        if kind == "Service":
            self.set_service(
                namespace, name, None if selector is None else dict(selector.match_labels)
            )
        else:
            self.set_controller(namespace, kind, name, selector)

    def remove(self, kind: str, namespace: str, name: str) -> None:
        if kind == "Service":
            self.set_service(namespace, name, None)
        else:
            self.set_controller(namespace, kind, name, None)

    def set_service(self, namespace: str, name: str, selector: Mapping[str, str] | None) -> None:
        """A Service's ``spec.selector`` (``None``: deleted, or a Service without a selector,
        which selects no pod)."""
        if selector is None:
            services = self._services.get(namespace)
            if services is not None:
                services.pop(name, None)
                if not services:
                    del self._services[namespace]
            return
        self._services.setdefault(namespace, {})[name] = dict(selector)

    def set_controller(
        self, namespace: str, kind: str, name: str, selector: LabelSelector | None
    ) -> None:
        """A controller's selector (``None``: deleted, or a selector that selects nothing)."""
        if selector is None:
            self._controllers.pop((namespace, kind, name), None)
            return
        requirements = tuple(Requirement(k, "In", (v,)) for k, v in selector.match_labels)
        self._controllers[(namespace, kind, name)] = requirements + selector.match_expressions

    def clear(self, kind: str) -> None:
        """Forget every object of ``kind`` (``Service`` or a controller kind): before a fresh
        list."""
        if kind == "Service":
            self._services.clear()
        else:
            for key in [k for k in self._controllers if k[1] == kind]:
                del self._controllers[key]

    def default_selector(self, pod: PodRequest) -> LabelSelector | None:
        """The selector kube-scheduler's default spreading counts ``pod``'s siblings with."""
        labels: dict[str, str] = {}
        for selector in (self._services.get(pod.namespace) or {}).values():
            if all(pod.labels.get(k) == v for k, v in selector.items()):
                labels.update(selector)
        extra: tuple[Requirement, ...] = ()
        ref = pod.controller
        if ref is not None and CONTROLLER_KINDS.get(ref.kind) == ref.api_version:
            extra = self._controllers.get((pod.namespace, ref.kind, ref.name), ())
        if not labels and not extra:
            return None
        return LabelSelector(tuple(sorted(labels.items())), extra)
