"""Runs the NeuroNetes controller (:mod:`coordinator.neuronetes.kube`) inside the coordinator, as a
``cleanup_ctx``: against an API server, unless the ``neuronetes`` section turns it off; it writes
only while this coordinator leads. Pools of the ``neuronetes`` namespace, else the scheduler's."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping

from aiohttp import web

from common.kube import KubeClient
from coordinator.api.keys import INVENTORY
from coordinator.app.backend import Backend, KubeBackend
from coordinator.app.config.sections import Config
from coordinator.app.leadership import LEADER
from coordinator.neuronetes.kube.controller import NeuronetesController

log = logging.getLogger(__name__)

__all__ = ["install_neuronetes"]


def _context(
    config: Config, kubeconfig: str | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    settings = config.neuronetes

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        client = await KubeClient.connect(kubeconfig, settings=config.kube.client_settings())
        inventory = app[INVENTORY]

        def node_labels() -> Iterator[Mapping[str, str]]:
            return (node.labels for node in inventory.nodes())

        elector = app.get(LEADER)
        controller = NeuronetesController(
            client,
            settings,
            namespace=settings.namespace or config.scheduler.namespace,
            node_labels=node_labels,
            active=elector.is_leader if elector is not None else lambda: True,
            instance=elector.identity if elector is not None else "topos",
        )
        task = asyncio.create_task(controller.run(), name="neuronetes")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.close()

    return ctx


def install_neuronetes(app: web.Application, config: Config, backend: Backend) -> None:
    if not isinstance(backend, KubeBackend):
        return  # no API server: no AgentPools
    if config.neuronetes.enabled is False:
        log.info("the NeuroNetes controller is off (neuronetes.enabled: false)")
        return
    app.cleanup_ctx.append(_context(config, backend.kubeconfig))
