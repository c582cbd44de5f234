"""Gathering's own limits on the production engine (the replay): two NVL72-style racks of four
trays and one HGX node. ``small``, a 2-tray gang (a Job whose ``podFailurePolicy`` ignores
``DisruptionTarget``: its pods may move), runs in rack 1; rack 2 holds a movable 4-GPU service
(a ReplicaSet's) and two pods no controller owns, half the HGX node is held too. ``train``, a
4-tray gang of the same kind, fits only split over rack 1's two free trays, rack 2's last tray
and the HGX node. Gathering moves ``small`` out of rack 1 (onto rack 2's tray and the HGX node:
split in its turn) and ``train`` runs in rack 1; unbounded, ``small`` recreated then asks to be
gathered too, and the service is moved out of rack 2 for it. The hour's cap of pods gathering
moves (``gather_moves_per_hour``, ``defragmentation.gatherMovesPerHour``) stops that."""

from __future__ import annotations

from typing import Any

from coordinator.core.preemption.defrag import DefragSettings
from coordinator.engine.gangs.service import GangSettings
from coordinator.forecast.engine import EngineSettings
from coordinator.sim import Job, RunResult, Simulator, make_policy
from coordinator.sim.pods import NAMESPACE
from coordinator.sim.replay import ReplaySettings
from tests.support.sim_cluster import racks_of, two_nvl72_racks

HOUR = 3600.0


def _jobs() -> list[Job]:
    return [
        # everything but rack 2's third tray taken while the service arrives, then rack 1 freed
        # for small: the service lands on r2-003, small in rack 1
        *(Job(job_id=f"fill-r1-00{i}", arrival_s=0, duration_s=5, gpus=4) for i in (1, 2, 3, 4)),
        *(Job(job_id=f"hold-r2-00{i}", arrival_s=0, duration_s=10 * HOUR, gpus=4) for i in (1, 2)),
        Job(job_id="fill-r2-004", arrival_s=0, duration_s=30, gpus=4),
        Job(job_id="hold-hgx-001", arrival_s=0, duration_s=10 * HOUR, gpus=4),
        Job(job_id="fill-hgx-001", arrival_s=0, duration_s=30, gpus=4),
        Job(job_id="svc", arrival_s=1, duration_s=10 * HOUR, gpus=4),
        Job(job_id="small", arrival_s=10, duration_s=10 * HOUR, gpus=4, gang_size=2),
        Job(job_id="train", arrival_s=120, duration_s=HOUR, gpus=4, gang_size=4),
    ]


def _prepare(sim: Simulator) -> None:
    """``fill-*`` and ``hold-*`` pods pinned to their node by name and owned by nothing; the
    service a ReplicaSet's; each gang a Job's whose ``podFailurePolicy`` ignores
    ``DisruptionTarget`` (movable whole)."""
    out: list[list[dict[str, Any]]] = []
    jobs = []
    for job, manifests in zip(sim.jobs, sim.manifests, strict=True):
        changed = []
        kind = ("Job", "batch/v1") if job.gang_size > 1 else ("ReplicaSet", "apps/v1")
        ref = {"apiVersion": kind[1], "kind": kind[0], "name": job.job_id, "uid": job.job_id}
        for m in manifests:
            meta, spec = dict(m["metadata"]), dict(m["spec"])
            if job.job_id.startswith(("fill-", "hold-")):
                spec["nodeSelector"] = {"kubernetes.io/hostname": job.job_id.split("-", 1)[1]}
            else:
                meta["ownerReferences"] = [{**ref, "controller": True}]
            changed.append({**m, "metadata": meta, "spec": spec})
        out.append(changed)
        if job.gang_size > 1:
            ignore = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
            jobs.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": job.job_id, "namespace": NAMESPACE, "uid": job.job_id},
                    "spec": {
                        "parallelism": job.gang_size,
                        "completions": job.gang_size,
                        "podFailurePolicy": {"rules": [ignore]},
                    },
                }
            )
    sim.manifests = tuple(out)
    sim.job_objects = tuple(jobs)


def _replay(**limits: Any) -> RunResult:
    # the gangs' work is cheap here: only the limits under test refuse a move
    defrag = DefragSettings(**({"mode": "onDemand", "max_loss_ratio": 10.0} | limits))
    settings = ReplaySettings(engine=EngineSettings(gangs=GangSettings(defrag=defrag)))
    sim = Simulator(two_nvl72_racks(hgx=1), _jobs(), settings=settings)
    _prepare(sim)
    return sim.run(make_policy("topos"))


def _moved(result: RunResult, job_id: str) -> int:
    """How many times a run of ``job_id`` was cut short (moved)."""
    return len({o.start_s for o in result.interrupted if o.job.job_id == job_id})


def test_unbounded_the_gang_moved_out_is_gathered_in_its_turn() -> None:
    result = _replay()
    assert _moved(result, "small") == 1
    assert _moved(result, "svc") == 1  # moved out of rack 2 for small
    assert racks_of(result, "train") == {"r1"}
    assert racks_of(result, "small") == {"r2"}
    assert result.defrags == 2


def test_the_hourly_cap_refuses_a_gathering_that_moves_more_pods() -> None:
    result = _replay(gather_moves_per_hour=1)  # train's gathering moves 2 pods
    assert not result.interrupted
    assert result.defrags == 0
    assert racks_of(result, "train") == {"r1", "r2", "hgx"}


def test_the_hourly_cap_lets_one_gathering_through_and_not_the_next() -> None:
    result = _replay(gather_moves_per_hour=2)  # train's 2 moves fit; small's third does not
    assert _moved(result, "small") == 1
    assert _moved(result, "svc") == 0
    assert racks_of(result, "train") == {"r1"}
    assert racks_of(result, "small") == {"r2", "hgx"}
    assert result.defrags == 1


def test_gathering_has_its_own_loss_allowance() -> None:
    # small's 110 s on 8 GPUs are lost by moving it: over gathering's allowance of none
    result = _replay(gather_loss_ratio=0.0)
    assert not result.interrupted
    assert racks_of(result, "train") == {"r1", "r2", "hgx"}
    # and within gathering's allowance though over the waiting workloads' one
    result = _replay(max_loss_ratio=0.0, gather_loss_ratio=10.0)
    assert racks_of(result, "train") == {"r1"}
