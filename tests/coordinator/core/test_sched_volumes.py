"""VolumeBinding and VolumeRestrictions: pods with PersistentVolumeClaims placed as
kube-scheduler places them.

A claim missing, being deleted, not the pod's own (ephemeral) or unbound with Immediate binding
refuses the pod everywhere, with kube's message; a bound claim's PV must reach the node (its
``spec.nodeAffinity``); an unbound WaitForFirstConsumer claim needs an available PV the node
reaches, or a provisioner whose ``allowedTopologies`` admit the node, and the decision carries
what binding it there writes (the PV's ``claimRef``, or the claim's ``selected-node``). Objects
that cannot be read are named with the field. A ``ReadWriteOncePod`` claim a placed pod uses
refuses every node to another pod.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.plugins.volumebinding import (
    BIND_CONFLICT,
    NODE_CONFLICT,
    PV_NOT_EXIST,
    UNBOUND_IMMEDIATE,
)
from coordinator.core.plugins.volumerestrictions import RWOP_CONFLICT
from coordinator.core.registry import build_framework
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.snapshot.volumes import Volumes
from coordinator.core.status import Code
from devcluster.pods import pod
from tests.support.outcomes import decided, refused
from tests.support.sched_hw import bound_info, plain_node
from tests.support.volumes import ZONE, claim, local_pv, storage_class


def nodes() -> list[Any]:
    return [
        plain_node("node-a", labels={ZONE: "z1"}),
        plain_node("node-b", labels={ZONE: "z2"}),
        plain_node("node-c", labels={ZONE: "z2"}),
    ]


def volumes(*objs: dict[str, Any]) -> Volumes:
    out = Volumes()
    for obj in objs:
        out.put(obj["kind"], obj)
    return out


def with_claims(name: str, *claims: str, ephemeral: str = "", uid: str = "") -> dict[str, Any]:
    vols: list[dict[str, Any]] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    if ephemeral:
        vols.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    return pod(name, uid=uid or f"uid-{name}", spec={"volumes": vols})


def schedule(obj: dict[str, Any], store: Volumes) -> Decision | Failure:
    result = schedule_one(obj, Snapshot(nodes(), volumes=store), build_framework())
    assert isinstance(result, Decision | Failure), result
    return result


# --- the pod refused whatever the node ----------------------------------------------------------


def test_a_missing_claim_is_named_and_nothing_else_is_tried() -> None:
    failure = refused(schedule(with_claims("p", "data"), volumes()))
    assert failure.pod_status is not None
    assert failure.pod_status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert failure.pod_status.plugin == "VolumeBinding"
    assert 'persistentvolumeclaim "data" not found' in failure.message


def test_a_claim_being_deleted_refuses_the_pod() -> None:
    gone = claim("data", volume="pv-a", bound=True, deletionTimestamp="2026-11-30T08:00:00Z")
    failure = refused(schedule(with_claims("p", "data"), volumes(gone, local_pv("pv-a", None))))
    assert 'persistentvolumeclaim "data" is being deleted' in failure.message


def test_a_lost_claim_names_its_missing_volume() -> None:
    lost = claim("data", volume="pv-gone", bound=True)
    lost["status"]["phase"] = "Lost"
    failure = refused(schedule(with_claims("p", "data"), volumes(lost)))
    assert (
        'persistentvolumeclaim "data" bound to non-existent persistentvolume "pv-gone"'
        in failure.message
    )


def test_an_unbound_immediate_claim_waits_for_the_pv_controller() -> None:
    store = volumes(claim("data", cls="fast"), storage_class("fast", mode="Immediate"))
    failure = refused(schedule(with_claims("p", "data"), store))
    assert failure.pod_status is not None
    assert failure.pod_status.reasons == (UNBOUND_IMMEDIATE,)


def test_a_claim_without_a_class_binds_immediately() -> None:
    failure = refused(schedule(with_claims("p", "data"), volumes(claim("data", cls=None))))
    assert UNBOUND_IMMEDIATE in failure.message


def test_an_ephemeral_volume_waits_for_its_claim_then_must_own_it() -> None:
    obj = with_claims("p", ephemeral="scratch", uid="uid-p")
    waiting = refused(schedule(obj, volumes()))
    assert waiting.pod_status is not None
    assert waiting.pod_status.gated
    assert 'create the persistentvolumeclaim "p-scratch"' in waiting.message
    foreign = claim("p-scratch", ownerReferences=[{"uid": "someone", "controller": True}])
    not_ours = refused(schedule(obj, volumes(foreign, storage_class("local"))))
    assert "PVC default/p-scratch was not created for pod default/p (pod is not owner)" in (
        not_ours.message
    )
    ours = claim(
        "p-scratch",
        volume="pv-b",
        bound=True,
        ownerReferences=[{"uid": "uid-p", "controller": True, "kind": "Pod"}],
    )
    assert decided(schedule(obj, volumes(ours, local_pv("pv-b", "node-b")))).node == "node-b"


# --- bound claims: the PV's node affinity -------------------------------------------------------


def test_a_pod_follows_its_local_volume_to_its_node() -> None:
    store = volumes(
        claim("data", volume="pv-c", bound=True), local_pv("pv-c", "node-c", claim_ref=("data", ""))
    )
    decision = decided(schedule(with_claims("p", "data"), store))
    assert decision.node == "node-c"
    assert decision.volumes is None  # nothing to write: bound already
    assert decision.verdicts["node-a"].status.reasons == (NODE_CONFLICT,)


def test_every_node_out_of_the_volumes_reach_is_counted_with_kubes_reason() -> None:
    store = volumes(
        claim("data", volume="pv-x", bound=True),
        local_pv("pv-x", "node-gone", claim_ref=("data", "")),
    )
    failure = refused(schedule(with_claims("p", "data"), store))
    assert failure.message == f"0/3 nodes are available: 3 {NODE_CONFLICT}."


def test_a_bound_claims_missing_volume_is_kubes_pv_not_exist() -> None:
    store = volumes(claim("data", volume="pv-none", bound=True))
    failure = refused(schedule(with_claims("p", "data"), store))
    assert failure.message == f"0/3 nodes are available: 3 {PV_NOT_EXIST}."


def test_a_volume_with_malformed_node_affinity_is_named_with_its_field() -> None:
    bad = local_pv("pv-bad", "node-a")
    expr = bad["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    expr["operator"] = "Near"
    store = volumes(claim("data", volume="pv-bad", bound=True), bad)
    assert store.volume("pv-bad") is None
    failure = refused(schedule(with_claims("p", "data"), store))
    assert (
        'persistentvolume "pv-bad" of persistentvolumeclaim "data" is invalid: '
        "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator: "
        "unknown operator 'Near'"
    ) in failure.message


def test_a_claim_with_a_malformed_size_is_named_with_its_field_and_value() -> None:
    store = volumes(claim("data", size="ten gigs"))
    failure = refused(schedule(with_claims("p", "data"), store))
    assert 'persistentvolumeclaim "data" is invalid: spec.resources.requests.storage' in (
        failure.message
    )
    assert "ten gigs" in failure.message


# --- WaitForFirstConsumer: static PVs, then provisioning ---------------------------------------


def test_a_delayed_claim_takes_the_smallest_local_pv_that_fits_and_its_node() -> None:
    store = volumes(
        storage_class("local"),
        claim("data", size="50Gi"),
        local_pv("pv-a-small", "node-a", size="20Gi"),
        local_pv("pv-b-big", "node-b", size="200Gi"),
        local_pv("pv-c-fit", "node-c", size="60Gi"),
    )
    fw = build_framework()
    snapshot = Snapshot(nodes(), volumes=store)
    decision = decided(schedule_one(with_claims("p", "data"), snapshot, fw))
    assert decision.verdicts["node-a"].status.reasons == (BIND_CONFLICT,)
    assert decision.volumes is not None
    assert decision.volumes.node == decision.node
    ((pv, bound_claim),) = decision.volumes.bind
    assert (pv.name, bound_claim.name) == (
        {"node-b": "pv-b-big", "node-c": "pv-c-fit"}[decision.node],
        "data",
    )
    assert decision.volumes.provision == ()


def test_two_claims_of_one_pod_never_get_the_same_pv() -> None:
    store = volumes(
        storage_class("local"),
        claim("one"),
        claim("two"),
        local_pv("pv-b", "node-b"),
        local_pv("pv-c1", "node-c"),
        local_pv("pv-c2", "node-c"),
    )
    decision = decided(schedule(with_claims("p", "one", "two"), store))
    assert decision.node == "node-c"
    assert decision.volumes is not None
    assert sorted(pv.name for pv, _ in decision.volumes.bind) == ["pv-c1", "pv-c2"]


@pytest.mark.parametrize(
    ("pv_changes", "why"),
    [
        ({"spec": {"accessModes": ["ReadOnlyMany"]}}, "access modes"),
        ({"spec": {"storageClassName": "other"}}, "class"),
        ({"spec": {"volumeMode": "Block"}}, "volume mode"),
        ({"status": {"phase": "Released"}}, "phase"),
    ],
)
def test_a_pv_that_does_not_match_the_claim_is_not_taken(
    pv_changes: dict[str, dict[str, Any]], why: str
) -> None:
    pv = local_pv("pv-b", "node-b")
    for part, values in pv_changes.items():
        pv[part].update(values)
    store = volumes(storage_class("local"), claim("data"), pv)
    failure = refused(schedule(with_claims("p", "data"), store))
    assert failure.message == f"0/3 nodes are available: 3 {BIND_CONFLICT}.", why


def test_a_delayed_claim_is_provisioned_where_the_class_allows() -> None:
    store = volumes(
        storage_class("nvme", provisioner="rancher.io/local-path", zones=("z2",)),
        claim("data", cls="nvme"),
    )
    decision = decided(schedule(with_claims("p", "data"), store))
    assert decision.node in ("node-b", "node-c")
    assert decision.verdicts["node-a"].status.reasons == (BIND_CONFLICT,)
    assert decision.volumes is not None
    assert [c.name for c in decision.volumes.provision] == ["data"]
    assert decision.volumes.bind == ()


def test_without_a_provisioner_or_a_pv_a_delayed_claim_fits_nowhere() -> None:
    store = volumes(storage_class("local"), claim("data"))
    failure = refused(schedule(with_claims("p", "data"), store))
    assert failure.message == f"0/3 nodes are available: 3 {BIND_CONFLICT}."


def test_a_bound_and_a_delayed_claim_both_count_on_each_node() -> None:
    store = volumes(
        storage_class("local"),
        claim("logs", volume="pv-logs", bound=True),
        local_pv("pv-logs", "node-a", claim_ref=("logs", "")),
        claim("data"),
        local_pv("pv-data", "node-b"),
    )
    failure = refused(schedule(with_claims("p", "logs", "data"), store))
    assert failure.statuses["node-a"].reasons == (BIND_CONFLICT,)
    assert failure.statuses["node-b"].reasons == (NODE_CONFLICT,)
    assert failure.statuses["node-c"].reasons == (NODE_CONFLICT, BIND_CONFLICT)


def test_a_pod_without_claims_is_not_touched() -> None:
    assert decided(schedule(pod("plain"), volumes())).volumes is None


def test_a_claim_without_a_name_is_an_invalid_pod_naming_the_field() -> None:
    obj = pod("p", spec={"volumes": [{"name": "v", "persistentVolumeClaim": {}}]})
    failure = refused(schedule(obj, volumes()))
    assert "spec.volumes[0].persistentVolumeClaim.claimName: must not be empty" in (failure.message)


# --- VolumeRestrictions: ReadWriteOncePod -------------------------------------------------------


def rwop_cluster(holder: dict[str, Any]) -> Snapshot:
    info = bound_info(holder, node="node-a")
    assert info is not None
    a, *others = nodes()
    return Snapshot(
        [a.rebuild((info,)), *others],
        volumes=volumes(
            claim("solo", volume="pv-1", bound=True, modes=("ReadWriteOncePod",)),
            claim("shared", volume="pv-2", bound=True),
            local_pv("pv-1", None),
            local_pv("pv-2", None),
        ),
    )


def test_a_read_write_once_pod_claim_in_use_refuses_every_node() -> None:
    snapshot = rwop_cluster(with_claims("holder", "solo"))
    failure = refused(schedule_one(with_claims("p", "solo"), snapshot, build_framework()))
    assert failure.message == f"0/3 nodes are available: 3 {RWOP_CONFLICT}."
    assert failure.unresolvable  # Topos's preemption cannot free a claim


def test_a_read_write_once_claim_may_be_shared_and_the_holder_is_not_its_own_conflict() -> None:
    snapshot = rwop_cluster(with_claims("holder", "shared", "solo"))
    fw = build_framework()
    assert decided(schedule_one(with_claims("p", "shared"), snapshot, fw))
    # the holder itself, decided again (its uid): no conflict with itself
    assert decided(schedule_one(with_claims("holder", "shared", "solo"), snapshot, fw))
