"""An agent's capacity-stream client fed by a hardware profile's fake NVML, for tests that stream
to a running coordinator (the agent process without its Kubernetes side)."""

from __future__ import annotations

import asyncio

from agent.devices import ProfileSource
from agent.stream import StreamClient, StreamSettings
from devcluster.nodes import SimNode

FAST = StreamSettings(heartbeat_interval_s=0.2, backoff_initial_s=0.05, backoff_max_s=0.2)


class SimAgent:
    """An agent's stream client fed by a profile's fake NVML."""

    def __init__(self, url: str, node: SimNode) -> None:
        self.source = ProfileSource(node.profile, hostname=node.name)
        self.client = StreamClient(
            url.replace("http://", "ws://") + "/v1/agents/stream",
            node.name,
            agent_version="test",
            settings=FAST,
        )
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.client.publish(self.source.discover())
        self.task = asyncio.create_task(self.client.run())
        async with asyncio.timeout(60):
            await self.client.connected.wait()

    async def stop(self) -> None:
        await self.client.close()
        if self.task is not None:
            await self.task
        self.source.close()
