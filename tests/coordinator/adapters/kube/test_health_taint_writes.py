"""The DeviceTaintRule writer over a stand-in client: a follower writes nothing and a new leader
reconciles (the missing rule created, its stale one deleted, an operator's left alone); a rule
written is not written again before the watch shows it; where the API does not serve
DeviceTaintRules it says so once and writes nothing; a rule of someone else's under the name
Topos would use is named in the log and left alone."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import pytest

from common.kube import AlreadyExists, NotFound
from common.wire import gpu_state
from coordinator.adapters.kube.healthtaints import NOT_SERVED, HealthTaintWriter
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.core.dra.healthtaints import MANAGED_BY, OWNER
from coordinator.inventory.store import Inventory
from devcluster.dra import DRIVER
from tests.support.dra import memory_dra_node


class Client:
    """Records writes; ``refuse`` maps a verb to the error it raises."""

    def __init__(self, refuse: dict[str, Exception] | None = None) -> None:
        self.refuse = refuse or {}
        self.created: list[dict[str, Any]] = []
        self.replaced: list[str] = []
        self.deleted: list[str] = []
        self.listed = 0

    def _maybe(self, verb: str) -> None:
        if verb in self.refuse:
            raise self.refuse[verb]

    async def list(self, resource: Any, **kw: Any) -> dict[str, Any]:
        self.listed += 1
        self._maybe("list")
        return {"items": [], "resourceVersion": "1", "metadata": {}}

    async def create(self, resource: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        self._maybe("create")
        self.created.append(body)
        return body

    async def replace(self, resource: Any, name: str, body: dict[str, Any], **kw: Any) -> Any:
        self.replaced.append(name)
        return body

    async def delete(self, resource: Any, name: str, **kw: Any) -> dict[str, Any]:
        self.deleted.append(name)
        return {}


def rule(name: str, device: str, *, owner: str | None = OWNER) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {MANAGED_BY: owner} if owner else {}},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": "n1", "device": device},
            "taint": {"key": "topos.io/gpu-unhealthy", "value": "xid-79", "effect": "NoSchedule"},
        },
    }


def cluster(*, sick: int | None = 3) -> MemoryCluster:
    """Node n1 (dgx-a100) with its slice published and, ``sick``, that GPU lost to XID 79."""
    c = MemoryCluster(Inventory())
    topology = memory_dra_node(c, "n1", "dgx-a100")
    if sick is not None:
        gpus = list(topology.gpus)
        gpus[sick] = msgspec.structs.replace(gpus[sick], healthy=False, health_reason="XID 79")
        c.inventory.apply_delta(
            "n1", seq=1, gpus=tuple(gpu_state(g) for g in gpus), allocations=None
        )
    return c


def writer(c: MemoryCluster, client: Client, leads: list[bool]) -> HealthTaintWriter:
    return HealthTaintWriter(
        client,  # type: ignore[arg-type]
        c.inventory,
        c.dra.store,
        effect="NoExecute",
        active=lambda: leads[0],
    )


async def test_a_follower_writes_nothing_and_a_new_leader_reconciles() -> None:
    c = cluster()
    c.dra.put("DeviceTaintRule", rule("topos-gpu-unhealthy.n1.gpu-5", "gpu-5"))  # stale
    c.dra.put("DeviceTaintRule", rule("upkeep", "gpu-6", owner=None))  # an operator's
    client, leads = Client(), [False]
    w = writer(c, client, leads)
    await w.round()
    assert (client.created, client.deleted, client.listed) == ([], [], 0)

    leads[0] = True
    await w.round()
    assert [o["metadata"]["name"] for o in client.created] == ["topos-gpu-unhealthy.n1.gpu-3"]
    assert client.created[0]["spec"]["taint"]["effect"] == "NoExecute"
    assert client.deleted == ["topos-gpu-unhealthy.n1.gpu-5"]

    await w.round()  # the watch has shown nothing yet: nothing is written twice
    assert len(client.created) == 1
    assert client.deleted == ["topos-gpu-unhealthy.n1.gpu-5"]
    assert client.replaced == []


async def test_where_the_api_is_not_served_it_says_so_once_and_writes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = Client(refuse={"list": NotFound("404 devicetaintrules")})
    w = writer(cluster(), client, [True])
    with caplog.at_level(logging.WARNING):
        await w.round()
        await w.round()
    assert client.created == []
    assert [r.getMessage() for r in caplog.records].count(NOT_SERVED) == 1
    assert w.idle == NOT_SERVED
    assert client.listed == 1  # asked again only after probe_s


async def test_someone_elses_rule_under_our_name_is_named_and_left_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = cluster()
    c.dra.put("DeviceTaintRule", rule("topos-gpu-unhealthy.n1.gpu-3", "gpu-0", owner=None))
    client = Client(refuse={"create": AlreadyExists("exists")})
    with caplog.at_level(logging.WARNING):
        await writer(c, client, [True]).round()
    assert (client.deleted, client.replaced) == ([], [])
    text = caplog.text
    assert "DeviceTaintRule topos-gpu-unhealthy.n1.gpu-3 exists and is not Topos's" in text
    assert f"device {DRIVER}/n1/gpu-3 topos.io/gpu-unhealthy=xid-79:NoExecute" in text


async def test_a_healthy_cluster_has_no_rules_of_ours() -> None:
    c = cluster(sick=None)
    c.dra.put("DeviceTaintRule", rule("topos-gpu-unhealthy.n1.gpu-3", "gpu-3"))
    client = Client()
    await writer(c, client, [True]).round()
    assert client.created == []
    assert client.deleted == ["topos-gpu-unhealthy.n1.gpu-3"]
