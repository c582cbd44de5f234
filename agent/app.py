"""The node agent (``topos agent`` / ``topos-agent``, docs/design.md §2, §3, §8).

One event loop runs:

- the **discovery cycle**: discover (NVML or a profile's fake NVML, in a worker thread), mark
  GPUs that NVML events condemned, compute labels, publish them to the agent's Node (a GET, and a
  PATCH only when something changed), hand the snapshot and the kubelet's allocations to the
  stream client. It runs every ``--interval`` seconds and at once after an NVML event;
- the **NVML event watcher** (XID / lost GPU → that GPU unhealthy);
- the **stream client** to the coordinator, when ``--coordinator`` is given;
- an **HTTP server** (aiohttp) with ``/healthz``, ``/readyz`` and ``/metrics``.

``--once`` runs one discovery cycle, publishes and exits; nothing else starts.

This module wires the parts together: ``settings`` (flags), ``hardware`` (NVML or a profile),
``cycle`` (the ``Agent``), ``endpoints`` (HTTP), ``stream`` and ``publish``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import aiohttp

from agent.cycle import Agent
from agent.endpoints import serve_http
from agent.hardware import Hardware, open_hardware
from agent.health import NvmlEventWatcher
from agent.kube import KubeNodeApi
from agent.podresources import PodResourcesClient
from agent.publish import NodeNotFound, NodePublisher
from agent.settings import AgentError, AgentSettings, add_arguments, settings_from_args, stream_url
from agent.stream import StreamClient, StreamSettings
from common.kube import ClientSettings, KubeClient, KubeError
from common.labeling import labels
from common.logs import setup_logging

log = logging.getLogger("topos.agent")

AGENT_VERSION: Final = "0.1.0"


async def _read_token(path: str | None) -> str | None:
    if not path:
        return None

    def read() -> str | None:
        try:
            return Path(path).read_text().strip() or None
        except FileNotFoundError:
            return None

    return await asyncio.to_thread(read)


async def _connect(settings: AgentSettings) -> KubeClient:
    try:
        return await KubeClient.connect(
            settings.kubeconfig, settings=ClientSettings(field_manager="topos-agent")
        )
    except KubeError as exc:
        raise AgentError(str(exc)) from None


async def run(settings: AgentSettings) -> int:
    """Run the agent with ``settings`` until SIGTERM/SIGINT (or one cycle with ``once``)."""
    hardware = await asyncio.to_thread(
        open_hardware,
        settings.profile,
        hostname=None if settings.dry_run else settings.node_name,
        sysfs_root=settings.sysfs_root,
    )
    try:
        return await _run_with(settings, hardware)
    finally:
        if hardware.close is not None:
            await asyncio.to_thread(hardware.close)


async def _run_with(settings: AgentSettings, hardware: Hardware) -> int:
    source = hardware.source
    if settings.dry_run:
        try:
            topology = await asyncio.to_thread(source.discover)
        except Exception as exc:
            raise AgentError(f"discovery failed: {type(exc).__name__}: {exc}") from None
        desired = labels(topology, settings.labeling)
        print(
            json.dumps(
                {"labels": dict(desired.labels), "annotations": dict(desired.annotations)},
                indent=2,
                sort_keys=True,
            )
        )
        return 0

    kube = await _connect(settings)
    podresources = (
        PodResourcesClient(settings.podresources_socket) if settings.podresources_socket else None
    )
    try:
        publisher = NodePublisher(KubeNodeApi(kube), settings.node_name)
        if settings.once:
            agent = Agent(settings, source=source, publisher=publisher)
            try:
                result = await agent.cycle()
            except NodeNotFound as exc:
                raise AgentError(str(exc)) from None
            except KubeError as exc:
                raise AgentError(
                    f"publishing to node {settings.node_name!r} failed: {exc}"
                ) from None
            except Exception as exc:
                raise AgentError(f"discovery failed: {type(exc).__name__}: {exc}") from None
            assert result.publish is not None
            print(
                f"node {settings.node_name}: {len(result.labels.labels)} labels, "
                f"{len(result.labels.annotations)} annotations, "
                + (
                    f"patched ({len(result.publish.added)} added, {len(result.publish.changed)} "
                    f"changed, {len(result.publish.removed)} removed)"
                    if result.publish.patched
                    else "unchanged"
                )
            )
            return 0
        return await _run_forever(settings, hardware, publisher, podresources)
    finally:
        if podresources is not None:
            await podresources.close()
        await kube.close()


async def _run_forever(
    settings: AgentSettings,
    hardware: Hardware,
    publisher: NodePublisher,
    podresources: PodResourcesClient | None,
) -> int:
    agent = Agent(settings, source=hardware.source, publisher=publisher, podresources=podresources)
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, agent.stop)
            installed.append(sig)
    try:
        await serve(agent, nvml=hardware.nvml)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
    return 0


async def serve(agent: Agent, *, nvml: Any = None) -> None:
    """Run ``agent`` until ``agent.stop()``: discovery cycles, the NVML event watcher (when
    ``nvml`` is given), the stream client (``--coordinator``) and the HTTP endpoints."""
    settings = agent.settings
    async with contextlib.AsyncExitStack() as stack:
        stream: StreamClient | None = None
        if settings.coordinator:
            stream = await _open_stream(settings, agent, stack)
        watcher = NvmlEventWatcher(nvml) if nvml is not None else None
        await stack.enter_async_context(serve_http(agent, settings.listen))
        async with asyncio.TaskGroup() as tasks:
            if stream is not None:
                tasks.create_task(stream.run())
            if watcher is not None:
                tasks.create_task(_watch(watcher, agent))
            log.info(
                "agent started",
                extra={
                    "node": settings.node_name,
                    "profile": settings.profile,
                    "coordinator": settings.coordinator,
                    "interval_s": settings.interval_s,
                },
            )
            try:
                await agent.run_cycles()
            finally:
                if watcher is not None:
                    watcher.stop()
                if stream is not None:
                    await stream.close()
    log.info("agent stopped", extra={"node": settings.node_name})


async def _open_stream(
    settings: AgentSettings, agent: Agent, stack: contextlib.AsyncExitStack
) -> StreamClient:
    assert settings.coordinator is not None
    token = await _read_token(settings.token_file)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = await asyncio.to_thread(_ssl_context, settings.coordinator_ca)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=context) if context is not None else None
    )
    stack.push_async_callback(session.close)
    stream = StreamClient(
        stream_url(settings.coordinator),
        settings.node_name,
        agent_version=AGENT_VERSION,
        settings=StreamSettings(headers=headers),
        session=session,
        on_state=agent.metrics.set_stream_state,
    )
    agent.stream = stream
    agent.metrics.set_stream_state(stream.state)
    return stream


def _ssl_context(ca_file: str | None) -> ssl.SSLContext | None:
    """A context trusting ``ca_file`` when it exists (it is an optional mount)."""
    if ca_file is None or not Path(ca_file).is_file():
        return None
    return ssl.create_default_context(cafile=ca_file)


async def _watch(watcher: NvmlEventWatcher, agent: Agent) -> None:
    """Run the NVML event watcher; if NVML can't do events, say so once and carry on."""
    try:
        await watcher.run(agent.on_event)
    except Exception as exc:
        log.warning(
            "NVML events unavailable; health comes from discovery only", extra={"error": str(exc)}
        )


def run_from_args(args: argparse.Namespace) -> int:
    """Set up logging, run, and turn user errors into ``AgentError`` (one line)."""
    settings = settings_from_args(args)
    setup_logging(level=args.log_level)
    return asyncio.run(run(settings))


def main(argv: Sequence[str] | None = None) -> int:
    """``topos-agent``: the same flags as ``topos agent``."""
    parser = argparse.ArgumentParser(prog="topos-agent", description="The Topos node agent.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except AgentError as exc:
        if args.debug:
            raise
        print(f"topos-agent: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
