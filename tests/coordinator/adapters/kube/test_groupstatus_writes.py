"""The PodGroup status writer sends a request only when a status would change: a steady gang
costs nothing, a write the watch has not shown yet is not repeated, a change is written once."""

from __future__ import annotations

from typing import Any

from common.kube import POD_GROUPS
from coordinator.adapters.kube.groupstatus import PodGroupStatusWriter
from coordinator.core.gangs.manager import GangStatus
from devcluster import pods


class Recorder:
    """Stands in for the client: records status patches (the writer sends nothing else)."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def patch(self, resource: Any, name: str, body: dict[str, Any], **kw: Any) -> Any:
        assert resource is POD_GROUPS
        assert kw["subresource"] == "status"
        self.patches.append((name, body["status"]))
        return {}


def gang(phase: str, message: str) -> GangStatus:
    return GangStatus(
        namespace="ml",
        name="train",
        uid="",
        source="podgroup",
        phase=phase,
        min_member=2,
        members=2,
        reserved=0,
        bound=0,
        priority=0,
        timeout_s=300.0,
        first_seen=0.0,
        deadline=300.0,
        message=message,
    )


def member(name: str, *, node: str | None = None) -> dict[str, Any]:
    obj = pods.pod(name, namespace="ml", node=node, uid=f"uid-{name}")
    obj["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train"}
    return obj


async def test_a_status_is_written_once_per_change() -> None:
    client = Recorder()
    group: dict[str, Any] = {
        "metadata": {"namespace": "ml", "name": "train", "uid": "g1", "generation": 1},
        "spec": {"minMember": 2},
    }
    groups = {("ml", "train"): group}
    gangs = [gang("Waiting", "waiting for pod group train: 0/2 members placed; no room")]
    writer = PodGroupStatusWriter(
        client,  # type: ignore[arg-type]
        podgroups=groups,
        workload_groups={},
        gangs=lambda: gangs,
        bound=lambda: (),
        now=lambda: "2026-01-01T00:00:00Z",
    )
    writer.members.replace([member("w-0"), member("w-1")])
    await writer.sync()
    assert len(client.patches) == 1
    name, status = client.patches[0]
    assert (name, status["phase"], status["scheduled"]) == ("train", "Scheduling", 0)
    assert status["conditions"][0]["message"].endswith("no room")

    await writer.sync()  # the watch has not shown the write yet: not sent again
    assert len(client.patches) == 1
    group["status"] = status  # the watch shows it: nothing differs
    await writer.sync()
    assert len(client.patches) == 1

    writer.members.replace([member("w-0", node="n1"), member("w-1", node="n2")])
    gangs[:] = [gang("Bound", "pod group train: 2/2 members bound")]
    await writer.sync()
    assert len(client.patches) == 2
    changed = client.patches[1][1]
    assert (changed["phase"], changed["scheduled"]) == ("Scheduled", 2)
    assert "running" not in changed  # only what changed is sent
    assert changed["conditions"][0]["status"] == "True"


async def test_a_group_whose_members_are_gone_no_longer_says_scheduled() -> None:
    client = Recorder()
    group: dict[str, Any] = {
        "metadata": {"namespace": "ml", "name": "train", "uid": "g1"},
        "spec": {"minMember": 2},
        "status": {
            "phase": "Running",
            "scheduled": 2,
            "running": 2,
            "conditions": [{"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}],
        },
    }
    writer = PodGroupStatusWriter(
        client,  # type: ignore[arg-type]
        podgroups={("ml", "train"): group},
        workload_groups={},
        gangs=lambda: (),
        bound=lambda: (),
        now=lambda: "2026-01-01T00:00:00Z",
    )
    writer.members.replace([member("w-0", node="n1")])
    await writer.sync()  # one member of ours left: the group is written
    writer.members.replace([])
    await writer.sync()  # none left: written again, since it was written before
    status = client.patches[-1][1]
    assert (status["phase"], status["scheduled"], status["running"]) == ("Pending", 0, 0)
    [condition] = status["conditions"]
    assert (condition["status"], condition["message"]) == ("False", "0 of 2 members exist")
