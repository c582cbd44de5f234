"""Reading load signals over HTTP from servers of our own: the pods' ``/metrics`` (Prometheus
text), a Prometheus query API, a queue exporter — and what an unreadable one is reported as."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from coordinator.neuronetes.decide.pool import parse_pool
from coordinator.neuronetes.decide.replicas import OwnedPod
from coordinator.neuronetes.decide.signals import RateTracker, SignalError
from coordinator.neuronetes.kube.reconcile import newer
from coordinator.neuronetes.kube.scrape import binding_lag, pool_tokens
from tests.support.http_app import serving

METRICS = """\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 5
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} %d
"""


@contextlib.asynccontextmanager
async def serve(routes: dict[str, Any]) -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    async with serving(app) as url:
        yield url


def _pool(metrics: dict[str, Any]) -> Any:
    spec = {"autoscaling": {"tokensPerRequest": 100, "metrics": metrics}}
    return parse_pool({"metadata": {"name": "chat", "namespace": "ns", "uid": "u"}, "spec": spec})


def _pods(*names: str) -> list[OwnedPod]:
    return [OwnedPod(n, n, 0.0, "node", "Running", False, True, "h", (), "10.0.0.1") for n in names]


async def test_pod_metrics_give_queue_and_a_per_replica_rate() -> None:
    counter = {"value": 0}
    now = [100.0]

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=METRICS % counter["value"])

    async with serve({"/{pod}/metrics": metrics}) as url, aiohttp.ClientSession() as session:
        pool = _pool({"url": url + "/{pod}/metrics"})
        rates = RateTracker()

        async def read() -> Any:
            return await pool_tokens(session, pool, _pods("a", "b"), rates, clock=lambda: now[0])

        assert await read() is None  # no rate yet
        counter["value"] = 100_000
        now[0] += 10.0  # ten seconds later, each pod has served 100,000 prompt tokens
        tokens = await read()
    assert tokens is not None
    assert tokens.tokens_in_queue == 2 * 5 * 100
    assert tokens.tokens_per_second == 10_000  # one replica's rate: 100,000 tokens in 10 s


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [("<html>no</html>{{", 200, "not Prometheus text"), ("", 503, "answered HTTP 503")],
)
async def test_unreadable_endpoints_name_the_url(body: str, status: int, fragment: str) -> None:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=body, status=status)

    async with serve({"/{pod}/metrics": metrics}) as url, aiohttp.ClientSession() as session:
        pool = _pool({"url": url + "/{pod}/metrics"})
        with pytest.raises(SignalError, match=fragment) as caught:
            await pool_tokens(session, pool, _pods("a"), RateTracker())
    assert f"{url}/a/metrics" in str(caught.value)


async def test_a_silent_endpoint_times_out() -> None:
    async def metrics(request: web.Request) -> web.Response:
        await asyncio.sleep(1)
        return web.Response(text="")

    async with serve({"/{pod}/metrics": metrics}) as url, aiohttp.ClientSession() as session:
        pool = _pool({"url": url + "/{pod}/metrics", "timeoutSeconds": 0.2})
        with pytest.raises(SignalError, match=r"did not answer within 0.2s"):
            await pool_tokens(session, pool, _pods("a"), RateTracker())


async def test_prometheus_queries_and_queue_lag() -> None:
    asked: list[str] = []

    async def query(request: web.Request) -> web.Response:
        q = request.query["query"]
        asked.append(q)
        value = "3000" if "waiting" in q else "4000"
        data = {"resultType": "vector", "result": [{"metric": {}, "value": [0, value]}]}
        return web.Response(text=json.dumps({"status": "success", "data": data}))

    async def queue(request: web.Request) -> web.Response:
        return web.Response(text='rabbitmq_queue_messages_ready{queue="q"} 250\n')

    async with (
        serve({"/api/v1/query": query, "/queue": queue}) as url,
        aiohttp.ClientSession() as session,
    ):
        pool = _pool({"source": "prometheus", "prometheusUrl": url})
        tokens = await pool_tokens(session, pool, _pods("a", "b"), RateTracker())
        binding = {
            "metadata": {"name": "tasks"},
            "spec": {
                "queueConfig": {
                    "autoscaleOnLag": True,
                    "maxLagThreshold": 100,
                    "metrics": {"url": url + "/queue"},
                }
            },
        }
        lag = await binding_lag(session, binding)
    assert tokens is not None
    assert (tokens.tokens_in_queue, tokens.tokens_per_second) == (3000, 2000)  # 4000 / 2 pods
    assert 'namespace="ns",pod=~"chat-.*"' in asked[0]
    assert lag is not None
    assert (lag.queue_depth, lag.max_lag) == (250, 100)


async def test_a_pods_prometheus_annotations_choose_port_and_path() -> None:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=METRICS % 0)

    async with serve({"/custom/path": metrics}) as url, aiohttp.ClientSession() as session:
        port = url.rsplit(":", 1)[1]
        pool = _pool({"url": "http://127.0.0.1:{port}{path}", "port": 1, "path": "/metrics"})
        (pod,) = _pods("a")
        pod = dataclasses.replace(pod, metrics_port=port, metrics_path="/custom/path")
        tokens = await pool_tokens(session, pool, [pod], RateTracker())
    # Read without error (the spec's port 1 would refuse); no rate after a single reading.
    assert tokens is None


def test_the_controller_reads_its_own_write_until_the_watch_catches_up() -> None:
    def pool(rv: str, replicas: int, uid: str = "u") -> dict[str, Any]:
        return {"metadata": {"uid": uid, "resourceVersion": rv}, "spec": {"replicas": replicas}}

    written = pool("120", 3)
    assert newer(pool("100", 1), written) is written  # the watch has not brought it yet
    caught_up = pool("130", 3)
    assert newer(caught_up, written) is caught_up
    assert newer(pool("140", 1, uid="other"), written)["metadata"]["uid"] == "other"  # recreated
    assert newer(None, written) is None  # deleted
