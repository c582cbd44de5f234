"""Runs the NeuroNetes controller (:mod:`coordinator.neuronetes.kube`) inside the coordinator, as a
``cleanup_ctx``: where the backend has AgentPools (an API server: the ``agentpools`` budget of its
connection), unless the ``neuronetes`` section turns it off; it writes only while this
coordinator leads. Pools of the ``neuronetes`` namespace, else the scheduler's.

The policies' inputs come from here: the nodes (labels, GPUs, cached models) from the inventory,
the price table from ``scheduling.prices``, and — with ``neuronetes.carbonIntensity`` — region
intensities, read by a task of their own every ``refreshSeconds`` while this coordinator leads and
pushed into the scheduler's ``CarbonReadings`` (``app[RUNNING].carbon``, PoolPlacement's)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from functools import partial

from aiohttp import web

from common import podkeys
from common.podkeys import GPU_RESOURCE
from coordinator.api.keys import INVENTORY, READINESS
from coordinator.app.backend import Backend
from coordinator.app.config.sections import Config
from coordinator.app.leadership import LEADER
from coordinator.app.scheduler import RUNNING
from coordinator.core.podspec.tolerations import Taint
from coordinator.inventory.state import NodeState
from coordinator.neuronetes.decide.hooks import NodeFacts
from coordinator.neuronetes.decide.policy.carbon import Intensities
from coordinator.neuronetes.kube.carbon_source import IntensitySource
from coordinator.neuronetes.kube.controller import NeuronetesController

log = logging.getLogger(__name__)

__all__ = ["install_neuronetes"]


def _context(config: Config, backend: Backend) -> Callable[[web.Application], AsyncIterator[None]]:
    settings = config.neuronetes

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        inventory = app[INVENTORY]

        def node_labels() -> Iterator[Mapping[str, str]]:
            return (node.labels for node in inventory.nodes())

        wanted = config.scheduler.node_filter()

        def node_facts() -> dict[str, NodeFacts]:
            # Nodes with a Node object (an agent still reporting after its Node was deleted
            # does not make the node exist); only those the scheduler may use.
            return {
                n.name: _facts(n)
                for n in inventory.nodes()
                if n.ready is not None and (wanted is None or wanted(n))
            }

        elector = app.get(LEADER)
        leading = elector.is_leader if elector is not None else lambda: True
        source = None
        if settings.carbon_intensity is not None:
            source = IntensitySource(
                settings.carbon_intensity.source, timeout_s=settings.carbon_intensity.timeout_s
            )

        def intensities() -> Intensities | None:
            return None if source is None else source.state

        controller = backend.agentpools(
            partial(
                NeuronetesController,
                settings=settings,
                namespace=settings.namespace or config.scheduler.namespace,
                node_labels=node_labels,
                node_facts=node_facts,
                active=leading,
                instance=elector.identity if elector is not None else "topos",
                # The scheduler's AgentPool profile (coordinator/app/config/scheduling.py).
                scheduler_name=podkeys.AGENT_POOL_SCHEDULER_NAME,
                policy_inputs={
                    "prices": lambda: app[RUNNING].prices,  # live reloads included
                    "intensities": intensities,
                    "clock": time.monotonic,
                },
                ready=[app[READINESS].reached("inventory")],
            )
        )
        if controller is None:  # no AgentPools where this cluster lives
            yield
            return
        tasks = [asyncio.create_task(controller.run(), name="neuronetes")]
        if source is not None and settings.carbon_intensity is not None:
            every = settings.carbon_intensity.refresh_s
            tasks.append(
                asyncio.create_task(_refresh(app, source, every, leading), name="carbon-intensity")
            )
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    return ctx


def _facts(node: NodeState) -> NodeFacts:
    gpus = len(node.topology.gpus) if node.topology is not None else 0
    gpus = gpus or node.allocatable.get("nvidia.com/gpu", 0)
    return NodeFacts(
        labels=node.labels,
        gpus=gpus,
        models=node.cached_models,
        taints=tuple(Taint(t.key, t.value or "", t.effect) for t in node.taints),
        free={**node.free, GPU_RESOURCE: node.free_gpus},
    )


async def _refresh(
    app: web.Application, source: IntensitySource, every_s: float, leading: Callable[[], bool]
) -> None:
    """Read the intensity source every ``every_s`` while leading (at once on becoming leader)
    and hand the scheduler the last good values; the controller reads ``source.state``."""
    due = 0.0
    was_leading = False
    while True:
        now = time.monotonic()
        is_leading = leading()
        if is_leading and (now >= due or not was_leading):
            state = await source.refresh()
            if state.error:
                log.warning("carbon intensity: %s", state.describe(time.monotonic()))
            app[RUNNING].carbon.update(state.values)
            due = time.monotonic() + every_s
        was_leading = is_leading
        await asyncio.sleep(min(1.0, every_s))


def install_neuronetes(app: web.Application, config: Config, backend: Backend) -> None:
    if config.neuronetes.enabled is False:
        log.info("the NeuroNetes controller is off (neuronetes.enabled: false)")
        return
    app.cleanup_ctx.append(_context(config, backend))
