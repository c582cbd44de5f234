"""Pod anti-affinity and topology spread read per-selector counts the snapshot keeps current
(assume, forget, copy, node relabelled or removed) instead of walking the pods every cycle.

Random clusters check them against an exhaustive, by-the-definition evaluation of every node and
against the scanning plugins they replaced (same decision, same node); the rest is what a user
sees: anti-affine replicas on distinct nodes, skew held, every node counted when none fits.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision, Failure, ScheduleResult
from coordinator.core.podspec.parse import PodRequest, parse_pod
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement, PodInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.sim.baselines.scan import scan_framework
from devcluster.pods import pod

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
EVERY_NODE = SchedulerConfig(percentage_of_nodes_to_score=100)


def _anti(
    app: str,
    key: str,
    namespaces: Sequence[str] | None = None,
    ns_selector: Mapping[str, Any] | None = None,
    *,
    preferred: bool = False,
    together: bool = False,
) -> dict[str, Any]:
    """A pod anti-affinity term (``together``: an affinity term), required or preferred."""
    term: dict[str, Any] = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    if namespaces is not None:
        term["namespaces"] = list(namespaces)
    if ns_selector is not None:
        term["namespaceSelector"] = dict(ns_selector)
    kind = "podAffinity" if together else "podAntiAffinity"
    if preferred:
        weighted = [{"weight": 10, "podAffinityTerm": term}]
        return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": weighted}}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def _spread(app: str, key: str, skew: int, when: str = "DoNotSchedule") -> dict[str, Any]:
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": app}},
    }


def _request(obj: Mapping[str, Any]) -> PodRequest:
    parsed = parse_pod(obj)
    assert isinstance(parsed, PodRequest), parsed
    return parsed


def _random_pod(rng: random.Random, i: int) -> PodRequest:
    app = rng.choice(("a", "b"))
    namespace = rng.choice(("ns1", "ns2"))
    spec: dict[str, Any] = {}
    kind = rng.random()
    if kind < 0.35:
        key = rng.choice((HOST, ZONE))
        # namespaces listed, every namespace ({}), or namespaces chosen by their labels
        ns_selector = rng.choice((None, None, {}, {"matchLabels": {"team": "x"}}))
        namespaces = rng.choice((None, ["ns1", "ns2"]))
        spec["affinity"] = _anti(
            rng.choice(("a", "b")),
            key,
            namespaces,
            ns_selector,
            preferred=rng.random() < 0.2,
            together=rng.random() < 0.3,  # affinity: the placed pods' terms weigh on scores
        )
    elif kind < 0.7:
        keys = rng.sample((HOST, ZONE), rng.choice((1, 2)))
        when = rng.choice(("DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"))
        spec["topologySpreadConstraints"] = [
            _spread(app, k, rng.choice((1, 2)), when) for k in keys
        ]
    return _request(
        pod(f"p{i}", namespace=namespace, cpu="100m", memory=None, labels={"app": app}, spec=spec)
    )


def _random_nodes(rng: random.Random, count: int) -> list[NodeInfo]:
    out = []
    for i in range(count):
        labels = {HOST: f"n{i}"}
        if rng.random() < 0.85:  # some nodes carry no zone
            labels[ZONE] = rng.choice(("z1", "z2", "z3"))
        out.append(NodeInfo.build(f"n{i}", labels=labels, allocatable={"cpu": 64000, "pods": 110}))
    return out


def _naive_feasible(incoming: PodRequest, snapshot: Snapshot) -> set[str]:
    """Every node judged from the definitions, walking every pod (no index)."""
    placed = [(n, p) for n in snapshot.nodes for p in n.pods]
    ns = snapshot.namespaces

    def same_domain(a: NodeInfo, b: NodeInfo, key: str) -> bool:
        return key in a.labels and a.labels.get(key) == b.labels.get(key)

    hard = [c for c in incoming.spread if c.when_unsatisfiable == "DoNotSchedule"]
    keys = {c.topology_key for c in hard}
    eligible = [n for n in snapshot.nodes if all(k in n.labels for k in keys)]
    together = incoming.pod_affinity
    with_all = [
        (there, p)
        for there, p in placed
        if all(t.matches_pod(p.namespace, p.labels, ns.get(p.namespace)) for t in together)
    ]
    own = all(
        t.matches_pod(incoming.namespace, incoming.labels, ns.get(incoming.namespace))
        for t in together
    )
    out = set()
    for node in snapshot.nodes:
        if together:
            if any(t.topology_key not in node.labels for t in together):
                continue
            near = all(
                any(same_domain(node, there, t.topology_key) for there, _ in with_all)
                for t in together
            )
            # the first of a group may start it where no pod matching its terms sits yet
            counted = any(t.topology_key in there.labels for there, _ in with_all for t in together)
            if not near and (counted or not own):
                continue
        if any(
            same_domain(node, there, t.topology_key)
            and t.matches_pod(p.namespace, p.labels, ns.get(p.namespace))
            for t in incoming.pod_anti_affinity
            for there, p in placed
        ):
            continue
        if any(
            same_domain(node, there, t.topology_key)
            and t.matches_pod(incoming.namespace, incoming.labels, ns.get(incoming.namespace))
            for there, p in placed
            for t in p.anti_affinity
        ):
            continue
        fits = True
        for c in hard:
            if c.topology_key not in node.labels:
                fits = False
                break
            assert c.selector is not None
            per: dict[str, int] = {}
            for e in eligible:
                value = e.labels[c.topology_key]
                per[value] = per.get(value, 0) + sum(
                    1
                    for p in e.pods
                    if p.namespace == incoming.namespace and c.selector.matches(p.labels)
                )
            own = 1 if c.selector.matches(incoming.labels) else 0
            if per.get(node.labels[c.topology_key], 0) + own - min(per.values()) > c.max_skew:
                fits = False
                break
        if fits:
            out.add(node.name)
    return out


def _feasible(result: ScheduleResult, snapshot: Snapshot) -> set[str]:
    if isinstance(result, Failure):
        return set()
    return {n.name for n in snapshot.nodes if result.verdicts[n.name].status.is_success}


def _step(
    rng: random.Random, snapshot: Snapshot, incoming: PodRequest, fast: Framework, scan: Framework
) -> None:
    got = schedule_one(incoming, snapshot, fast)
    assert _feasible(got, snapshot) == _naive_feasible(incoming, snapshot)
    before = schedule_one(incoming, snapshot, scan)
    assert type(got) is type(before)
    if isinstance(got, Decision):
        assert isinstance(before, Decision)
        assert (got.node, got.score) == (before.node, before.score)
        snapshot.assume(incoming, got.node, got.placement)
    else:
        assert isinstance(before, Failure)
        assert got.message == before.message


@pytest.mark.parametrize("seed", range(12))
def test_indexed_counts_agree_with_every_node_judged_exhaustively(seed: int) -> None:
    rng = random.Random(seed)
    nodes = _random_nodes(rng, rng.randint(4, 14))
    snapshot = Snapshot(nodes, namespaces={"ns1": {"team": "x"}, "ns2": {}})
    fast, scan = build_framework(EVERY_NODE), scan_framework(EVERY_NODE)
    assumed: list[str] = []
    for i in range(40):
        incoming = _random_pod(rng, i)
        _step(rng, snapshot, incoming, fast, scan)
        if snapshot.is_assumed(incoming.key):
            assumed.append(incoming.key)
        roll = rng.random()
        if roll < 0.15 and assumed:  # a bind failed: the pod is forgotten
            snapshot.forget(assumed.pop(rng.randrange(len(assumed))))
        elif roll < 0.22:  # a what-if copy goes its own way; the original must not see it
            trial = snapshot.copy()
            _step(rng, trial, _random_pod(rng, 1000 + i), fast, scan)
        elif roll < 0.27:  # a node relabelled (moved to another zone) by the watch
            node = rng.choice(list(snapshot.nodes))
            labels = {**node.labels, ZONE: rng.choice(("z1", "z2", "z3"))}
            snapshot.replace(
                NodeInfo.build(
                    node.name, labels=labels, allocatable=node.allocatable, pods=node.pods
                )
            )
        elif roll < 0.45 and assumed:  # the watch shows a pod bound; another one has gone
            key = assumed.pop(rng.randrange(len(assumed)))
            found = [n for n in snapshot.nodes if any(p.key == key for p in n.pods)]
            if not found:  # its node was removed
                continue
            node = found[0]
            seen = dataclasses.replace(next(p for p in node.pods if p.key == key))
            snapshot.forget(key)
            node = snapshot.by_name[node.name]
            kept = [p for p in node.pods if not snapshot.is_assumed(p.key)]
            if kept and rng.random() < 0.5:
                kept.pop(rng.randrange(len(kept)))
            held = [p for p in node.pods if snapshot.is_assumed(p.key)]
            snapshot.replace(
                NodeInfo.build(
                    node.name,
                    labels=node.labels,
                    allocatable=node.allocatable,
                    pods=(*kept, seen, *held),
                )
            )
        elif roll < 0.48 and len(snapshot) > 3:
            gone = rng.choice(list(snapshot.nodes))
            snapshot.remove(gone.name)
            assumed = [k for k in assumed if snapshot.is_assumed(k)]


def _anti_replica(i: int) -> dict[str, Any]:
    return pod(
        f"r{i}", cpu="100m", memory=None, labels={"app": "r"}, spec={"affinity": _anti("r", HOST)}
    )


def _nodes(count: int) -> list[NodeInfo]:
    return [
        NodeInfo.build(
            f"node-{i:03d}",
            labels={ZONE: f"z{i % 3}"},
            allocatable={"cpu": 8000, "pods": 110},
        )
        for i in range(count)
    ]


def test_anti_affine_replicas_take_a_node_each_and_the_last_is_told_about_every_node() -> None:
    snapshot = Snapshot(_nodes(150))
    fw = build_framework()  # the adaptive default: not every node is visited per pod
    hosts = []
    for i in range(150):
        result = schedule_one(_anti_replica(i), snapshot, fw)
        assert isinstance(result, Decision), result
        snapshot.assume(_request(_anti_replica(i)), result.node, result.placement)
        hosts.append(result.node)
    assert len(set(hosts)) == 150
    extra = schedule_one(_anti_replica(150), snapshot, fw)
    assert isinstance(extra, Failure)
    assert extra.message == (
        "0/150 nodes are available: 150 node(s) didn't match pod anti-affinity rules."
    )
    # A replica whose bind failed is forgotten: its node is free again.
    snapshot.forget("default/r7")
    again = schedule_one(_anti_replica(150), snapshot, fw)
    assert isinstance(again, Decision)
    assert again.node == hosts[7]


def test_existing_replicas_refuse_a_plain_pod_with_their_label_on_their_nodes() -> None:
    nodes = _nodes(120)
    replica = PodInfo.from_request(_request(_anti_replica(0)), Placement())
    held = [n.rebuild([replica]) if i < 100 else n for i, n in enumerate(nodes)]
    snapshot = Snapshot(held)
    plain = pod("plain", cpu="100m", memory=None, labels={"app": "r"})
    result = schedule_one(plain, snapshot, build_framework())
    assert isinstance(result, Decision)
    assert result.node >= "node-100"
    assert result.verdicts["node-000"].status.reasons == (
        "node(s) didn't satisfy existing pods anti-affinity rules",
    )


def test_spread_on_zone_and_host_keeps_every_skew_within_one() -> None:
    snapshot = Snapshot(_nodes(30))
    fw = build_framework()
    spec = {"topologySpreadConstraints": [_spread("web", ZONE, 1), _spread("web", HOST, 1)]}
    for i in range(75):
        obj = pod(f"w{i}", cpu="100m", memory=None, labels={"app": "web"}, spec=spec)
        result = schedule_one(obj, snapshot, fw)
        assert isinstance(result, Decision), result
        snapshot.assume(_request(obj), result.node, result.placement)
        per_host = [len(n.pods) for n in snapshot.nodes]
        per_zone = [
            sum(len(n.pods) for n in snapshot.nodes if n.labels[ZONE] == z)
            for z in ("z0", "z1", "z2")
        ]
        assert max(per_host) - min(per_host) <= 1
        assert max(per_zone) - min(per_zone) <= 1
