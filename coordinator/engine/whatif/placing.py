"""Placing what-if pods on a snapshot copy: pods grouped into scheduling units (a gang placed as a
whole with :func:`~coordinator.core.gangs.cycle.schedule_gang`, a lone pod with
``schedule_one``), in order, each seeing the ones before — the same calls, profiles and
nominated room the loop uses. Only the copy given is changed (assumptions)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.linkhealth import health_notes, worst_effective_link
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.strategy import IntentError, PlacementIntent
from coordinator.core.framework.cycle import schedule_one
from coordinator.core.framework.profiles import Profiles
from coordinator.core.framework.results import Decision, Failure
from coordinator.core.gangs.cycle import GangDecision, schedule_gang
from coordinator.core.gangs.identity import GangSpec, gang_of, topology_field
from coordinator.core.gangs.plan import gang_intent
from coordinator.core.gangs.slices import with_gang_topology
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import Status
from coordinator.engine.nominations import Nominations
from coordinator.engine.whatif.model import PodPlacement, UnitAnswer

__all__ = ["Outcome", "Unit", "WhatIfError", "answer_of", "place", "units_of"]


class WhatIfError(ValueError):
    """Input the what-if cannot use; the message names the key and the value."""


@dataclass(slots=True)
class Unit:
    """A gang (``gang`` set) or one pod, as the loop would schedule it."""

    name: str
    pods: list[PodRequest]
    objs: list[dict[str, Any]]
    gang: GangSpec | None = None
    intent: PlacementIntent | None = None
    #: Why it cannot be planned at all (a PodGroup that does not exist, members missing).
    problem: str | None = None

    @property
    def priority(self) -> int:
        return max(p.priority for p in self.pods)


@dataclass(slots=True)
class Outcome:
    unit: Unit
    decisions: list[Decision] = field(default_factory=list)
    failure: Failure | Status | None = None
    message: str = ""

    @property
    def fits(self) -> bool:
        return self.failure is None and self.unit.problem is None


def units_of(
    objs: Sequence[dict[str, Any]], podgroups: Mapping[tuple[str, str], Mapping[str, Any]]
) -> list[Unit]:
    """The scheduling units of ``objs`` (in order of their first pod); :class:`WhatIfError` for
    a pod whose spec or gang keys cannot be read."""
    units: list[Unit] = []
    gangs: dict[tuple[str, str], Unit] = {}
    for obj in objs:
        request = parse_pod(obj)
        if isinstance(request, PodSpecError):
            raise WhatIfError(f"pod {request.pod_key}: {request.text}")
        spec = gang_of(obj, podgroups)
        if spec is None:
            units.append(Unit(name=f"pod {request.key}", pods=[request], objs=[obj]))
            continue
        if not isinstance(spec, GangSpec):
            if not spec.waiting:
                raise WhatIfError(f"pod {request.key}: {spec.message}")
            key = (request.namespace, spec.key.name if spec.key else request.key)
            unit = gangs.get(key)
            if unit is None:
                name = f"pod group {key[0]}/{key[1]}"
                unit = gangs[key] = Unit(name=name, pods=[], objs=[], problem=spec.message)
                units.append(unit)
            unit.pods.append(request)
            unit.objs.append(obj)
            continue
        key = (spec.key.namespace, spec.key.name)
        unit = gangs.get(key)
        if unit is None:
            unit = gangs[key] = Unit(name=f"pod group {spec.key}", pods=[], objs=[], gang=spec)
            units.append(unit)
        unit.pods.append(request)
        unit.objs.append(obj)
    for unit in gangs.values():
        if unit.gang is None:
            continue
        intent = gang_intent((o.get("metadata") or {}).get("annotations") or {} for o in unit.objs)
        if isinstance(intent, IntentError):
            raise WhatIfError(f"{unit.name}: {intent.message}")
        unit.intent = intent
        if len(unit.pods) < unit.gang.min_member:
            unit.problem = (
                f"waiting for pod group {unit.gang.key.name}: 0/{unit.gang.min_member} members "
                f"placed (waiting for all {unit.gang.min_member} pods to exist: "
                f"{len(unit.pods)} given)"
            )
    return units


def place(
    units: Sequence[Unit],
    snapshot: Snapshot,
    *,
    profiles: Profiles,
    nominations: Nominations,
    keys: DomainKeys | None,
) -> list[Outcome]:
    """Place every unit on ``snapshot`` in order (what fits is assumed there)."""
    out: list[Outcome] = []
    for unit in units:
        outcome = Outcome(unit)
        out.append(outcome)
        if unit.problem is not None:
            outcome.message = unit.problem
            continue
        uids = {p.uid for p in unit.pods}
        view = nominations.overlay(snapshot, unit.priority, uids)
        framework = profiles.for_pod(unit.objs[0])
        if unit.gang is None:
            result = schedule_one(unit.pods[0], view, framework)
            if isinstance(result, Failure):
                outcome.failure, outcome.message = result, result.message
                continue
            decisions = [result]
        else:
            members = with_gang_topology(
                unit.pods, unit.gang.topology, topology_field(unit.gang.key)
            )
            planned = schedule_gang(
                members,
                view,
                framework,
                min_member=unit.gang.min_member,
                intent=unit.intent,
                keys=keys,
            )
            if not isinstance(planned, GangDecision):
                outcome.failure = planned
                outcome.message = (
                    f"waiting for pod group {unit.gang.key.name}: 0/{unit.gang.min_member} "
                    f"members placed; {planned.message}"
                )
                continue
            decisions = list(planned.decisions)
        by_key = {p.key: p for p in unit.pods}
        for d in decisions:
            snapshot.assume(by_key[d.pod_key], d.node, d.placement, d.claims)
        outcome.decisions = decisions
        nodes = sorted({d.node for d in decisions})
        shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
        together = f" ({len(decisions)} members together)" if unit.gang is not None else ""
        outcome.message = f"would go to {shown}{together}"
    return out


def placement_of(d: Decision, snapshot: Snapshot, keys: DomainKeys | None) -> PodPlacement:
    node = snapshot.get(d.node)
    labels = node.labels if node is not None else {}
    keys = keys or DomainKeys()
    domain = {
        tier: labels[label]
        for tier, label in (("leaf", keys.leaf), ("spine", keys.spine), ("zone", keys.zone))
        if label in labels
    }
    link = None
    topology = node.topology if node is not None else None
    if topology is not None and len(d.placement.gpus) > 1:
        worst = worst_effective_link(topology, d.placement.gpus)
        link = ("NVSwitch" if topology.nvswitch else "NVLink") if worst.is_nvlink else str(worst)
    share = d.placement.share
    return PodPlacement(
        pod=d.pod_key,
        node=d.node,
        gpus=list(d.device_ids),
        gpu_indices=list(d.placement.gpus),
        link=link,
        numa=list(d.placement.numa),
        domain=domain,
        dra=[f"{c.name or '(extended)'}: {r.device}" for c in d.claims for r in c.results],
        gpu_share=share.text() if share is not None else None,
        score=round(d.score, 3),
        health=health_notes(topology) if topology is not None else [],
    )


def _reasons(failure: Failure | Status | None) -> dict[str, int]:
    """Nodes per reason of a pod's failure (a gang's status is a summary: its message says)."""
    counts: Counter[str] = Counter()
    if isinstance(failure, Failure):
        for status in failure.statuses.values():
            counts.update(status.reasons)
    return dict(sorted(counts.items()))


def answer_of(outcome: Outcome, snapshot: Snapshot, keys: DomainKeys | None) -> UnitAnswer:
    return UnitAnswer(
        unit=outcome.unit.name,
        fits=outcome.fits,
        pods=[p.key for p in outcome.unit.pods],
        message=outcome.message,
        placements=[placement_of(d, snapshot, keys) for d in outcome.decisions],
        reasons=_reasons(outcome.failure),
    )
