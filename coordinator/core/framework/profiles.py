"""The profiles one scheduler serves, by ``schedulerName`` (kube-scheduler's ``profiles:``).

Each :class:`~.profile.Framework` is one profile; a pod is scheduled by the profile its
``spec.schedulerName`` names. The profiles share the scheduler's one queue and one snapshot, as
kube-scheduler's do; each keeps its own results in the snapshot's memo (keys are per profile).
The first profile is the default: what-if requests (``plan``) of pods naming none use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from coordinator.core.framework.profile import Framework

__all__ = ["Profiles", "scheduler_name_of"]


class Profiles:
    """Frameworks by ``schedulerName``, in the order given (the first is the default)."""

    def __init__(self, frameworks: Iterable[Framework]) -> None:
        self._by_name: dict[str, Framework] = {}
        for fw in frameworks:
            if fw.name in self._by_name:
                raise ValueError(f"schedulerName {fw.name!r}: two profiles have this name")
            self._by_name[fw.name] = fw
        if not self._by_name:
            raise ValueError("profiles: at least one is needed")

    @property
    def names(self) -> tuple[str, ...]:
        """Every ``schedulerName`` served, the default's first."""
        return tuple(self._by_name)

    @property
    def default(self) -> Framework:
        return next(iter(self._by_name.values()))

    def get(self, name: str) -> Framework | None:
        return self._by_name.get(name)

    def for_name(self, name: str | None) -> Framework:
        """The profile named ``name``, else the default."""
        fw = self._by_name.get(name) if name is not None else None
        return fw if fw is not None else self.default

    def for_pod(self, obj: Mapping[str, Any]) -> Framework:
        """The profile a pod object's ``spec.schedulerName`` names (else the default)."""
        return self.for_name(scheduler_name_of(obj))

    def __iter__(self) -> Iterator[Framework]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)


def scheduler_name_of(obj: Mapping[str, Any]) -> str | None:
    """A pod object's ``spec.schedulerName`` (``None``: not given)."""
    spec = obj.get("spec")
    name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) else None
