"""The port the controller writes through: the reconcile decides (:mod:`..decide`), this says
what it may write, and ``coordinator.adapters.kube.agentpools.AgentPoolWriter`` writes it (given
at wiring time). A write whose object is gone returns ``None`` or nothing; other refusals raise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from common.kube.types import KubeObject

__all__ = ["PoolWrites"]


class PoolWrites(Protocol):
    async def event(
        self, obj: KubeObject, reason: str, message: str, *, warning: bool, instance: str
    ) -> None: ...

    async def status(
        self, obj: KubeObject, status: Mapping[str, Any], *, binding: bool = False
    ) -> KubeObject | None: ...

    async def scale(self, obj: KubeObject, replicas: int) -> KubeObject: ...

    async def priority_class(self, body: KubeObject) -> None: ...

    async def delete_priority_class(self, name: str) -> None: ...

    async def create_pod(self, namespace: str, body: KubeObject) -> KubeObject: ...

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None: ...

    async def set_gates(self, namespace: str, name: str, uid: str, kept: Sequence[str]) -> None: ...
