"""kube-scheduler's default topology spreading (PodTopologySpread ``defaultingType: System``):
replicas that declare no ``topologySpreadConstraints`` are still spread over nodes and zones, by
the selector of the Services and controllers that select them; ``List`` replaces the pair."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.app.config.scheduling import load_config
from coordinator.core.framework.config import ConfigError
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision
from coordinator.core.plugins.spreadargs import SYSTEM_SPREAD, SpreadDefaults
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.snapshot.workloads import WorkloadSelectors
from devcluster.pods import pod
from tests.support.sched_hw import dgx_h100, gpu_node, place_all, plain_node, request

ZONE = "topology.kubernetes.io/zone"


def replica(
    i: int, *, owner: str = "web-abc", kind: str = "ReplicaSet", **kw: Any
) -> dict[str, Any]:
    """A Deployment's replica as its ReplicaSet makes it: no requests, no constraints."""
    obj = pod(f"web-{i}", cpu=None, memory=None, labels={"app": "web", "hash": "abc"}, **kw)
    api = "v1" if kind == "ReplicationController" else "apps/v1"
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api, "kind": kind, "name": owner, "uid": "u1", "controller": True}
    ]
    return obj


def replica_set(name: str = "web-abc") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web", "hash": "abc"}}},
    }


def spread_only(config: str = "") -> Framework:
    """The default framework (or ``config``'s) without NodeResourcesFit's score: request-less
    replicas are spread by it too (kube's non-zero requests), and these tests watch the
    spreading plugin alone."""
    return build_framework(load_config(config + "\nweights: {node_resources: 0}"))


def nodes_of(result: list[object]) -> list[str]:
    out = []
    for r in result:
        assert isinstance(r, Decision), getattr(r, "message", r)
        out.append(r.node)
    return out


def test_replicas_of_a_replica_set_take_a_node_each() -> None:
    workloads = WorkloadSelectors()
    workloads.put("ReplicaSet", replica_set())
    snapshot = Snapshot([plain_node(f"n{i}") for i in range(3)], workloads=workloads)
    placed = nodes_of(place_all([replica(i) for i in range(3)], snapshot, spread_only()))
    assert sorted(placed) == ["n0", "n1", "n2"]


@pytest.mark.parametrize("kind", ["Service", "StatefulSet", "ReplicationController"])
def test_a_service_or_other_controller_selects_the_siblings_too(kind: str) -> None:
    workloads = WorkloadSelectors()
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": "web"}}}
    if kind in ("Service", "ReplicationController"):
        spec = {"selector": {"app": "web"}}
    workloads.put(kind, {"metadata": {"name": "web-abc", "namespace": "default"}, "spec": spec})
    owner = "ReplicaSet" if kind == "Service" else kind  # a Service selects, it owns nothing
    snapshot = Snapshot([plain_node(f"n{i}") for i in range(3)], workloads=workloads)
    replicas = [replica(i, kind=owner) for i in range(3)]
    placed = nodes_of(place_all(replicas, snapshot, spread_only()))
    assert sorted(placed) == ["n0", "n1", "n2"]


def test_gpu_replicas_on_gpu_nodes_are_spread_too() -> None:
    workloads = WorkloadSelectors()
    workloads.put("ReplicaSet", replica_set())
    snapshot = Snapshot(
        [gpu_node(f"g{i}", dgx_h100(f"g{i}")) for i in range(3)], workloads=workloads
    )
    placed = nodes_of(place_all([replica(i) for i in range(3)], snapshot, spread_only()))
    assert sorted(placed) == ["g0", "g1", "g2"]


def test_nothing_selecting_the_pod_means_no_default_spreading() -> None:
    # As kube-scheduler: an empty default selector spreads nothing (the replicas' owner is
    # unknown: its ReplicaSet is not among the workloads).
    snapshot = Snapshot([plain_node(f"n{i}") for i in range(3)])
    placed = nodes_of(place_all([replica(i) for i in range(3)], snapshot, spread_only()))
    assert placed == ["n0", "n0", "n0"]


def test_a_pod_with_its_own_constraints_is_spread_by_those_only() -> None:
    workloads = WorkloadSelectors()
    workloads.put("ReplicaSet", replica_set())
    # Its own constraint counts pods of another app, none placed: every node alike, so the
    # default hostname spreading (which would move it off n0) must not apply.
    own = {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "other"}},
            }
        ]
    }
    snapshot = Snapshot([plain_node(f"n{i}") for i in range(3)], workloads=workloads)
    placed = nodes_of(place_all([replica(i, spec=own) for i in range(3)], snapshot, spread_only()))
    assert placed == ["n0", "n0", "n0"]


def _spread_scores(config: str | None) -> dict[str, float]:
    """PodTopologySpread's weighted score per node for a third replica, two already on the
    node without a zone label."""
    workloads = WorkloadSelectors()
    workloads.put("ReplicaSet", replica_set())
    nodes = [
        plain_node("a0", labels={ZONE: "a"}),
        plain_node("a1", labels={ZONE: "a"}),
        plain_node("bare"),
    ]
    snapshot = Snapshot(nodes, workloads=workloads)
    for i in range(2):
        snapshot.assume(request(replica(i)), "bare", Placement())
    (result,) = place_all([replica(2)], snapshot, build_framework(load_config(config)))
    assert isinstance(result, Decision)
    return {n: result.verdicts[n].scores["PodTopologySpread"] for n in ("a0", "bare")}


def test_system_still_spreads_nodes_without_a_zone_per_hostname() -> None:
    # kube's arithmetic (scoring.go), weight 2. Feasible: 3 nodes, zones {a, ""}.
    # a0:   hostname 0·log(5) + (3-1) + zone 0·log(4) + (5-1) = 6
    # bare: hostname 2·log(5) + (3-1) = 5.2 → 5; no zone label: that constraint is skipped
    # normalised 100·(max + min - s) // max: a0 83, bare 100
    assert _spread_scores(None) == {"a0": 2 * 83, "bare": 2 * 100}


def test_list_defaults_score_a_node_lacking_a_key_zero() -> None:
    # Both keys required: bare is ignored (0); a0 and a1 both score 0 raw → 100.
    assert _spread_scores(LIST_BOTH) == {"a0": 2 * 100, "bare": 0}


LIST_BOTH = """
profiles:
- pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway}
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
"""


def test_list_without_constraints_spreads_nothing() -> None:
    config = "profiles: [{pluginConfig: [{name: PodTopologySpread, args: {defaultingType: List}}]}]"
    workloads = WorkloadSelectors()
    workloads.put("ReplicaSet", replica_set())
    snapshot = Snapshot([plain_node(f"n{i}") for i in range(3)], workloads=workloads)
    placed = nodes_of(place_all([replica(i) for i in range(3)], snapshot, spread_only(config)))
    assert placed == ["n0", "n0", "n0"]


def test_a_controller_reference_of_another_api_version_selects_nothing() -> None:
    workloads = WorkloadSelectors()
    workloads.put("ReplicaSet", replica_set())
    obj = replica(0)
    obj["metadata"]["ownerReferences"][0]["apiVersion"] = "extensions/v1beta1"
    assert workloads.default_selector(request(obj)) is None
    assert workloads.default_selector(request(replica(0))) is not None
    workloads.remove("ReplicaSet", "default", "web-abc")
    assert workloads.default_selector(request(replica(0))) is None


def _args(args: str) -> str:
    return f"profiles: [{{pluginConfig: [{{name: PodTopologySpread, args: {args}}}]}}]"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            "{defaultingType: Bogus}",
            "profiles[0].pluginConfig[0].args.defaultingType: unsupported value 'Bogus' "
            "(expected System or List)",
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 0, topologyKey: zone, "
            "whenUnsatisfiable: ScheduleAnyway}]}",
            "profiles[0].pluginConfig[0].args.defaultConstraints[0].maxSkew: 0 is not a whole "
            "number of at least 1",
        ),
        (
            "{defaultConstraints: [{maxSkew: 1, topologyKey: zone, "
            "whenUnsatisfiable: ScheduleAnyway}]}",
            "profiles[0].pluginConfig[0].args.defaultingType: 'System' cannot be used with "
            "defaultConstraints (set defaultingType: List to use your own)",
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: zone, "
            "whenUnsatisfiable: Sometimes}]}",
            "profiles[0].pluginConfig[0].args.defaultConstraints[0].whenUnsatisfiable: "
            "unsupported value 'Sometimes' (expected DoNotSchedule or ScheduleAnyway)",
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: zone, "
            "whenUnsatisfiable: ScheduleAnyway, labelSelector: {}}]}",
            "profiles[0].pluginConfig[0].args.defaultConstraints[0].labelSelector: a default "
            "constraint must not define a selector (it is deduced for each pod from the "
            "Services and controllers selecting it)",
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: zone, "
            "whenUnsatisfiable: ScheduleAnyway}, {maxSkew: 2, topologyKey: zone, "
            "whenUnsatisfiable: ScheduleAnyway}]}",
            "profiles[0].pluginConfig[0].args.defaultConstraints[1]: duplicate "
            "{zone, ScheduleAnyway}",
        ),
        (
            "{defaultingType: List, defaultConstraints: [{maxSkew: 1, topologyKey: 'bad key!', "
            "whenUnsatisfiable: ScheduleAnyway}]}",
            "profiles[0].pluginConfig[0].args.defaultConstraints[0].topologyKey: 'bad key!' is "
            "not a valid label key",
        ),
    ],
)
def test_bad_args_name_the_key_and_the_value(args: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_args(args))
    assert str(err.value) == message


def test_args_read_from_a_kube_scheduler_configuration() -> None:
    config = load_config(
        """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: topos
  pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints:
      - {maxSkew: 2, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
"""
    )
    spread = config.args["PodTopologySpread"]
    assert isinstance(spread, SpreadDefaults)
    (c,) = spread.constraints
    assert (spread.defaulting_type, c.max_skew, c.when_unsatisfiable) == (
        "List",
        2,
        "DoNotSchedule",
    )
    assert "PodTopologySpread" not in load_config(None).args  # its args type's defaults
    assert SpreadDefaults() == SYSTEM_SPREAD


def test_consolidated_replicas_are_packed_not_spread_by_the_defaults() -> None:
    """A Deployment annotated ``topos.io/placement: consolidated`` (inherited by its replicas with
    their group) packs replicas placed one at a time: the default spreading, kube's guess for
    pods that say nothing, does not override what the workload says."""
    workloads = WorkloadSelectors()
    workloads.put("ReplicaSet", replica_set())
    snapshot = Snapshot(
        [gpu_node(f"g{i}", dgx_h100(f"g{i}")) for i in range(3)], workloads=workloads
    )

    def gpu_replica(i: int, placement: str) -> dict[str, Any]:
        obj = replica(i, gpus=2)
        obj["metadata"]["labels"].update({"topos.io/gang": "web", "topos.io/gang-min": "1"})
        obj["metadata"]["annotations"] = {"topos.io/placement": placement}
        return obj

    packed = nodes_of(place_all([gpu_replica(i, "consolidated") for i in range(3)], snapshot))
    assert len(set(packed)) == 1, packed
    snapshot = Snapshot(
        [gpu_node(f"g{i}", dgx_h100(f"g{i}")) for i in range(3)], workloads=workloads
    )
    spread = nodes_of(place_all([gpu_replica(i, "distributed") for i in range(3)], snapshot))
    assert sorted(spread) == ["g0", "g1", "g2"]
