"""The defragmentation benchmark's inputs: services are a ReplicaSet's (movable), gangs stay
bare, and the trace has both in the window asked for."""

from __future__ import annotations

from benchmarks.defrag_replay import CLUSTER, FLEETS, LARGE, movable, topology_of, trace
from coordinator.core.preemption.defrag import movability
from coordinator.sim import Simulator, build_nodes, parse_cluster


def test_services_are_movable_and_gangs_are_not() -> None:
    jobs = trace(2.0, 7, 150.0)
    assert any(j.gang_size == LARGE for j in jobs)
    assert any(j.gang_size == 1 for j in jobs)
    assert all(j.arrival_s < 2 * 3600 for j in jobs if j.gang_size == LARGE)
    sim = Simulator(build_nodes(parse_cluster(CLUSTER), topology_of), jobs)
    movable(sim)
    for job, manifests in zip(sim.jobs, sim.manifests, strict=True):
        for m in manifests:
            refs = m["metadata"].get("ownerReferences") or []
            kind = refs[0]["kind"] if refs else ""
            assert (movability(kind, {}) is True) == (job.gang_size == 1)


def test_spread_services_are_replicas_of_a_few_fleets_asking_to_be_spread() -> None:
    jobs = trace(24.0, 7, 400.0, "spread")
    assert all(j.arrival_s >= 3 * 3600 for j in jobs if j.gang_size == LARGE)
    assert all(j.gpus == 1 for j in jobs if j.gang_size == 1)
    sim = Simulator(build_nodes(parse_cluster(CLUSTER), topology_of), jobs)
    movable(sim, spread=True)
    owners = set()
    for job, manifests in zip(sim.jobs, sim.manifests, strict=True):
        if job.gang_size != 1:
            assert "topologySpreadConstraints" not in manifests[0]["spec"]
            continue
        (m,) = manifests
        owner = m["metadata"]["ownerReferences"][0]["name"]
        owners.add(owner)
        (constraint,) = m["spec"]["topologySpreadConstraints"]
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
        assert constraint["labelSelector"]["matchLabels"] == {"app": owner}
        assert m["metadata"]["labels"]["app"] == owner
    assert owners == {f"fleet-{k}" for k in range(FLEETS)}
