"""The Volcano/KAI PodGroup status writer: Volcano's status patched on the object (its CRD has no
status subresource), KAI's through ``status``; a write only per change; members counted across
every profile's watch (one profile's list does not wipe another's); the ignored-fields Event
posted once per PodGroup, and not at all when one is already there (a restart, a new leader)."""

from __future__ import annotations

from typing import Any

from coordinator.adapters.kube.foreigngroups import ForeignGroupStatusWriter
from coordinator.core.gangs.foreigngroups import KAI, VOLCANO, foreign_group_key
from devcluster import pods


class Client:
    """Stands in for the client: records patches and Event writes; lists ``events``."""

    def __init__(self, events: list[dict[str, Any]] | None = None) -> None:
        self.patches: list[tuple[str, str, str | None, dict[str, Any]]] = []
        self.created: list[dict[str, Any]] = []
        self.events = events or []

    async def patch(self, resource: Any, name: str, body: dict[str, Any], **kw: Any) -> Any:
        if resource.plural == "events":
            return body
        self.patches.append((resource.group, name, kw.get("subresource"), body["status"]))
        return {}

    async def list(self, resource: Any, **kw: Any) -> dict[str, Any]:
        assert resource.plural == "events"
        return {"items": self.events, "resourceVersion": "1", "continue": ""}

    async def create(self, resource: Any, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        self.created.append(body)
        return {**body, "metadata": {**body.get("metadata", {}), "name": "e1"}}


def member(name: str, annotation: str, group: str, scheduler: str, node: str) -> dict[str, Any]:
    obj = pods.pod(name, namespace="ml", node=node, uid=f"uid-{name}", scheduler=scheduler)
    obj["metadata"]["annotations"] = {annotation: group}
    return obj


def writer(client: Client, groups: dict[str, Any]) -> ForeignGroupStatusWriter:
    return ForeignGroupStatusWriter(
        client,  # type: ignore[arg-type]
        groups=groups,
        gangs=lambda: (),
        scheduler_names=("topos", "topos-agentpools"),
        now=lambda: "2026-11-29T10:00:00Z",
    )


def podgroup(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ml", "name": name, "uid": f"uid-{name}"}, "spec": spec}


async def test_each_kind_is_written_where_its_crd_takes_it_once_per_change() -> None:
    client = Client()
    volcano = podgroup("tf", {"minMember": 2, "queue": "research"})
    kai = podgroup("llm", {"minMember": 2, "queue": "default-queue"})
    groups = {
        "volcano": {foreign_group_key(VOLCANO, "ml", "tf"): volcano},
        "kai": {foreign_group_key(KAI, "ml", "llm"): kai},
    }
    w = writer(client, groups)
    w.members["topos"].replace(
        [
            member("tf-0", VOLCANO.annotation, "tf", "topos", "n1"),
            member("llm-0", KAI.annotation, "llm", "topos", ""),
        ]
    )
    # The other profile's list, later and empty, must not wipe the first one's members.
    w.members["topos-agentpools"].replace(
        [member("tf-1", VOLCANO.annotation, "tf", "topos-agentpools", "n2")]
    )
    await w.sync()
    by_group = {(g, sub): status for g, _, sub, status in client.patches}
    assert set(by_group) == {("scheduling.volcano.sh", None), ("scheduling.run.ai", "status")}
    assert by_group["scheduling.volcano.sh", None]["phase"] == "Running"  # 2 of 2 bound
    [waiting] = by_group["scheduling.run.ai", "status"]["schedulingConditions"]
    assert waiting["message"] == "1 of 2 members exist"

    await w.sync()  # written already; the watch has not shown it yet
    assert len(client.patches) == 2
    volcano["status"] = by_group["scheduling.volcano.sh", None]
    kai["status"] = by_group["scheduling.run.ai", "status"]
    await w.sync()  # shown now: nothing differs
    assert len(client.patches) == 2

    # One Event per PodGroup, however many passes.
    reasons = sorted((e["involvedObject"]["name"], e["reason"]) for e in client.created)
    assert reasons == [("llm", "QueueIgnored"), ("tf", "QueueIgnored")]


async def test_an_event_already_there_is_not_posted_again() -> None:
    client = Client(events=[{"reason": "QueueIgnored"}])
    group = podgroup("tf", {"minMember": 1, "queue": "research"})
    w = writer(client, {"volcano": {foreign_group_key(VOLCANO, "ml", "tf"): group}, "kai": {}})
    w.members["topos"].replace([member("tf-0", VOLCANO.annotation, "tf", "topos", "n1")])
    await w.sync()
    assert client.created == []
    assert len(client.patches) == 1  # the status is still written
