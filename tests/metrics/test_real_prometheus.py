"""A real Prometheus scrapes an in-memory coordinator every second and answers the seeds' PromQL
and every dashboard query through its HTTP API, as a user's Grafana would ask it. Needs the
``prometheus`` binary (Debian: ``apt-get install prometheus``, as ``.ci/run`` does; or
``TOPOS_PROMETHEUS``): skipped without one, failed under ``CI=true``.
``tests/metrics/test_scheduler_metrics.py`` checks the same meanings from the text format alone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.app.config.sections import Config
from coordinator.app.main import running, wire
from coordinator.app.memory_backend import MemoryBackend
from coordinator.app.scheduler import RUNNING
from devcluster.pods import gpu_pod
from devcluster.processes import free_port
from tests.support.ci import skip_or_fail
from tests.support.grafana import dashboard, expressions
from tests.support.metrics_coordinator import two_leaf_cluster
from tests.support.polling import eventually

PROMETHEUS = os.environ.get("TOPOS_PROMETHEUS") or shutil.which("prometheus")


@contextlib.asynccontextmanager
async def prometheus(target: str, tmp: Path) -> AsyncIterator[str]:
    """A Prometheus scraping ``target`` (host:port) every second; yields its URL."""
    assert PROMETHEUS is not None
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "topos", "static_configs": [{"targets": [target]}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    listen = f"127.0.0.1:{free_port()}"
    log = (tmp / "prometheus.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        PROMETHEUS,
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address={listen}",
        stdout=log,
        stderr=log,
    )
    try:
        yield f"http://{listen}"
    finally:
        proc.terminate()
        await proc.wait()
        log.close()


async def query(http: aiohttp.ClientSession, url: str, expr: str) -> list[dict[str, Any]]:
    async with http.get(f"{url}/api/v1/query", params={"query": expr}) as resp:
        body = await resp.json()
    assert body["status"] == "success", (expr, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def scalar(http: aiohttp.ClientSession, url: str, expr: str) -> float | None:
    result = await query(http, url, expr)
    return float(result[0]["value"][1]) if len(result) == 1 else None


async def test_prometheus_answers_the_seed_queries_and_every_dashboard_panel(
    tmp_path: Path,
) -> None:
    if PROMETHEUS is None:
        skip_or_fail("no prometheus binary (apt-get install prometheus, or TOPOS_PROMETHEUS)")
    cluster: MemoryCluster = two_leaf_cluster()
    app = wire(Config(), MemoryBackend(cluster))
    async with (
        running(app) as coordinator,
        prometheus(coordinator.removeprefix("http://"), tmp_path) as prom,
        aiohttp.ClientSession() as http,
    ):

        async def ready() -> bool:
            with contextlib.suppress(aiohttp.ClientError):
                return await scalar(http, prom, 'up{job="topos"}') == 1.0
            return False

        await eventually(ready, what="Prometheus scraping the coordinator", timeout_s=60)
        for name in ("a", "b", "c"):
            cluster.create_pod(gpu_pod(name, 4, namespace="default"))
        cluster.create_pod(gpu_pod("big", 12, namespace="default"))  # more than any node has
        runtime = app[RUNNING].runtime
        assert runtime is not None
        await runtime.settle()

        async def scraped() -> bool:
            attempts = await scalar(http, prom, "neuronetes_scheduler_attempts_total")
            return attempts == 4.0

        await eventually(scraped, what="the attempts scraped", timeout_s=30)
        await asyncio.sleep(2.5)  # a few more samples, for rate() over the window
        success_rate = await scalar(
            http,
            prom,
            "rate(neuronetes_scheduler_success_total[5m]) / "
            "rate(neuronetes_scheduler_attempts_total[5m])",
        )
        assert success_rate == pytest.approx(0.75)
        assert await scalar(http, prom, "neuronetes_scheduler_pending_pods") == 1.0
        assert await scalar(http, prom, "neuronetes_gpu_utilization_percent") == 75.0
        assert await scalar(http, prom, "topology_gpu_allocation_ratio") == 0.75
        placed = await scalar(
            http, prom, 'sum(increase(topology_placement_decisions_total{result="placed"}[5m]))'
        )
        assert placed is not None
        assert placed >= 3  # increase() extrapolates to the window
        leaves = await query(http, prom, 'topology_domain_utilization_ratio{tier="leaf"}')
        assert sorted(float(r["value"][1]) for r in leaves) == [0.5, 1.0]
        for expr in expressions(dashboard()):
            assert await query(http, prom, expr), f"an empty panel: {expr}"
