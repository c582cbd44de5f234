"""Defragmentation in the replay, counted as ``benchmarks/defrag_replay.py`` reports it: a gang
waits for whole nodes while three movable 1-GPU services sit one per node; the engine moves them
together, the gang starts, and the result counts one defragmentation, the pods it moved and the
nodes it emptied (pods moved per freed node), where the same replay without defragmentation
counts none and the gang waits for the services to end."""

from __future__ import annotations

from typing import Any

from coordinator.core.preemption.defrag import DefragSettings
from coordinator.engine.gangs.service import GangSettings
from coordinator.forecast.engine import EngineSettings
from coordinator.sim import Job, RunResult, Simulator, make_policy
from coordinator.sim.replay import ReplaySettings
from tests.support.sim_cluster import make_cluster

CLUSTER = "nodes: [{profile: dgx-h100, count: 3}]"
HOUR = 3600.0


def _services_of_one_deployment(sim: Simulator) -> None:
    """The 1-GPU jobs become a ReplicaSet's pods asking to be spread over nodes."""
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-web"}
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    out: list[tuple[dict[str, Any], ...]] = []
    for job, manifests in zip(sim.jobs, sim.manifests, strict=True):
        if job.gang_size == 1:
            manifests = tuple(
                {
                    **m,
                    "metadata": {
                        **m["metadata"],
                        "labels": {**m["metadata"].get("labels", {}), "app": "web"},
                        "ownerReferences": [{**ref, "controller": True}],
                    },
                    "spec": {**m["spec"], "topologySpreadConstraints": [spread]},
                }
                for m in manifests
            )
        out.append(tuple(manifests))
    sim.manifests = tuple(out)


def _replay(mode: str) -> RunResult:
    jobs = [Job(job_id=f"web-{i}", arrival_s=i, duration_s=10 * HOUR, gpus=1) for i in range(3)]
    jobs.append(Job(job_id="train", arrival_s=60, duration_s=HOUR, gpus=8, gang_size=2))
    spec, nodes = make_cluster(CLUSTER)
    defrag = DefragSettings(mode=mode, max_loss_ratio=10.0)  # the services' work is cheap here
    settings = ReplaySettings(engine=EngineSettings(gangs=GangSettings(defrag=defrag)))
    sim = Simulator(nodes, jobs, cost_model=spec.cost_model, settings=settings)
    _services_of_one_deployment(sim)
    return sim.run(make_policy("topos"))


def test_a_defragmentation_is_counted_with_the_pods_it_moved_and_the_nodes_it_freed() -> None:
    result = _replay("onDemand")
    train = next(o for o in result.outcomes.values() if o.job.job_id == "train")
    assert train.start_s < HOUR  # not waiting the services' 10 h
    assert result.defrags == 1
    assert result.freed_nodes == 2  # the gang's two whole nodes
    assert result.moved_pods == 2  # one service off each of them
    assert result.lost_pods == 2
    assert result.compacted_pods == 0  # on demand only: no background compaction


def test_without_defragmentation_nothing_is_counted_and_the_gang_waits() -> None:
    result = _replay("off")
    train = next(o for o in result.outcomes.values() if o.job.job_id == "train")
    assert train.start_s >= 10 * HOUR
    assert (result.defrags, result.moved_pods, result.freed_nodes) == (0, 0, 0)
