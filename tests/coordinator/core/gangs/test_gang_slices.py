"""Multi-level slices and exclusive topology, planned on the scheduling core's snapshot: slices of
k pods each inside one domain of one level, the whole gang inside one domain of another; exclusive
domains keep other gangs out; a slice that fits nowhere is named with the nearest room; bad keys
are refused naming the key and the value."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinator.core.domains.capacity import GPU, NodeState
from coordinator.core.domains.packing import Member
from coordinator.core.domains.slices import HOSTNAME, SliceSpec
from coordinator.core.domains.strategy import PlacementIntent
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.podspec.tolerations import Taint
from coordinator.core.preemption.victims import PreemptionPlan, RunningPod, select_victims
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Code, Status
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, request, running

LEAF = "topos.io/leaf"
SPINE = "topos.io/spine"
CLIQUE = "nvidia.com/gpu.clique"  # an NVLink domain (GB200 NVL72 style), two nodes each
FW = build_framework()


def fabric(
    spines: int = 2,
    leaves: int = 4,
    per_leaf: int = 2,
    busy: Mapping[str, int] | None = None,
    clique: Callable[[int], str] | None = None,
    cordoned: frozenset[str] = frozenset(),
) -> list[NodeInfo]:
    """``spines`` × ``leaves`` × ``per_leaf`` DGX H100 nodes named ``s<i>l<j>n<k>``; ``busy``:
    GPUs a running pod already holds on a node; ``clique(i)``: the NVLink domain of the i-th node
    (default: one per leaf); ``cordoned``: nodes that take nothing new."""
    nodes = []
    busy = busy or {}
    for s in range(1, spines + 1):
        for leaf in range(1, leaves + 1):
            for n in range(1, per_leaf + 1):
                name = f"s{s}l{leaf}n{n}"
                nvl = clique(len(nodes)) if clique else f"clique-{s}-{leaf}"
                labels = {LEAF: f"leaf-{s}-{leaf}", SPINE: f"spine-{s}", CLIQUE: nvl}
                pods = []
                if busy.get(name):
                    other = pod(f"other-{name}", gpus=busy[name], cpu=None, memory=None)
                    pods.append(running({**other, "spec": {**other["spec"], "nodeName": name}}))
                nodes.append(
                    gpu_node(
                        name,
                        dgx_h100(name),
                        labels=labels,
                        pods=pods,
                        unschedulable=name in cordoned,
                    )
                )
    return nodes


def members(
    gang: str,
    count: int,
    *,
    gpus: int,
    annotations: Mapping[str, str],
    labels: Any = None,
    size: int | None = None,
) -> list[PodRequest]:
    """``count`` members of ``gang`` (needing ``size``, default ``count``), ranked by the Indexed
    Job label; ``labels(i)`` adds labels to member ``i``."""
    out = []
    for i in range(count):
        extra = {
            "batch.kubernetes.io/job-completion-index": str(i),
            **(labels(i) if labels else {}),
        }
        obj = pod(
            f"{gang}-{i}",
            gpus=gpus,
            cpu=None,
            memory=None,
            namespace="ml",
            gang=(gang, size or count),
            labels=extra,
            annotations=annotations,
        )
        out.append(request(obj))
    return out


def domains_of(
    decision: GangDecision, snapshot: Snapshot, label: str, slice_size: int
) -> list[set[str]]:
    """For each slice (ranks ``k*i`` to ``k*i+k-1``), the values of ``label`` on its nodes."""
    by_slice: dict[int, set[str]] = defaultdict(set)
    for d in decision.decisions:
        rank = int(d.pod_key.rsplit("-", 1)[1])
        node = snapshot.get(d.node)
        assert node is not None
        by_slice[rank // slice_size].add(node.labels[label])
    return [by_slice[i] for i in sorted(by_slice)]


def with_running(
    nodes: list[NodeInfo], decision: GangDecision, pods: Sequence[PodRequest]
) -> Snapshot:
    """A snapshot of ``nodes`` where the gang's members run on their decided nodes."""
    by_key = {p.key: p for p in pods}
    snapshot = Snapshot(nodes)
    for d in decision.decisions:
        snapshot.assume(by_key[d.pod_key], d.node, d.placement, d.claims)
    return snapshot


def test_slices_stay_inside_one_leaf_and_the_gang_inside_one_spine() -> None:
    # 16 pods × 3 GPUs in slices of 4: first-fit by name would split slice 0 (w-0…w-3) across
    # nodes of different leaves (w-0, w-1, w-10, w-11, … share nodes); with slices each slice
    # keeps to one leaf, and the whole gang to one spine.
    keys = {
        "topos.io/slice-size": "4",
        "topos.io/slice-topology": "leaf",
        "topos.io/gang-topology": "spine",
    }
    pods = members("w", 16, gpus=3, annotations=keys)
    snapshot = Snapshot(fabric())
    plain = schedule_gang(members("p", 16, gpus=3, annotations={}), snapshot, FW, min_member=16)
    assert isinstance(plain, GangDecision)
    assert any(len(d) > 1 for d in domains_of(plain, snapshot, LEAF, 4))  # what slices prevent

    decided = schedule_gang(pods, snapshot, FW, min_member=16)
    assert isinstance(decided, GangDecision), decided
    leaves = domains_of(decided, snapshot, LEAF, 4)
    assert all(len(d) == 1 for d in leaves), leaves
    spines = {snapshot.get(d.node).labels[SPINE] for d in decided.decisions}  # type: ignore[union-attr]
    assert len(spines) == 1
    assert len(decided.plan.placement.slices) == 4
    why = decided.plan.placement.explanation
    assert f"4 slices, each inside one {LEAF} domain" in why, why
    assert f"group inside {SPINE}=" in why


def test_a_tensor_parallel_slice_keeps_to_one_node_even_where_partly_used_nodes_come_first() -> (
    None
):
    # balanced packing fills partly used nodes first: 8 × 2 GPUs would go 3 + 3 + 2 over the
    # 6 free GPUs of n1, n2 and then n3, splitting both slices of 4; each slice must sit on one
    # node of its own.
    nodes = fabric(spines=1, leaves=1, per_leaf=4, busy={"s1l1n1": 2, "s1l1n2": 2})
    snapshot = Snapshot(nodes)
    plain = schedule_gang(members("p", 8, gpus=2, annotations={}), snapshot, FW, min_member=8)
    assert isinstance(plain, GangDecision)
    assert any(len(h) > 1 for h in domains_of(plain, snapshot, "kubernetes.io/hostname", 4))
    keys = {"topos.io/slice-size": "4", "topos.io/slice-topology": "hostname"}
    decided = schedule_gang(members("tp", 8, gpus=2, annotations=keys), snapshot, FW, min_member=8)
    assert isinstance(decided, GangDecision), decided
    hosts = domains_of(decided, snapshot, "kubernetes.io/hostname", 4)
    assert hosts == [{"s1l1n3"}, {"s1l1n4"}] or hosts == [{"s1l1n4"}, {"s1l1n3"}], hosts


def test_any_node_label_is_a_level_and_kueue_keys_mean_the_same() -> None:
    # NVLink domains of two nodes that straddle the leaves and spines: {n0}, {n1, n2}, {n3, n4}…
    nodes = fabric(clique=lambda i: f"c{(i + 1) // 2}")
    snapshot = Snapshot(nodes)
    plain = schedule_gang(members("p", 8, gpus=8, annotations={}), snapshot, FW, min_member=8)
    assert isinstance(plain, GangDecision)
    assert any(len(c) > 1 for c in domains_of(plain, snapshot, CLIQUE, 2))
    topos = {"topos.io/slice-size": "2", "topos.io/slice-topology": CLIQUE}
    kueue = {
        "kueue.x-k8s.io/podset-slice-size": "2",
        "kueue.x-k8s.io/podset-slice-required-topology": CLIQUE,
    }
    a = schedule_gang(members("a", 8, gpus=8, annotations=topos), snapshot, FW, min_member=8)
    b = schedule_gang(members("a", 8, gpus=8, annotations=kueue), snapshot, FW, min_member=8)
    assert isinstance(a, GangDecision), a
    assert isinstance(b, GangDecision), b
    cliques = domains_of(b, snapshot, CLIQUE, 2)
    assert all(len(c) == 1 for c in cliques), cliques
    assert len(set().union(*cliques)) == 4
    assert [d.node for d in a.decisions] == [d.node for d in b.decisions]


def jobset(
    name: str, jobs: int, per_job: int, *, gpus: int, topology: str = LEAF, uid: str | None = None
) -> list[PodRequest]:
    """A JobSet's pods as JobSet v0.10.1 labels them: replicated job ``workers`` with ``jobs``
    child Jobs of ``per_job`` pods, exclusive placement per ``topology`` domain."""
    out = []
    for j in range(jobs):
        for i in range(per_job):
            labels = {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/jobset-uid": uid or f"uid-{name}",
                "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                "jobset.sigs.k8s.io/job-index": str(j),
                "jobset.sigs.k8s.io/job-key": f"{name}-key-{j}",
                "batch.kubernetes.io/job-completion-index": str(i),
            }
            obj = pod(
                f"{name}-workers-{j}-{i}",
                gpus=gpus,
                cpu=None,
                memory=None,
                namespace="ml",
                gang=(name, jobs * per_job),
                labels=labels,
                annotations={"alpha.jobset.sigs.k8s.io/exclusive-topology": topology},
            )
            out.append(request(obj))
    return out


def leaves_by_job(decision: GangDecision, snapshot: Snapshot) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for d in decision.decisions:
        job = d.pod_key.rsplit("-", 1)[0]
        out[job].add(snapshot.get(d.node).labels[LEAF])  # type: ignore[union-attr]
    return out


def test_jobset_exclusive_topology_gives_each_child_job_its_own_leaf_and_keeps_others_out() -> None:
    nodes = fabric()
    snapshot = Snapshot(nodes)
    a = jobset("a", 2, 2, gpus=4)  # 16 GPUs: one leaf could hold both Jobs, but each wants its own
    decided = schedule_gang(a, snapshot, FW, min_member=4)
    assert isinstance(decided, GangDecision), decided
    by_job = leaves_by_job(decided, snapshot)
    assert all(len(v) == 1 for v in by_job.values())
    held = set().union(*by_job.values())
    assert len(held) == 2
    assert "each inside its own topos.io/leaf domain" in decided.plan.placement.explanation

    running_a = with_running(nodes, decided, a)
    b = schedule_gang(jobset("b", 2, 2, gpus=2), running_a, FW, min_member=4)
    assert isinstance(b, GangDecision), b
    assert held.isdisjoint(set().union(*leaves_by_job(b, running_a).values()))
    # A gang with no slice keys at all keeps out of the leaves A holds, though they have room.
    plain = members("plain", 2, gpus=4, annotations={})
    c = schedule_gang(plain, running_a, FW, min_member=2)
    assert isinstance(c, GangDecision)
    assert {running_a.get(d.node).labels[LEAF] for d in c.decisions}.isdisjoint(held)  # type: ignore[union-attr]


def test_an_exclusive_slice_does_not_take_a_leaf_another_workload_uses() -> None:
    # Every leaf of spine 1 has a GPU pod of someone else; spine 2's leaves are free.
    busy = {f"s1l{leaf}n1": 1 for leaf in range(1, 5)}
    snapshot = Snapshot(fabric(busy=busy))
    decided = schedule_gang(jobset("x", 2, 2, gpus=4), snapshot, FW, min_member=4)
    assert isinstance(decided, GangDecision), decided
    assert {leaf for v in leaves_by_job(decided, snapshot).values() for leaf in v} <= {
        f"leaf-2-{i}" for i in range(1, 5)
    }


def test_a_slice_that_fits_nowhere_is_named_with_the_nearest_room() -> None:
    # Slices of 4 × 4 GPUs on one node: no 8-GPU node holds 16 GPUs; the nearest holds 2 of 4.
    keys = {"topos.io/slice-size": "4", "topos.io/slice-topology": "hostname"}
    snapshot = Snapshot(fabric(spines=1, leaves=1))
    refused = schedule_gang(members("big", 4, gpus=4, annotations=keys), snapshot, FW, min_member=4)
    assert isinstance(refused, Status)
    assert "slice 0 (4 pods) fits in no kubernetes.io/hostname domain" in refused.message
    assert (
        "the nearest room, kubernetes.io/hostname=s1l1n1, holds 2 of its 4 pods" in refused.message
    )


def test_a_group_level_that_fits_nowhere_names_the_roomiest_domain() -> None:
    keys = {"kueue.x-k8s.io/podset-required-topology": LEAF}
    snapshot = Snapshot(fabric(spines=1, leaves=2, busy={"s1l2n1": 8}))
    refused = schedule_gang(members("g", 3, gpus=8, annotations=keys), snapshot, FW, min_member=3)
    assert isinstance(refused, Status)
    assert f"no {LEAF} domain holds the whole group (3 pods, 24 nvidia.com/gpu)" in refused.message
    assert f"the roomiest, {LEAF}=leaf-1-1, has 16 nvidia.com/gpu free" in refused.message
    # preferred, not required: placed across leaves, and the explanation says so
    soft = {"kueue.x-k8s.io/podset-preferred-topology": LEAF}
    placed = schedule_gang(members("g", 3, gpus=8, annotations=soft), snapshot, FW, min_member=3)
    assert isinstance(placed, GangDecision), placed
    assert "is only preferred" in placed.plan.placement.explanation


def test_an_lws_leader_goes_where_its_whole_group_fits() -> None:
    # LWS exclusive-topology creates the workers only once the leader is scheduled: the leader
    # alone is planned, with room for its group of 4 × 8 GPUs. Leaf 1-1 has room for the leader
    # but not for the group (three of its nodes are cordoned); best fit would take it.
    annotations = {
        "leaderworkerset.sigs.k8s.io/exclusive-topology": LEAF,
        "leaderworkerset.sigs.k8s.io/size": "4",
    }
    labels = {
        "leaderworkerset.sigs.k8s.io/name": "vllm",
        "leaderworkerset.sigs.k8s.io/group-index": "0",
        "leaderworkerset.sigs.k8s.io/group-key": "g0",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    nodes = fabric(
        spines=1, leaves=2, per_leaf=4, cordoned=frozenset({"s1l1n2", "s1l1n3", "s1l1n4"})
    )
    leader = request(
        pod(
            "vllm-0",
            gpus=8,
            cpu=None,
            memory=None,
            namespace="ml",
            gang=("vllm-0", 1),
            labels=labels,
            annotations=annotations,
        )
    )
    snapshot = Snapshot(nodes)
    decided = schedule_gang([leader], snapshot, FW, min_member=1)
    assert isinstance(decided, GangDecision), decided
    assert snapshot.get(decided.decisions[0].node).labels[LEAF] == "leaf-1-2"  # type: ignore[union-attr]


def test_lws_subgroups_each_take_a_node_of_their_own() -> None:
    annotations = {
        "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "kubernetes.io/hostname",
        "leaderworkerset.sigs.k8s.io/subgroup-size": "2",
        "leaderworkerset.sigs.k8s.io/size": "4",
    }
    pods = []
    for i in range(4):
        labels = {
            "leaderworkerset.sigs.k8s.io/group-key": "g0",
            "leaderworkerset.sigs.k8s.io/worker-index": str(i),
            "leaderworkerset.sigs.k8s.io/subgroup-index": str(i // 2),
        }
        obj = pod(
            f"s-{i}",
            gpus=2,
            cpu=None,
            memory=None,
            namespace="ml",
            gang=("s", 4),
            labels=labels,
            annotations=annotations,
        )
        pods.append(request(obj))
    snapshot = Snapshot(fabric(spines=1, leaves=1))
    decided = schedule_gang(pods, snapshot, FW, min_member=4)
    assert isinstance(decided, GangDecision), decided
    node_of = {d.pod_key: d.node for d in decided.decisions}
    assert node_of["ml/s-0"] == node_of["ml/s-1"] != node_of["ml/s-2"] == node_of["ml/s-3"]


def test_a_slice_size_that_does_not_divide_the_gang_is_refused_naming_key_and_value() -> None:
    keys = {"topos.io/slice-size": "3", "topos.io/slice-topology": "leaf"}
    refused = schedule_gang(
        members("odd", 8, gpus=1, annotations=keys), Snapshot(fabric()), FW, min_member=8
    )
    assert isinstance(refused, Status)
    assert refused.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert (
        "annotation topos.io/slice-size='3': a slice size of 3 does not divide the pod group's"
        " 8 members" in refused.message
    )
    # the same snapshot still places a gang whose keys are right
    good = {"topos.io/slice-size": "4", "topos.io/slice-topology": "leaf"}
    assert isinstance(
        schedule_gang(
            members("ok", 8, gpus=1, annotations=good), Snapshot(fabric()), FW, min_member=8
        ),
        GangDecision,
    )


def test_a_level_no_node_carries_is_refused_naming_key_and_value() -> None:
    keys = {
        "kueue.x-k8s.io/podset-slice-size": "2",
        "kueue.x-k8s.io/podset-slice-required-topology": "cloud.provider.com/topology-block",
    }
    refused = schedule_gang(
        members("blk", 4, gpus=1, annotations=keys), Snapshot(fabric()), FW, min_member=4
    )
    assert isinstance(refused, Status)
    assert refused.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert (
        "annotation kueue.x-k8s.io/podset-slice-required-topology="
        "'cloud.provider.com/topology-block': no node carries the label"
        " 'cloud.provider.com/topology-block'"
    ) in refused.message
    js = jobset("nolabel", 1, 2, gpus=1, topology="example.com/rack")
    refused = schedule_gang(js, Snapshot(fabric()), FW, min_member=2)
    assert isinstance(refused, Status)
    assert (
        "annotation alpha.jobset.sigs.k8s.io/exclusive-topology='example.com/rack'"
        in refused.message
    )


def test_bad_slice_values_make_the_pod_invalid_naming_the_key() -> None:
    for written, expected in (
        (
            {"topos.io/slice-size": "zero", "topos.io/slice-topology": "leaf"},
            "metadata.annotations[topos.io/slice-size]",
        ),
        ({"topos.io/slice-size": "0", "topos.io/slice-topology": "leaf"}, "got '0'"),
        ({"topos.io/slice-size": "4"}, "need a level to stay inside"),
        ({"topos.io/slice-topology": "leaf"}, "a slice level needs a slice size"),
        (
            {"topos.io/slice-size": "4", "topos.io/slice-topology": "not a key!"},
            "'not a key!' is not a node label key",
        ),
        (
            {
                "topos.io/slice-size": "4",
                "kueue.x-k8s.io/podset-slice-size": "8",
                "topos.io/slice-topology": "leaf",
            },
            "contradictory annotations",
        ),
    ):
        parsed = parse_pod(pod("bad", gpus=1, annotations=written))
        assert isinstance(parsed, PodSpecError), written
        assert expected in parsed.text, parsed.text


def test_members_that_disagree_on_slice_keys_are_refused() -> None:
    a = members(
        "mix",
        2,
        gpus=1,
        annotations={"topos.io/slice-size": "2", "topos.io/slice-topology": "leaf"},
    )
    b = members(
        "mix",
        2,
        gpus=1,
        annotations={"topos.io/slice-size": "1", "topos.io/slice-topology": "leaf"},
    )
    refused = schedule_gang([a[0], b[1]], Snapshot(fabric()), FW, min_member=2)
    assert isinstance(refused, Status)
    assert "disagree on slice keys" in refused.message
    assert "topos.io/slice-size=1" in refused.message


def test_preemption_makes_room_for_a_whole_slice_in_one_domain() -> None:
    # Two nodes each with 4 GPUs free: 2 × 4-GPU pods fit as they are, but not as one slice on
    # one node. The victim search plans with the slice: one low-priority pod goes, and both
    # members are nominated to the node it frees.
    running = [
        RunningPod(key=f"batch/low-{i}", node=f"n{i}", requests={GPU: 4}, priority=0)
        for i in (1, 2)
    ]
    nodes = [
        NodeState(name=f"n{i}", labels={LEAF: "leaf-1"}, allocatable={GPU: 8}, free={GPU: 4})
        for i in (1, 2)
    ]
    members = [Member(name=f"ml/tp-{i}", requests={GPU: 4}) for i in range(2)]
    spec = SliceSpec(level=HOSTNAME, slice_of={m.name: "0" for m in members}, room={"0": 2})
    plan = select_victims(
        members, priority=100, nodes=nodes, running=running, intent=PlacementIntent(slices=spec)
    )
    assert isinstance(plan, PreemptionPlan), plan
    assert len(plan.victim_pods) == 1
    assert len({node for _, node in plan.nominated}) == 1


def test_a_replacement_member_goes_back_into_its_slices_domain() -> None:
    # s1l1n1 has 2 GPUs free, as the node a lost member leaves will: by best fit and name the
    # replacement would take s1l1n1; it belongs to slice 1 and goes back to that slice's node.
    nodes = fabric(spines=1, leaves=1, per_leaf=4, busy={"s1l1n1": 6})
    keys = {"topos.io/slice-size": "4", "topos.io/slice-topology": "hostname"}
    pods = members("r", 8, gpus=2, annotations=keys)
    decided = schedule_gang(pods, Snapshot(nodes), FW, min_member=8)
    assert isinstance(decided, GangDecision), decided
    node_of = {d.pod_key: d.node for d in decided.decisions}
    survivors = [d for d in decided.decisions if d.pod_key != "ml/r-5"]
    snapshot = Snapshot(nodes)
    by_key = {p.key: p for p in pods}
    for d in survivors:
        snapshot.assume(by_key[d.pod_key], d.node, d.placement, d.claims)
    again = schedule_gang([by_key["ml/r-5"]], snapshot, FW, min_member=1)
    assert isinstance(again, GangDecision), again
    assert again.decisions[0].node == node_of["ml/r-4"] != "s1l1n1"


def test_jobset_node_selector_strategy_places_each_job_on_the_nodes_labelled_for_it() -> None:
    # JobSet's node-selector strategy: the user labelled and tainted each leaf for one child Job
    # (hack/label_nodes); JobSet gives a Job's pods that nodeSelector and a toleration. Leaf 1-1
    # is labelled for Job 1, leaf 1-2 for Job 0: each Job lands on its own, against name order.
    job_of_leaf = {"leaf-1-1": "ml_ns-workers-1", "leaf-1-2": "ml_ns-workers-0"}
    nodes = []
    for node in fabric(spines=1, leaves=2):
        job = job_of_leaf[node.labels[LEAF]]
        labels = {**node.labels, "alpha.jobset.sigs.k8s.io/namespaced-job": job}
        taint = Taint("alpha.jobset.sigs.k8s.io/no-schedule", "", "NoSchedule")
        nodes.append(gpu_node(node.name, dgx_h100(node.name), labels=labels, taints=[taint]))
    pods = []
    for p in jobset("ns", 2, 2, gpus=8):
        job = f"ml_ns-workers-{p.labels['jobset.sigs.k8s.io/job-index']}"
        obj = pod(
            p.name,
            gpus=8,
            cpu=None,
            memory=None,
            namespace="ml",
            gang=("ns", 4),
            labels=p.labels,
            annotations={
                "alpha.jobset.sigs.k8s.io/exclusive-topology": LEAF,
                "alpha.jobset.sigs.k8s.io/node-selector": "true",
            },
            node_selector={"alpha.jobset.sigs.k8s.io/namespaced-job": job},
            tolerations=[
                {
                    "key": "alpha.jobset.sigs.k8s.io/no-schedule",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
        )
        pods.append(request(obj))
    assert all(p.slices is not None and p.slices.node_selector_strategy for p in pods)
    snapshot = Snapshot(nodes)
    decided = schedule_gang(pods, snapshot, FW, min_member=4)
    assert isinstance(decided, GangDecision), decided
    assert leaves_by_job(decided, snapshot) == {
        "ml/ns-workers-0": {"leaf-1-2"},
        "ml/ns-workers-1": {"leaf-1-1"},
    }


def test_jobset_followers_gang_joins_the_leaves_its_jobs_leaders_hold() -> None:
    # Exclusive placement by affinity: JobSet admits a Job's followers only once its leader is
    # scheduled, so the leaders (completion index 0) are one gang and the followers another
    # (both of the same JobSet). With the leaders running, one per leaf, each Job's leaf is
    # blocked by that Job's own slice: the followers' gang must still go there, not be refused
    # for want of a free leaf.
    nodes = fabric(spines=1, leaves=2)
    pods = jobset("ex", 2, 2, gpus=1)
    leaders = [p for p in pods if p.labels["batch.kubernetes.io/job-completion-index"] == "0"]
    followers = [p for p in pods if p not in leaders]

    def regang(p: PodRequest, gang: str) -> PodRequest:
        obj = pod(
            p.name,
            gpus=1,
            cpu=None,
            memory=None,
            namespace="ml",
            gang=(gang, 2),
            labels=p.labels,
            annotations={"alpha.jobset.sigs.k8s.io/exclusive-topology": LEAF},
        )
        return request(obj)

    leaders = [regang(p, "ex-leaders") for p in leaders]
    followers = [regang(p, "ex-followers") for p in followers]
    first = schedule_gang(leaders, Snapshot(nodes), FW, min_member=2)
    assert isinstance(first, GangDecision), first
    snapshot = with_running(nodes, first, leaders)
    leaf_of_job = {job: leaves.pop() for job, leaves in leaves_by_job(first, snapshot).items()}
    assert len(set(leaf_of_job.values())) == 2  # one Job per leaf
    second = schedule_gang(followers, snapshot, FW, min_member=2)
    assert isinstance(second, GangDecision), second
    assert {
        job: leaves.pop() for job, leaves in leaves_by_job(second, snapshot).items()
    } == leaf_of_job
