"""The what-if, as a function of the running scheduler: :meth:`WhatIf.answer`.

1. The documents are expanded into the pods their controllers would make
   (:func:`coordinator.core.expand.expand`) and grouped into the units the loop schedules
   (gangs as a whole, other pods one by one: :mod:`.placing`).
2. They are placed, in order, on a **copy** of the scheduler's snapshot with the same profiles,
   the same gang planner and the room nominated for preemptors held — nothing is assumed,
   queued, reserved, recorded, evicted or counted on the live scheduler.
3. When something does not fit, the smallest changes that make everything fit are worked out,
   each tried on its own fresh copy of the same snapshot, and ranked (:data:`TIERS`): looser
   placement keys first (no GPU given up), then fewer GPUs per pod, then preempting
   lower-priority pods (the victims Topos's preemption would choose:
   :meth:`~coordinator.engine.preemptor.Preemptor.plan`), then nodes an administrator would
   bring back (cordoned, NotReady, or with a silent agent).

4. :meth:`WhatIf.answer_predicted` also asks the predictor (the engine run forward on a copy of
   the live cluster, the manifest's pods added to the pending queue: the
   :class:`~coordinator.engine.forecasts.StartPredictor` port, which the app gives it) when it
   would start: ``predicted_start_s`` (0 when it fits now) and ``waits_for`` (the running pods
   whose end it waits for); when it does not fit now but would start within the horizon,
   "wait for these pods" is the first suggestion (it changes nothing of anyone's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import msgspec

from coordinator.core.domains.capacity import NodeState, node_states
from coordinator.core.domains.countbound import may_fit
from coordinator.core.domains.layout import DomainKeys, Layout, build_layout
from coordinator.core.expand import Expander, ExpandError, expand
from coordinator.core.framework.results import Failure
from coordinator.core.preemption.victims import PreemptionPlan
from coordinator.core.snapshot.nodeinfo import NOT_READY_TAINT, UNSCHEDULABLE_TAINT, NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.engine.forecasts import Forecast, StartPredictor, span
from coordinator.engine.loop import Scheduler
from coordinator.engine.preemptor import Preemptor, gang_eligible, pod_eligible
from coordinator.engine.whatif.model import (
    PodPlacement,
    Suggestion,
    Victim,
    WhatIfAnswer,
    WorkloadPods,
)
from coordinator.engine.whatif.placing import (
    Outcome,
    Unit,
    WhatIfError,
    answer_of,
    place,
    placement_of,
    units_of,
)
from coordinator.engine.whatif.variants import ShapeChange, gpus_per_pod, relaxations, with_gpus

__all__ = ["DEFAULT_BUDGET_S", "TIERS", "WhatIf", "WhatIfError"]

#: How suggestions rank: by tier, then by how far each goes (steps, GPUs, victims, nodes).
TIERS: Final = {
    "wait": -1,
    "relax-locality": 0,
    "relax-numa": 0,
    "span-domains": 0,
    "fewer-gpus": 1,
    "preempt": 2,
    "uncordon": 3,
}
#: Time for the suggestions by default: what is not tried within it is named (``not_tried``).
DEFAULT_BUDGET_S: Final = 1.0
#: Preemption's victim search plans the gang several times over (select_victims' attempts) and
#: then tries the result: counted as this many tries when deciding whether it ends in time.
PREEMPT_TRIES: Final = 4.0
_LIFTED: Final = {UNSCHEDULABLE_TAINT.key, NOT_READY_TAINT.key}


class WhatIf:
    """What-if on ``scheduler``'s snapshot. ``podgroups``: the PodGroup objects the gang runtime
    knows (a manifest's own PodGroups come first); ``preemptor``: whose victim choice to show
    (``None``: no preemption suggestions); ``extra``: expanders of other kinds
    (``{"AgentPool": ("neuronetes.io/v1alpha1", pods_of_pool)}``)."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        podgroups: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
        preemptor: Preemptor | None = None,
        keys: DomainKeys | None = None,
        extra: Mapping[str, tuple[str, Expander]] | None = None,
        predictor: StartPredictor | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.predictor = predictor
        self._wall = wall
        self._clock = clock
        self.scheduler = scheduler
        self.podgroups = podgroups if podgroups is not None else {}
        self.preemptor = preemptor
        self.keys = keys
        self.extra = dict(extra or {})

    # --- the answer ----------------------------------------------------------------------------

    def answer(
        self,
        documents: Sequence[object],
        *,
        suggest: bool = True,
        budget_s: float | None = DEFAULT_BUDGET_S,
    ) -> WhatIfAnswer:
        """Where ``documents`` would go now, why not, and what would make them fit.
        ``budget_s``: time for the suggestions (``None``: no limit); kinds not tried within it
        are named in the answer's ``not_tried``. :class:`WhatIfError` names the document, key
        and value it cannot use. Every cycle runs inside the profiles' ``dry_run``: the
        scheduler's node scan and shape mix are left as they were."""
        with self.scheduler.dry_run():
            return self._answer(documents, suggest=suggest, budget_s=budget_s)[0]

    async def answer_predicted(
        self,
        documents: Sequence[object],
        *,
        suggest: bool = True,
        budget_s: float | None = DEFAULT_BUDGET_S,
    ) -> WhatIfAnswer:
        """:meth:`answer`, with when it would start (``predicted_start_s``, ``waits_for``) and,
        when it does not fit now, "wait for these pods" ranked first — if a predictor is given."""
        with self.scheduler.dry_run():
            answer, pods = self._answer(documents, suggest=suggest, budget_s=budget_s)
        if answer.fits:
            return msgspec.structs.replace(answer, predicted_start_s=0.0, waits_for=[])
        if self.predictor is None:
            return answer
        found = await self.predictor.predict_with([dict(p) for p in pods])
        return with_prediction(answer, list(found.values()), self._wall())

    def _answer(
        self, documents: Sequence[object], *, suggest: bool, budget_s: float | None
    ) -> tuple[WhatIfAnswer, Sequence[Mapping[str, Any]]]:
        """The answer, and the pods ``documents`` expanded to (the predictor's input)."""
        try:
            expansion = expand(documents, extra=self.extra)
        except ExpandError as exc:
            raise WhatIfError(str(exc)) from None
        if not expansion.pods:
            raise WhatIfError("the documents make no pods (give a Pod, Job, JobSet, …)")
        podgroups = {**self.podgroups, **expansion.podgroups}
        objs = [dict(p) for p in expansion.pods]
        units = units_of(objs, podgroups)
        base = self.scheduler.view.snapshot()
        trial = base.copy()
        began = self._clock()
        outcomes = self._place(units, trial)
        placing_s = self._clock() - began
        fits = all(o.fits for o in outcomes)
        suggestions: list[Suggestion] = []
        not_tried: list[str] = []
        if not fits and suggest:
            deadline = None if budget_s is None else self._clock() + budget_s
            suggestions, not_tried = self._suggest(
                units, outcomes, base, podgroups, deadline, placing_s
            )
        notes = _notes(objs, self.scheduler)
        if not_tried:
            notes.append(
                f"not tried within the {budget_s:g} s budget: {', '.join(not_tried)} "
                "(ask with a larger budget_s for them)"
            )
        answer = WhatIfAnswer(
            fits=fits,
            nodes=len(base),
            workloads=[
                WorkloadPods(kind=w.kind, namespace=w.namespace, name=w.name, pods=len(w.pods))
                for w in expansion.workloads
            ],
            units=[answer_of(o, trial, self.keys) for o in outcomes],
            suggestions=suggestions,
            not_tried=not_tried,
            notes=notes,
        )
        return answer, expansion.pods

    def _place(self, units: Sequence[Unit], snapshot: Snapshot) -> list[Outcome]:
        return place(
            units,
            snapshot,
            profiles=self.scheduler.profiles,
            nominations=self.scheduler.nominations,
            keys=self.keys,
        )

    def _try(self, units: Sequence[Unit], snapshot: Snapshot) -> list[PodPlacement] | None:
        """Everything placed on ``snapshot`` (changed), or ``None``."""
        outcomes = self._place(units, snapshot)
        if not all(o.fits for o in outcomes):
            return None
        return [placement_of(d, snapshot, self.keys) for o in outcomes for d in o.decisions]

    # --- what would make it fit ----------------------------------------------------------------

    def _suggest(
        self,
        units: list[Unit],
        outcomes: list[Outcome],
        base: Snapshot,
        podgroups: Mapping[tuple[str, str], Mapping[str, Any]],
        deadline: float | None,
        placing_s: float,
    ) -> tuple[list[Suggestion], list[str]]:
        """The suggestions, ranked, and the kinds not tried before ``deadline`` (tried in rank
        order: the cheap changes of the user's own first). A try is begun only when it is
        expected to end in time: as long as the last try took (``placing_s``, the first
        placement's time, at first), :data:`PREEMPT_TRIES` times that for preemption."""
        failing = {id(o.unit) for o in outcomes if not o.fits and o.unit.problem is None}
        if not failing:
            return [], []  # only gangs that cannot be planned at all (missing members, PodGroups)
        found: list[tuple[tuple[int, float], Suggestion]] = []
        skipped: list[str] = []

        pace = [placing_s]
        # Every try is on a copy of ``base``: the same nodes and labels, so one count of their
        # free GPUs and one layout rule out, before placing, the tries no placement can satisfy.
        nodes = node_states(base)
        layout = build_layout(nodes, keys=self.keys)

        def counted(tried: Sequence[Unit]) -> bool:
            """Whether each gang may fit by counts (each alone on ``base``: necessary for all
            of them together)."""
            return all(_may_fit(u, nodes, layout) for u in tried)

        def attempt(tried: Sequence[Unit]) -> list[PodPlacement] | None:
            if not counted(tried):
                return None  # the placement would fail: no time spent on it
            began = self._clock()
            placed = self._try(tried, base.copy())
            pace[0] = self._clock() - began
            return placed

        def expired(tries: float = 1.0) -> bool:
            return deadline is not None and self._clock() + tries * pace[0] > deadline

        def late(kind: str, tries: float = 1.0) -> bool:
            """Out of time: ``kind`` is not tried (and named)."""
            if not expired(tries):
                return False
            if kind not in skipped:
                skipped.append(kind)
            return True

        def reshaped(change: ShapeChange) -> list[Unit]:
            objs = [change.apply(o) if id(u) in failing else o for u in units for o in u.objs]
            return units_of(objs, podgroups)

        def shape(
            change: ShapeChange, magnitude: float, placed: list[PodPlacement] | None = None
        ) -> bool:
            if placed is None:
                placed = attempt(reshaped(change))
            if placed is None:
                return False
            found.append(
                (
                    (TIERS[change.kind], magnitude),
                    Suggestion(
                        rank=0,
                        kind=change.kind,
                        summary=change.summary,
                        change=dict(change.change),
                        placements=placed,
                    ),
                )
            )
            return True

        failing_objs = [o for u in units if id(u) in failing for o in u.objs]
        done: set[str] = set()
        for change in relaxations(failing_objs):
            if change.kind in done or late(change.kind):
                continue
            if shape(change, change.steps):
                done.add(change.kind)
        failing_gangs = [u for u in units if id(u) in failing and u.gang is not None]

        def counted_with(gpus: int) -> bool:
            return all(_may_fit(u, nodes, layout, gpus) for u in failing_gangs)

        self._fewer_gpus(
            failing_objs, lambda c: attempt(reshaped(c)), shape, expired, late, counted_with
        )
        for unit, outcome in zip(units, outcomes, strict=True):
            if (
                id(unit) in failing
                and self.preemptor is not None
                and not late("preempt", PREEMPT_TRIES)
            ):
                self._preempt(unit, outcome, units, base, found)
        if any(n.unschedulable or not n.ready or n.stale for n in base.nodes) and not late(
            "uncordon", 2
        ):
            self._uncordon(units, base, found)
        found.sort(key=lambda item: item[0])
        return [
            Suggestion(
                rank=i,
                kind=s.kind,
                summary=s.summary,
                change=s.change,
                victims=s.victims,
                nodes=s.nodes,
                placements=s.placements,
            )
            for i, (_, s) in enumerate(found, start=1)
        ], skipped

    def _fewer_gpus(
        self,
        objs: list[dict[str, Any]],
        placed_with: Callable[[ShapeChange], list[PodPlacement] | None],
        shape: Callable[[ShapeChange, float, list[PodPlacement] | None], bool],
        expired: Callable[[float], bool],
        late: Callable[[str], bool],
        counted: Callable[[int], bool],
    ) -> None:
        """The most GPUs per pod that fit (fewer never fits worse): the most that counts allow
        (``counted``) is tried first; if it does not fit, a binary search below it."""
        asks = {gpus_per_pod(o) for o in objs}
        if len(asks) != 1:
            return  # pods asking different counts: no one number to suggest
        asked = asks.pop()
        if asked < 2 or any(_gpu_containers(o) != 1 for o in objs):
            return
        low, high = 1, asked - 1
        while high >= low and not counted(high):
            high -= 1  # no placement of this many per pod exists: counted, not placed
        best: tuple[int, ShapeChange, list[PodPlacement]] | None = None
        if high >= low and not expired(1.0):
            change = with_gpus(asked, high)
            placed = placed_with(change)
            if placed is not None:
                best, low = (high, change, placed), high + 1
            else:
                high -= 1
        while low <= high:
            if expired(1.0):  # keep what fits so far (perhaps not the most GPUs), or say none tried
                if best is None:
                    late("fewer-gpus")
                break
            mid = (low + high) // 2
            change = with_gpus(asked, mid)
            placed = placed_with(change)
            if placed is not None:
                best, low = (mid, change, placed), mid + 1
            else:
                high = mid - 1
        if best is not None:
            wanted, change, placed = best
            shape(change, (asked - wanted) / asked, placed)

    def _preempt(
        self,
        unit: Unit,
        outcome: Outcome,
        units: list[Unit],
        base: Snapshot,
        found: list[tuple[tuple[int, float], Suggestion]],
    ) -> None:
        if self.preemptor is None:
            return
        policy = (
            "Never"
            if any(p.preemption_policy == "Never" for p in unit.pods)
            else "PreemptLowerPriority"
        )
        if policy == "Never":
            return
        if unit.gang is not None:
            framework = self.scheduler.profiles.for_pod(unit.objs[0])
            eligible = gang_eligible(unit.pods, base, framework)
        elif isinstance(outcome.failure, Failure):
            if outcome.failure.unresolvable:
                return
            eligible = pod_eligible(outcome.failure)
        else:
            return
        plan = self.preemptor.plan(
            unit.pods,
            priority=unit.priority,
            policy=policy,
            intent=unit.intent,
            eligible=eligible,
            snapshot=base,
        )
        if not isinstance(plan, PreemptionPlan) or not plan.victims:
            return
        gone = set(plan.victim_pods)
        trial = _without(base, gone)
        placed = self._try(units, trial) or []
        where = _where(base, gone)
        victims = [
            Victim(
                pod=pod,
                node=where.get(pod, ""),
                priority=v.priority,
                gang=v.unit.removeprefix("gang:") if v.unit.startswith("gang:") else None,
            )
            for v in plan.victims
            for pod in v.pods
        ]
        nodes = sorted({n for _, n in plan.nominated})
        n = len(victims)
        summary = (
            f"preempt {n} lower-priority pod{'s' if n != 1 else ''}: "
            + ", ".join(f"{v.pod} (priority {v.priority}, on {v.node})" for v in victims[:8])
            + (f" and {n - 8} more" if n > 8 else "")
        )
        if not placed:
            summary += " (Topos's preemption would choose these; the pods still wait for them)"
        found.append(
            (
                (TIERS["preempt"], float(n)),
                Suggestion(
                    rank=0,
                    kind="preempt",
                    summary=f"{unit.name}: {summary}",
                    victims=victims,
                    nodes=nodes,
                    placements=placed,
                ),
            )
        )

    def _uncordon(
        self, units: list[Unit], base: Snapshot, found: list[tuple[tuple[int, float], Suggestion]]
    ) -> None:
        down = [n for n in base.nodes if n.unschedulable or not n.ready or n.stale]
        if not down:
            return
        placed = self._try(units, _back(base, down))
        if placed is None:
            return
        used = {p.node for p in placed} & {n.name for n in down}
        if not used:
            return
        needed = [n for n in down if n.name in used]
        fewer = self._try(units, _back(base, needed))
        if fewer is not None:
            placed = fewer
        names = sorted(used)
        state = {n.name: _why_down(n) for n in needed}
        summary = "bring back " + ", ".join(f"{name} ({state[name]})" for name in names)
        found.append(
            (
                (TIERS["uncordon"], float(len(names))),
                Suggestion(
                    rank=0, kind="uncordon", summary=summary, nodes=names, placements=placed
                ),
            )
        )


def with_prediction(
    answer: WhatIfAnswer, forecasts: Sequence[Forecast], now: float
) -> WhatIfAnswer:
    """``answer`` with its predicted start (when the last of its pods starts) and what it waits
    for; "wait" first among the suggestions when it starts once running pods end (a start
    without anyone's end is Topos preempting for it: no "wait")."""
    if not forecasts:
        return answer
    waits = sorted({k for f in forecasts for k in f.after})
    unforeseen = next((f for f in forecasts if f.unknown), None)
    if unforeseen is not None:
        name = unforeseen.pod.split("/", 1)[-1]
        note = f"start not predicted: {name}: {unforeseen.unknown}"
        return msgspec.structs.replace(answer, waits_for=waits, notes=[*answer.notes, note])
    if any(f.starts_at is None for f in forecasts):
        horizon = max(f.horizon_s for f in forecasts)
        unknown = max(f.unknown_ends for f in forecasts)
        why = f" ({unknown} running pods with no expected end)" if unknown else ""
        note = f"no start predicted within {span(horizon)}{why}"
        return msgspec.structs.replace(answer, waits_for=waits, notes=[*answer.notes, note])
    start = max(f.starts_in(now) or 0.0 for f in forecasts)
    nodes = sorted({f.node for f in forecasts if f.node})
    sources = {k: v for f in forecasts for k, v in f.sources.items()}
    shown = ", ".join(f"{k} ({sources.get(k, 'unknown')})" for k in waits[:8])
    more = f" and {len(waits) - 8} more" if len(waits) > 8 else ""
    if not waits:  # it starts without anyone's end: Topos would preempt for it (or retry)
        return msgspec.structs.replace(answer, predicted_start_s=start, waits_for=[])
    summary = f"wait ~{span(start)} for {shown}{more} to end"
    wait = Suggestion(rank=1, kind="wait", summary=summary, nodes=nodes)
    ranked = [wait] + [
        msgspec.structs.replace(s, rank=i)
        for i, s in enumerate((s for s in answer.suggestions if s.kind != "wait"), start=2)
    ]
    return msgspec.structs.replace(
        answer, predicted_start_s=start, waits_for=waits, suggestions=ranked
    )


def _may_fit(
    unit: Unit, nodes: Sequence[NodeState], layout: Layout, gpus: int | None = None
) -> bool:
    """Whether gang ``unit`` may fit on ``nodes`` by GPU counts (``gpus``: each member asking
    that many instead); lone pods and gangs that cannot be planned are not counted."""
    if unit.gang is None or unit.problem is not None:
        return True
    asks = [p.gpus if gpus is None or not p.gpus else gpus for p in unit.pods]
    return may_fit(asks, nodes, intent=unit.intent, layout=layout, needed=unit.gang.min_member)


def _gpu_containers(obj: Mapping[str, Any]) -> int:
    return sum(
        1
        for c in (obj.get("spec") or {}).get("containers") or ()
        if gpus_per_pod({"spec": {"containers": [c]}})
    )


def _why_down(node: NodeInfo) -> str:
    if node.unschedulable:
        return "cordoned"
    if not node.ready:
        return "NotReady"
    return "its GPU agent is silent"


def _back(base: Snapshot, nodes: Sequence[NodeInfo]) -> Snapshot:
    """A copy of ``base`` with ``nodes`` schedulable, Ready and reporting."""
    out = base.copy()
    for n in nodes:
        out.replace(
            NodeInfo.build(
                n.name,
                labels=n.labels,
                allocatable=n.allocatable,
                taints=[t for t in n.taints if t.key not in _LIFTED],
                topology=n.topology,
                pods=n.pods,
                requested=dict(n.requested),
                dra_held=n.dra_held,
                cached_models=n.cached_models,
            )
        )
    return out


def _without(base: Snapshot, pods: set[str]) -> Snapshot:
    """A copy of ``base`` with ``pods`` (``namespace/name``) gone."""
    out = base.copy()
    for n in base.nodes:
        if any(p.key in pods for p in n.pods):
            out.replace(n.rebuild(p for p in n.pods if p.key not in pods))
    return out


def _where(base: Snapshot, pods: set[str]) -> dict[str, str]:
    return {p.key: n.name for n in base.nodes for p in n.pods if p.key in pods}


def _notes(objs: Sequence[Mapping[str, Any]], scheduler: Scheduler) -> list[str]:
    notes: list[str] = []
    classes = sorted(
        {
            str(spec["priorityClassName"])
            for o in objs
            if isinstance(spec := o.get("spec"), Mapping)
            and spec.get("priorityClassName")
            and spec.get("priority") is None
        }
    )
    if classes:
        notes.append(
            f"spec.priorityClassName {', '.join(classes)}: the API server resolves it when the "
            "pod is created; this answer took priority 0 (write spec.priority to try another)"
        )
    names = {p.name for p in scheduler.profiles}
    others = sorted(
        {
            str(spec.get("schedulerName"))
            for o in objs
            if isinstance(spec := o.get("spec"), Mapping)
            and spec.get("schedulerName")
            and spec.get("schedulerName") not in names
        }
    )
    if others:
        notes.append(
            f"spec.schedulerName {', '.join(others)} is no Topos profile: Topos would not "
            "schedule these pods (answered as its default profile would)"
        )
    return notes
