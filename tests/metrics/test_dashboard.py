"""The Grafana dashboard in ``deploy/grafana/``: valid JSON Grafana can import, every panel on a
Prometheus datasource variable, and every metric its expressions name is exported by a
coordinator that has scheduled something (with both seed sets on, as by default) — no panel
stays empty because of a typo or a renamed metric."""

from __future__ import annotations

from devcluster.pods import gpu_pod
from tests.support.grafana import dashboard, expressions, metric_names
from tests.support.metrics_coordinator import (
    MakeClient,
    coordinator,
    scrape,
    settle,
    two_leaf_cluster,
)


def test_the_expression_reader_finds_metrics_and_nothing_else() -> None:
    expr = 'histogram_quantile(0.99, sum by (le) (rate(a_bucket{tier="leaf"}[5m]))) / on() b_total'
    assert metric_names(expr) == {"a_bucket", "b_total"}


def test_every_panel_has_a_query_on_the_prometheus_variable() -> None:
    doc = dashboard()
    assert doc["uid"] == "topos-scheduler"
    assert [v["name"] for v in doc["templating"]["list"]] == ["datasource"]
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]


async def test_every_metric_the_dashboard_names_is_exported(aiohttp_client: MakeClient) -> None:
    cluster = two_leaf_cluster()
    client, app = await coordinator(aiohttp_client, cluster)
    cluster.create_pod(gpu_pod("a", 4, namespace="default"))
    await settle(app)
    exported = (await scrape(client)).names()
    named = set().union(*(metric_names(e) for e in expressions(dashboard())))
    assert {n for n in named if n.startswith("neuronetes_")}
    assert {n for n in named if n.startswith("topology_")}
    assert named - exported == set()
