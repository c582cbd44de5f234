"""Background compaction by NVLink rack (``compactRacks``): two racks of four 4-GPU trays, each
half used by a running gang. Emptying either rack means moving its gang whole into the other's
free trays; with ``compact_racks`` the rack whose move costs least is emptied (the gang to the
other rack, on trays no other moved pod takes); without it nothing moves (no tray can be freed
alone without leaving its rack in use). A gang reaching outside its rack, an unmovable pod, a
gang no other rack in use holds, or a move over the cost model's allowance empties nothing. Room
made for a waiting gang never moves a gang out of the one rack it runs in."""

from __future__ import annotations

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.packing import Member
from coordinator.core.preemption.defrag import (
    DefragPlan,
    DefragSettings,
    plan_compaction,
    plan_defrag,
)
from coordinator.core.preemption.model import RunningPod
from coordinator.core.status import Status

NOW = 1_800_000_000.0
CLIQUE = "nvidia.com/gpu.clique"
UUID = "5d0c9a3e-7f21-4c8b-a6e4-0b9f3d2c1e77"
RACKS = DefragSettings(mode="background", compact_racks=True)


def trays(used: dict[str, int]) -> list[NodeState]:
    """Racks 1 and 2 (cliques), four 4-GPU trays each; ``used``: GPUs in use per tray."""
    out = []
    for r in (1, 2):
        labels = {"topos.io/leaf": "leaf-1", CLIQUE: f"{UUID}.{r}"}
        for t in range(1, 5):
            name = f"r{r}-t{t}"
            out.append(
                NodeState(
                    name=name,
                    labels=labels,
                    allocatable={GPU: 4},
                    free={GPU: 4 - used.get(name, 0)},
                )
            )
    return out


def member(gang: str, i: int, node: str, *, ran_s: float = 300, **kw: object) -> RunningPod:
    kw.setdefault("movable", True)
    return RunningPod(  # type: ignore[arg-type]
        key=f"ml/{gang}-{i}",
        node=node,
        requests={GPU: 4},
        gang=f"ml/{gang}",
        started_at=NOW - ran_s,
        **kw,
    )


def half_used(*, young_ran_s: float = 300) -> tuple[list[NodeState], list[RunningPod]]:
    """Rack 1: gang ``young`` on t1–t2; rack 2: gang ``old`` (run a little longer) on t1–t2."""
    nodes = trays({"r1-t1": 4, "r1-t2": 4, "r2-t1": 4, "r2-t2": 4})
    running = [
        member("young", 0, "r1-t1", ran_s=young_ran_s),
        member("young", 1, "r1-t2", ran_s=young_ran_s),
        member("old", 0, "r2-t1", ran_s=330),
        member("old", 1, "r2-t2", ran_s=330),
    ]
    return nodes, running


def test_the_rack_whose_gang_costs_least_to_move_is_emptied_into_the_other() -> None:
    nodes, running = half_used()
    found = plan_compaction(nodes, running, max_pods=10, settings=RACKS, now=NOW)
    assert found is not None
    assert found.clique
    assert found.node == f"{UUID}.1"
    assert {p.key for p in found.moved} == {"ml/young-0", "ml/young-1"}
    where = dict(found.destinations)
    assert {where["ml/young-0"], where["ml/young-1"]} == {"r2-t3", "r2-t4"}
    assert found.lost_gpu_seconds == 2 * 4 * 300
    assert f"compaction frees NVLink clique {UUID}.1 whole: moving 2 pods" in found.describe()


def test_without_compact_racks_no_gang_is_moved() -> None:
    nodes, running = half_used()
    plain = DefragSettings(mode="background")
    assert plan_compaction(nodes, running, max_pods=10, settings=plain, now=NOW) is None


def test_lone_pods_of_the_rack_go_onto_nodes_in_use_outside_it() -> None:
    # rack 1 also holds a 1-GPU service on t3; rack 2's t3 has 2 GPUs in use by a database
    nodes = trays({"r1-t1": 4, "r1-t2": 4, "r1-t3": 1, "r2-t1": 4, "r2-t2": 4, "r2-t3": 2})
    hgx = NodeState(name="hgx-1", labels={}, allocatable={GPU: 8}, free={GPU: 6})
    running = [
        member("young", 0, "r1-t1"),
        member("young", 1, "r1-t2"),
        RunningPod(key="ml/web", node="r1-t3", requests={GPU: 1}, started_at=NOW, movable=True),
        member("old", 0, "r2-t1", ran_s=330),
        member("old", 1, "r2-t2", ran_s=330),
        RunningPod(key="ml/db", node="r2-t3", requests={GPU: 2}, started_at=NOW - 9e5),
        RunningPod(key="ml/hgx", node="hgx-1", requests={GPU: 2}, started_at=NOW - 9e5),
    ]
    # rack 2 has one whole tray left: the gang of rack 1 fits nowhere but rack 1 itself
    assert plan_compaction([*nodes, hgx], running, max_pods=10, settings=RACKS, now=NOW) is None
    nodes = trays({"r1-t1": 4, "r1-t2": 4, "r1-t3": 1, "r2-t1": 4, "r2-t2": 4})
    running[5] = RunningPod(key="ml/cpu", node="r1-t4", requests={"cpu": 1000})  # stays
    found = plan_compaction([*nodes, hgx], running, max_pods=10, settings=RACKS, now=NOW)
    assert found is not None
    assert found.node == f"{UUID}.1"
    where = dict(found.destinations)
    assert {where["ml/young-0"], where["ml/young-1"]} == {"r2-t3", "r2-t4"}
    assert where["ml/web"] == "hgx-1"  # onto a node in use outside rack 1, not a gang's tray
    assert "ml/cpu" not in where  # a CPU-only pod strands no GPU: it is not moved


def test_what_may_not_move_empties_no_rack() -> None:
    nodes, running = half_used()
    # the budget of moves is one pod: a gang of two does not move
    assert plan_compaction(nodes, running, max_pods=1, settings=RACKS, now=NOW) is None
    # the young gang is bare (nothing recreates it): the old one moves instead
    bare = [
        p if p.gang != "ml/young" else member("young", int(p.key[-1]), p.node, movable=False)
        for p in running
    ]
    found = plan_compaction(nodes, bare, max_pods=10, settings=RACKS, now=NOW)
    assert found is not None
    assert found.node == f"{UUID}.2"
    # a gang reaching into the other rack stays (moving it would leave a piece behind)
    nodes = trays({"r1-t1": 4, "r1-t2": 4, "r2-t1": 4, "r2-t2": 4})
    wide = [member("wide", 0, "r1-t1"), member("wide", 1, "r2-t1")]
    wide += [member("b", 0, "r1-t2"), member("c", 0, "r2-t2", movable=False)]
    assert plan_compaction(nodes, wide, max_pods=10, settings=RACKS, now=NOW) is None


def test_the_cost_model_bounds_what_a_freed_rack_is_worth() -> None:
    # 5 % of rack's 16 GPUs × 1 h = 2,880 GPU-seconds; the cheaper gang has run 2 h (57,600)
    nodes, running = half_used(young_ran_s=7200)
    running = [
        p if p.gang == "ml/young" else member("old", int(p.key[-1]), p.node, ran_s=9000)
        for p in running
    ]
    assert plan_compaction(nodes, running, max_pods=10, settings=RACKS, now=NOW) is None
    lenient = DefragSettings(mode="background", compact_racks=True, max_loss_ratio=2.0)
    found = plan_compaction(nodes, running, max_pods=10, settings=lenient, now=NOW)
    assert found is not None
    assert found.node == f"{UUID}.1"


def test_a_gang_inside_one_rack_is_not_moved_out_of_its_clique_to_make_room() -> None:
    """Making room for a waiting gang that only trays can take (the ``example.com/fabric`` they
    alone have) would move gang ``small`` off rack 1 onto two HGX nodes: its NVLink fabric lost.
    No move is made, and the refusal says why; blind to cliques the same move is planned."""
    fabric = "example.com/fabric"
    racks = trays({"r1-t1": 4, "r1-t2": 4, **{f"r2-t{t}": 4 for t in range(1, 5)}})
    nodes = [
        NodeState(
            name=n.name,
            labels=n.labels,
            allocatable={**n.allocatable, fabric: 1},
            free={**n.free, fabric: 1},
        )
        for n in racks
    ]
    nodes += [
        NodeState(
            name=f"hgx-{i}", labels={"topos.io/leaf": "leaf-1"}, allocatable={GPU: 4}, free={GPU: 4}
        )
        for i in (1, 2)
    ]
    running = [member("small", 0, "r1-t1"), member("small", 1, "r1-t2")]
    running += [member("fixed", t, f"r2-t{t}", movable=False) for t in range(1, 5)]
    waiting = [Member(name=f"ml/big-{i}", requests={GPU: 4, fabric: 1}) for i in range(4)]
    settings = DefragSettings()
    refused = plan_defrag(
        waiting, priority=0, nodes=nodes, running=running, settings=settings, now=NOW
    )
    assert isinstance(refused, Status)
    assert "moving gang ml/small would take it out of its NVLink clique" in refused.detail
    blind = plan_defrag(
        waiting,
        priority=0,
        nodes=nodes,
        running=running,
        settings=settings,
        now=NOW,
        keys=DomainKeys(clique=""),
    )
    assert isinstance(blind, DefragPlan)
    assert {node for _, node in blind.destinations} == {"hgx-1", "hgx-2"}
