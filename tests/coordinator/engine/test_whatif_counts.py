"""What-if suggestions counted before they are placed: a reshaped request or a set of preemption
victims that cannot fit by free-GPU counts alone is ruled out without a placement
(``core/domains/countbound.py``), and fewer GPUs per pod starts at the most the counts allow. The
answers are the same as placing every try — only fewer placements are made."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

import coordinator.core.preemption.victims as victims_module
import coordinator.engine.whatif.placing as placing_module
import coordinator.engine.whatif.service as service_module
from agent.devices import discover_profile
from coordinator.adapters.memory.cluster import MemoryCluster
from coordinator.adapters.memory.runtime import memory_runtime
from coordinator.app.scheduler import what_if
from coordinator.core.domains.capacity import NodeState
from coordinator.core.domains.countbound import may_fit
from coordinator.core.domains.layout import build_layout
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.engine.gangs.service import GangRuntime, GangSettings
from coordinator.engine.whatif.service import WhatIf
from coordinator.inventory.state import BoundPod
from coordinator.inventory.store import Inventory

# Per spine (2 leaves × 8 nodes): 10 idle nodes, 3 with 6 GPUs free, 3 with 4 free.
HELD = [0] * 10 + [2] * 3 + [4] * 3


def cluster() -> WhatIf:
    base = discover_profile("dgx-a100", hostname="template")
    inventory = Inventory()
    nodes = MemoryCluster(inventory)
    for i in range(32):
        name = f"node-{i:02d}"
        gpus = tuple(msgspec.structs.replace(g, uuid=f"GPU-{i:02d}-{g.index}") for g in base.gpus)
        leaf = i // 8
        nodes.add_node(
            name,
            labels={"topos.io/leaf": f"leaf-{leaf}", "topos.io/spine": f"spine-{leaf // 2}"},
            topology=msgspec.structs.replace(base, hostname=name, gpus=gpus),
        )
        held = HELD[i % 16]
        if held:
            inventory.upsert_pod(
                BoundPod(
                    uid=f"uid-{i}",
                    namespace="batch",
                    name=f"low-{i:02d}",
                    node=name,
                    scheduler="topos",
                    requests={"nvidia.com/gpu": held},
                    assigned_gpus=tuple(g.uuid for g in gpus[:held]),
                    priority=0,
                )
            )
    runtime = memory_runtime(inventory, nodes)
    return what_if(runtime, GangRuntime(runtime, settings=GangSettings()))


def gang(pods: int) -> dict[str, Any]:
    """A JobSet of ``pods`` × 8 GPUs that must stay in one spine, priority 1000."""
    labels = {"topos.io/gang": "big", "topos.io/gang-min": str(pods)}
    template = {
        "metadata": {"labels": labels, "annotations": {"topos.io/latency-sensitive": "true"}},
        "spec": {
            "schedulerName": "topos",
            "priority": 1000,
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}}
            ],
        },
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "big", "namespace": "ml"},
        "spec": {
            "replicatedJobs": [
                {"name": "w", "replicas": pods, "template": {"spec": {"template": template}}}
            ]
        },
    }


def counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    calls: list[int] = []
    real: Callable[..., Any] = getattr(module, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return calls


def answer_and_placements(monkeypatch: pytest.MonkeyPatch, *, counts: bool) -> tuple[bytes, int]:
    """The answer for a 12 × 8-GPU one-spine gang (no budget), and how many gang placements it
    took; ``counts=False``: every try placed (the count check always says "may fit", victims
    searched by plain bisection)."""
    w = cluster()
    with monkeypatch.context() as m:
        if not counts:
            m.setattr(service_module, "may_fit", lambda *a, **k: True)
            m.setattr(victims_module, "may_fit", lambda *a, **k: True)
            fewest = victims_module._fewest  # the plain binary search over victim prefixes
            m.setattr(victims_module, "_fewest", lambda usable, fits, _=None: fewest(usable, fits))
        gangs = counting(m, placing_module, "schedule_gang")
        victims = counting(m, victims_module, "place_members")
        answer = w.answer([gang(12)], budget_s=None)
    return msgspec.json.encode(answer), len(gangs) + len(victims)


def test_suggestions_are_the_same_with_fewer_placements(monkeypatch: pytest.MonkeyPatch) -> None:
    counted, fewer = answer_and_placements(monkeypatch, counts=True)
    placed, every = answer_and_placements(monkeypatch, counts=False)
    assert counted == placed
    assert fewer < every
    got = msgspec.json.decode(counted)
    assert got["fits"] is False
    by_kind = {s["kind"]: s for s in got["suggestions"]}
    assert list(by_kind) == ["span-domains", "fewer-gpus", "preempt"]
    # 10 idle nodes a spine: 7 GPUs a pod cannot fit by counts; 6 fits (3 more nodes have 6).
    assert by_kind["fewer-gpus"]["summary"] == "ask for 6 GPUs per pod instead of 8"
    assert len(by_kind["fewer-gpus"]["placements"]) == 12
    # Two more whole nodes in one spine: two priority-0 pods there, on nodes of that spine.
    victims = by_kind["preempt"]["victims"]
    assert [v["priority"] for v in victims] == [0, 0]
    assert len({int(v["node"].removeprefix("node-")) // 16 for v in victims}) == 1


def state(name: str, free: int, spine: str | None, *, schedulable: bool = True) -> NodeState:
    labels = {"topos.io/leaf": f"leaf-{spine}"} if spine else {}
    if spine:
        labels["topos.io/spine"] = spine
    return NodeState(
        name=name,
        labels=labels,
        allocatable={"nvidia.com/gpu": 8},
        free={"nvidia.com/gpu": free},
        schedulable=schedulable,
    )


ONE_SPINE = PlacementIntent(latency_sensitive=True)


def test_one_spine_groups_count_each_spine_alone() -> None:
    nodes = [
        *(state(f"a{i}", 8, "spine-a") for i in range(3)),
        *(state(f"b{i}", 8, "spine-b") for i in range(3)),
    ]
    layout = build_layout(nodes)
    assert may_fit([8] * 3, nodes, intent=ONE_SPINE, layout=layout)
    assert not may_fit([8] * 4, nodes, intent=ONE_SPINE, layout=layout)
    assert may_fit([8] * 6, nodes, intent=None, layout=layout)  # may span spines
    assert may_fit([4] * 6, nodes, intent=ONE_SPINE, layout=layout)  # two a node
    assert may_fit([8] * 4, nodes, intent=ONE_SPINE, layout=layout, needed=3)  # gang minimum


def test_nodes_in_no_spine_count_together_and_cordoned_nodes_not_at_all() -> None:
    nodes = [
        state("a0", 8, "spine-a"),
        state("x0", 8, None),
        state("x1", 8, None),
        state("x2", 8, None, schedulable=False),
    ]
    layout = build_layout(nodes)
    assert may_fit([8] * 2, nodes, intent=ONE_SPINE, layout=layout)
    assert not may_fit([8] * 3, nodes, intent=ONE_SPINE, layout=layout)
    assert not may_fit(
        [7, 7], [state("y", 6, None), state("z", 8, None)], intent=None, layout=layout
    )


def test_members_asking_no_whole_gpu_are_not_counted() -> None:
    nodes = [state("a0", 2, None)]
    layout = build_layout(nodes)
    assert may_fit([0, 0, 0], nodes, intent=None, layout=layout)
    assert may_fit([0, 8], nodes, intent=None, layout=layout, needed=1)  # the GPU-less one
    assert not may_fit([0, 8], nodes, intent=None, layout=layout)
