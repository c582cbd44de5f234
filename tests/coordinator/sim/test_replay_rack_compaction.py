"""Background compaction by rack on the production engine (the replay): two NVL72-style racks of
four trays. A movable 2-tray gang (a Job whose ``podFailurePolicy`` ignores ``DisruptionTarget``)
runs in rack 1 while rack 2 is full; then rack 2 holds only a pinned 2-tray gang nothing
recreates. Each rack is half used, 8 GPUs stranded in each. With ``compactRacks`` the engine
moves the movable gang whole into rack 2's free trays and rack 1 goes idle; without it the gang
stays and both racks stay half used."""

from __future__ import annotations

from typing import Any

from coordinator.core.preemption.defrag import DefragSettings
from coordinator.engine.gangs.service import GangSettings
from coordinator.forecast.engine import EngineSettings
from coordinator.sim import Job, RunResult, Simulator, make_policy
from coordinator.sim.replay import ReplaySettings
from tests.support.nvl72 import clique
from tests.support.sim_cluster import racks_of, two_nvl72_racks

HOUR = 3600.0


def _jobs() -> list[Job]:
    return [
        # rack 2 full while the movable gang arrives, so that it lands in rack 1
        *(Job(job_id=f"fill-r2-00{i}", arrival_s=0, duration_s=30, gpus=4) for i in (1, 2, 3, 4)),
        Job(job_id="train", arrival_s=10, duration_s=10 * HOUR, gpus=4, gang_size=2),
        # then a gang pinned to rack 2, owned by nothing: it never moves
        Job(job_id="pinned", arrival_s=60, duration_s=10 * HOUR, gpus=4, gang_size=2),
    ]


def _prepare(sim: Simulator) -> None:
    """``fill-*`` pinned to their tray, ``pinned`` to rack 2, both owned by nothing; ``train``
    a Job's that ignores ``DisruptionTarget`` (movable)."""
    out: list[list[dict[str, Any]]] = []
    for job, manifests in zip(sim.jobs, sim.manifests, strict=True):
        changed = []
        for m in manifests:
            meta, spec = dict(m["metadata"]), dict(m["spec"])
            if job.job_id.startswith("fill-"):
                spec["nodeSelector"] = {"kubernetes.io/hostname": job.job_id.split("-", 1)[1]}
            elif job.job_id == "pinned":
                spec["nodeSelector"] = {"nvidia.com/gpu.clique": clique(2)}
            else:
                ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job"}
                meta["ownerReferences"] = [{**ref, "controller": True}]
            changed.append({**m, "metadata": meta, "spec": spec})
        out.append(changed)
    sim.manifests = tuple(out)
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    sim.job_objects = (
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": "sim", "uid": "job"},
            "spec": {"parallelism": 2, "completions": 2, "podFailurePolicy": policy},
        },
    )


def _replay(racks: bool) -> RunResult:
    defrag = DefragSettings(mode="background", compact_racks=racks)
    settings = ReplaySettings(engine=EngineSettings(gangs=GangSettings(defrag=defrag)))
    sim = Simulator(two_nvl72_racks(), _jobs(), settings=settings)
    _prepare(sim)
    return sim.run(make_policy("topos"))


def test_compaction_moves_a_gang_whole_so_that_its_rack_goes_idle() -> None:
    result = _replay(racks=True)
    assert racks_of(result, "pinned") == {"r2"}
    assert racks_of(result, "train") == {"r2"}  # moved into rack 2's free trays: rack 1 idle
    moved = [o for o in result.interrupted if o.job.job_id == "train"]
    assert len(moved) == 1
    assert all(node.startswith("r1-") for node in moved[0].nodes)
    # Due at 60 s, the second "pinned" arrives: compaction runs once it is placed, not a whole
    # interval (60 s) later for seeing a pod pending.
    assert 60 <= moved[0].end_s <= 61
    assert result.compacted_pods == 2
    assert result.lost_gpu_s > 0


def test_without_compact_racks_both_racks_stay_half_used() -> None:
    result = _replay(racks=False)
    assert racks_of(result, "train") == {"r1"}
    assert racks_of(result, "pinned") == {"r2"}
    assert not result.interrupted
    assert result.compacted_pods == 0
