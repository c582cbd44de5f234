"""Reading load signals over HTTP: the serving pods' ``/metrics`` (Prometheus text) or a
Prometheus server's query API (``/api/v1/query``). Every failure — refused, timed out, an HTTP
error, a body that is not the signals — raises :class:`~coordinator.neuronetes.decide.signals.
SignalError` with the URL in its message."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import aiohttp
from yarl import URL

from coordinator.neuronetes.decide.pool import PoolSpec
from coordinator.neuronetes.decide.replicas import OwnedPod
from coordinator.neuronetes.decide.scaling import LagSignal, TokenSignals
from coordinator.neuronetes.decide.signals import RateTracker, SignalError, pod_sample, queue_depth

__all__ = ["DEFAULT_QUEUE_METRIC", "binding_lag", "pool_tokens"]

DEFAULT_QUEUE_METRIC: Final = "rabbitmq_queue_messages_ready"
_DEFAULT_URL: Final = "http://{podIP}:{port}{path}"


async def _get(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    try:
        async with asyncio.timeout(timeout_s):
            async with session.get(url) as response:
                if response.status != 200:
                    raise SignalError(f"{url} answered HTTP {response.status}")
                return await response.text()
    except TimeoutError:
        raise SignalError(f"{url} did not answer within {timeout_s:g}s") from None
    except (aiohttp.ClientError, UnicodeDecodeError, ValueError) as exc:
        raise SignalError(f"{url}: {exc or type(exc).__name__}") from None


async def prometheus_query(
    session: aiohttp.ClientSession, base: str, query: str, timeout_s: float
) -> float:
    """The sum of an instant query's values."""
    url = f"{base.rstrip('/')}/api/v1/query"
    text = await _get(session, str(URL(url).with_query(query=query)), timeout_s)
    try:
        reply: Any = json.loads(text)
        data = reply["data"]
        if reply.get("status") != "success":
            raise SignalError(f"{url}: {reply.get('error') or 'query failed'}")
        if data["resultType"] == "scalar":
            return float(data["result"][1])
        return sum(float(item["value"][1]) for item in data["result"])
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise SignalError(f"{url}: not a Prometheus query reply ({exc})") from None


def _pod_url(pool: PoolSpec, pod: OwnedPod) -> str | None:
    metrics = pool.autoscaling.metrics if pool.autoscaling else None
    if metrics is None:
        return None
    template = metrics.url or _DEFAULT_URL
    if "{podIP}" in template and not pod.ip:
        return None  # not running yet: nothing to read
    try:
        return template.format(
            podIP=pod.ip or "",
            port=pod.metrics_port or metrics.port,
            path=pod.metrics_path or metrics.path,
            pod=pod.name,
            namespace=pool.namespace,
            pool=pool.name,
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise SignalError(f"spec.autoscaling.metrics.url {template!r}: {exc}") from None


async def pool_tokens(
    session: aiohttp.ClientSession,
    pool: PoolSpec,
    pods: Sequence[OwnedPod],
    rates: RateTracker,
    *,
    prometheus_url: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> TokenSignals | None:
    """The pool's queued tokens and one replica's throughput; None until a rate is known.
    ``clock`` (seconds) times the pods' counters."""
    scaling = pool.autoscaling
    if scaling is None:
        return None
    metrics = scaling.metrics
    if metrics.source == "prometheus":
        return await _prometheus_tokens(session, pool, pods, prometheus_url)
    live = [p for p in pods if p.live and p.node is not None]
    targets = [(p, _pod_url(pool, p)) for p in live]
    reads = [(p, u) for p, u in targets if u is not None]
    texts = await asyncio.gather(*(_get(session, u, metrics.timeout_s) for _, u in reads))
    now = clock()
    queued, per_pod = 0.0, []
    for (pod, url), text in zip(reads, texts, strict=True):
        try:
            sample = pod_sample(text, scaling.tokens_per_request)
        except SignalError as exc:
            raise SignalError(f"{url} (pod {pod.name}): {exc}") from None
        queued += sample.tokens_in_queue
        if sample.tokens_total is not None:
            rate = rates.rate(pod.uid, now, sample.tokens_total)
            if rate is not None:
                per_pod.append(rate)
    rates.forget_except({p.uid for p, _ in reads})
    measured = [r for r in per_pod if r > 0]
    tps = sum(measured) / len(measured) if measured else scaling.tokens_per_second_per_replica
    if tps is None or not reads:
        return None
    return TokenSignals(tokens_in_queue=queued, tokens_per_second=tps)


def _fill(query: str, pool: PoolSpec) -> str:
    return query.replace("{namespace}", pool.namespace).replace("{pool}", pool.name)


async def _prometheus_tokens(
    session: aiohttp.ClientSession,
    pool: PoolSpec,
    pods: Sequence[OwnedPod],
    default_url: str | None,
) -> TokenSignals | None:
    assert pool.autoscaling is not None
    metrics = pool.autoscaling.metrics
    base = metrics.prometheus_url or default_url
    if not base:
        raise SignalError("metrics.source is prometheus but no prometheusUrl is configured")
    where = '{namespace="{namespace}",pod=~"{pool}-.*"}'
    queue_q = metrics.queue_tokens_query or (
        f"sum(vllm:num_requests_waiting{where}) * {pool.autoscaling.tokens_per_request:g}"
    )
    rate_q = metrics.tokens_per_second_query or (
        f"sum(rate(vllm:prompt_tokens_total{where}[1m]))"
        f" + sum(rate(vllm:generation_tokens_total{where}[1m]))"
    )
    queued, pool_rate = await asyncio.gather(
        prometheus_query(session, base, _fill(queue_q, pool), metrics.timeout_s),
        prometheus_query(session, base, _fill(rate_q, pool), metrics.timeout_s),
    )
    replicas = sum(1 for p in pods if p.live and p.node is not None)
    if replicas and pool_rate > 0 and math.isfinite(pool_rate):
        tps: float | None = pool_rate / replicas
    else:
        tps = pool.autoscaling.tokens_per_second_per_replica
    return None if tps is None else TokenSignals(tokens_in_queue=queued, tokens_per_second=tps)


def _positive(value: object, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


async def binding_lag(
    session: aiohttp.ClientSession,
    binding: Mapping[str, Any],
    *,
    prometheus_url: str | None = None,
) -> LagSignal | None:
    """The binding's queue as a lag signal; None when it does not scale on lag."""
    spec = binding.get("spec") or {}
    queue = spec.get("queueConfig") or {}
    if not queue.get("autoscaleOnLag"):
        return None
    name = str((binding.get("metadata") or {}).get("name"))
    metrics = queue.get("metrics") or {}
    timeout = _positive(metrics.get("timeoutSeconds"), 2.0)
    if metrics.get("url"):
        text = await _get(session, str(metrics["url"]), timeout)
        depth = queue_depth(text, str(metrics.get("metric") or DEFAULT_QUEUE_METRIC))
    elif metrics.get("query") and (metrics.get("prometheusUrl") or prometheus_url):
        base = str(metrics.get("prometheusUrl") or prometheus_url)
        depth = await prometheus_query(session, base, str(metrics["query"]), timeout)
    else:
        raise SignalError("spec.queueConfig.metrics names no url (or prometheusUrl and query)")
    return LagSignal(
        binding=name,
        queue_depth=depth,
        prefetch=_positive(queue.get("prefetch"), 1.0),
        throughput=_positive(queue.get("throughput"), 1.0),
        max_lag=float(queue.get("maxLagThreshold") or 0),
    )
