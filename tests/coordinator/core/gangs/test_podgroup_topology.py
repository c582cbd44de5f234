"""A Workload-API PodGroup's topology constraint (``spec.schedulingConstraints.topology[0].key``,
scheduling.k8s.io/v1alpha2) keeps its whole gang inside one domain of that node label, as
``topos.io/gang-topology`` does; a member's own gang topology wins; a constraint Topos cannot
honour is refused naming the field and the value, and other gangs are planned as before."""

from __future__ import annotations

from typing import Any

from coordinator.core.domains.layout import DomainKeys
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.gangs.identity import (
    GangKey,
    GangProblem,
    GangSpec,
    gang_of,
    topology_field,
    workload_group_key,
)
from coordinator.core.gangs.slices import group_domain, with_gang_topology
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Code, Status
from devcluster import pods
from tests.support.sched_hw import dgx_h100, gpu_node, request

LEAF = "topos.io/leaf"
RACK = "example.com/rack"
FW = build_framework()


def podgroup(topology: Any = None, *, name: str = "train", min_count: int = 2) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if topology is not None:
        spec["schedulingConstraints"] = {"topology": topology}
    obj = {"metadata": {"namespace": "ml", "name": name, "uid": f"uid-{name}"}, "spec": spec}
    return obj


def groups(*objs: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {workload_group_key("ml", o["metadata"]["name"]): o for o in objs}


def member(name: str, group: str = "train", **kw: Any) -> dict[str, Any]:
    return pods.pod(
        name,
        namespace="ml",
        gpus=8,
        cpu=None,
        memory=None,
        spec={"schedulingGroup": {"podGroupName": group}},
        **kw,
    )


def fabric() -> list[NodeInfo]:
    """Two leaves of two 8-GPU nodes; the racks cut across the leaves: node 1 of each leaf is in
    rack-a, node 2 in rack-b. A gang of two 8-GPU pods packs into one leaf (two racks) unless a
    rack is asked for."""
    return [
        gpu_node(
            f"l{leaf}n{n}",
            dgx_h100(f"l{leaf}n{n}"),
            labels={LEAF: f"leaf-{leaf}", RACK: "rack-a" if n == 1 else "rack-b"},
        )
        for leaf in (1, 2)
        for n in (1, 2)
    ]


def plan(objs: list[dict[str, Any]], known: dict[tuple[str, str], Any]) -> GangDecision | Status:
    spec = gang_of(objs[0], known)
    assert isinstance(spec, GangSpec), spec
    members: list[PodRequest] = [request(o) for o in objs]
    members = with_gang_topology(members, spec.topology, topology_field(spec.key))
    return schedule_gang(members, Snapshot(fabric()), FW, min_member=spec.min_member)


def labels_of(decision: GangDecision, label: str) -> set[str]:
    nodes = {n.name: n for n in fabric()}
    return {nodes[d.node].labels[label] for d in decision.decisions}


# --- reading the constraint ---------------------------------------------------------------------


def test_the_podgroups_topology_key_is_the_gangs_topology() -> None:
    spec = gang_of(member("w-0"), groups(podgroup([{"key": RACK}])))
    assert spec == GangSpec(
        key=GangKey("ml", "train"), min_member=2, source="workload", topology=RACK
    )


def test_no_constraint_or_an_empty_list_asks_for_no_topology() -> None:
    for group in (podgroup(), podgroup([])):
        spec = gang_of(member("w-0"), groups(group))
        assert isinstance(spec, GangSpec)
        assert spec.topology is None


def test_a_key_that_is_no_label_key_is_refused_naming_the_field_and_the_value() -> None:
    problem = gang_of(member("w-0"), groups(podgroup([{"key": "a rack"}])))
    assert isinstance(problem, GangProblem)
    assert not problem.waiting
    assert problem.message == (
        "PodGroup ml/train (scheduling.k8s.io/v1alpha2) "
        "spec.schedulingConstraints.topology[0].key='a rack': not a node label key"
    )


def test_more_than_one_constraint_or_a_malformed_one_is_refused() -> None:
    two = [{"key": RACK}, {"key": LEAF}]
    problem = gang_of(member("w-0"), groups(podgroup(two)))
    assert isinstance(problem, GangProblem)
    assert "spec.schedulingConstraints.topology=" in problem.message
    assert "expected a list of one constraint" in problem.message
    problem = gang_of(member("w-0"), groups(podgroup(["rack"])))
    assert isinstance(problem, GangProblem)
    assert "spec.schedulingConstraints.topology[0].key='rack'" in problem.message
    bad = podgroup()
    bad["spec"]["schedulingConstraints"] = "rack"
    problem = gang_of(member("w-0"), groups(bad))
    assert isinstance(problem, GangProblem)
    assert "spec.schedulingConstraints='rack': expected an object" in problem.message


def test_a_bad_constraint_harms_no_other_podgroup() -> None:
    known = groups(podgroup([{"key": "a rack"}]), podgroup([{"key": RACK}], name="fine"))
    assert isinstance(gang_of(member("w-0"), known), GangProblem)
    fine = gang_of(member("f-0", "fine"), known)
    assert isinstance(fine, GangSpec)
    assert fine.topology == RACK


# --- planning with it ------------------------------------------------------------------------


def test_without_a_constraint_the_gang_packs_into_one_leaf_across_racks() -> None:
    decided = plan([member("w-0"), member("w-1")], groups(podgroup()))
    assert isinstance(decided, GangDecision), decided
    assert len(labels_of(decided, LEAF)) == 1
    assert labels_of(decided, RACK) == {"rack-a", "rack-b"}


def test_the_constraint_keeps_the_whole_gang_in_one_domain_of_its_label() -> None:
    decided = plan([member("w-0"), member("w-1")], groups(podgroup([{"key": RACK}])))
    assert isinstance(decided, GangDecision), decided
    assert len(labels_of(decided, RACK)) == 1
    assert labels_of(decided, LEAF) == {"leaf-1", "leaf-2"}
    assert f"group inside {RACK}=" in decided.plan.placement.explanation


def test_a_members_own_gang_topology_wins_over_the_podgroups() -> None:
    own = {"topos.io/gang-topology": LEAF}
    objs = [member(f"w-{i}", annotations=own) for i in range(2)]
    decided = plan(objs, groups(podgroup([{"key": RACK}])))
    assert isinstance(decided, GangDecision), decided
    assert len(labels_of(decided, LEAF)) == 1
    assert len(labels_of(decided, RACK)) == 2


def test_a_key_no_node_carries_is_refused_naming_the_field_and_the_value() -> None:
    refused = plan([member("w-0"), member("w-1")], groups(podgroup([{"key": "example.com/row"}])))
    assert isinstance(refused, Status)
    assert refused.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert refused.message == (
        "PodGroup ml/train (scheduling.k8s.io/v1alpha2) "
        "spec.schedulingConstraints.topology[0].key='example.com/row': "
        "no node carries the label 'example.com/row'"
    )


def test_a_gang_too_big_for_any_one_domain_does_not_fit_and_says_so() -> None:
    objs = [member(f"w-{i}", group="big") for i in range(3)]  # 24 GPUs: a rack has 16
    assert isinstance(plan(objs, groups(podgroup(name="big", min_count=3))), GangDecision)
    refused = plan(objs, groups(podgroup([{"key": RACK}], name="big", min_count=3)))
    assert isinstance(refused, Status)
    assert refused.code is Code.UNSCHEDULABLE  # it may fit once a rack frees up
    assert f"no {RACK} domain holds the whole group" in refused.message


# --- members beyond the minimum of a bound gang -----------------------------------------------

RACKED = {RACK: "rack-a", LEAF: "leaf-1"}
WRITTEN = topology_field(GangKey("ml", "train"))


def test_a_later_member_goes_where_the_placed_members_are() -> None:
    placed = [RACKED, {RACK: "rack-a", LEAF: "leaf-2"}]
    assert group_domain(request(member("w-2")), RACK, WRITTEN, DomainKeys(), placed) == (
        RACK,
        "rack-a",
        WRITTEN,
    )


def test_a_members_own_required_level_names_the_domain_and_a_preferred_one_none() -> None:
    own = request(member("w-2", annotations={"topos.io/gang-topology": "leaf"}))
    found = group_domain(own, RACK, WRITTEN, DomainKeys(), [RACKED])
    assert found == (LEAF, "leaf-1", "annotation topos.io/gang-topology")
    kueue = {"kueue.x-k8s.io/podset-preferred-topology": LEAF}
    preferred = request(member("w-2", annotations=kueue))
    assert group_domain(preferred, RACK, WRITTEN, DomainKeys(), [RACKED]) is None


def test_nothing_narrows_without_a_level_a_placed_member_or_one_domain() -> None:
    pod = request(member("w-2"))
    assert group_domain(pod, None, WRITTEN, DomainKeys(), [RACKED]) is None
    assert group_domain(pod, RACK, WRITTEN, DomainKeys(), []) is None
    two = [RACKED, {RACK: "rack-b"}]
    assert group_domain(pod, RACK, WRITTEN, DomainKeys(), two) is None
    assert group_domain(pod, RACK, WRITTEN, DomainKeys(), [{LEAF: "leaf-1"}]) is None
