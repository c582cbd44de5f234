"""One scheduling cycle (:func:`schedule_one`): PreFilter, Filter nodes until enough are feasible
(kube-scheduler's ``percentageOfNodesToScore``, from a rotating start), PreScore, Score and
NormalizeScore the feasible ones found, pick the best. A pod no node takes is filtered on every
node, so its message counts them all; ``percentageOfNodesToScore: 100`` filters and scores every
node for every pod. When only one node passes the filters it is chosen with no PreScore or Score
plugin run, as kube-scheduler does: its score is 0 and its verdict says it was not scored
(:data:`UNSCORED`). A filter that answers ``Error`` (not the node's fault: a claim's selector
failing at run time) ends the attempt at once with ``running "<plugin>" filter plugin: …``,
kube-scheduler's message.

Node-local plugins (``node_local = True``) have their verdicts, placements and weighted score
sums remembered per pod class on the immutable ``NodeInfo`` (``NodeInfo.memo``), so a warm
cycle is mostly dictionary lookups; a plugin whose results also follow something else names it
(``memo_epoch``, see :class:`~.profile.Framework`), so that what is remembered is always what
would be computed now. The cycle is pure: it never changes the snapshot.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from itertools import repeat
from operator import attrgetter
from typing import Final, cast

from common.model import NodeTopology
from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import (
    CLAIMS,
    DRA_SERVED,
    PLACEMENTS,
    VOLUMES,
    FilterPlugin,
    PreFilterResult,
    ScorePlugin,
    pod_class_key,
)
from coordinator.core.framework.memo import (
    REFUSED_BEFORE,
    Memo,
    Placements,
    local_score,
    remember,
)
from coordinator.core.framework.profile import Framework
from coordinator.core.framework.results import Decision, Failure, NodeVerdict, ScheduleResult
from coordinator.core.podspec.parse import PodRequest, PodSpecError, parse_pod
from coordinator.core.snapshot.devices import mig_device_id
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SUCCESS, Code, Reason, Status, summarize

__all__ = ["UNSCORED", "schedule_one"]


def schedule_one(
    pod: PodRequest | PodSpecError | Mapping[str, object],
    snapshot: Snapshot,
    framework: Framework,
    *,
    candidate_nodes: Collection[str] | None = None,
) -> ScheduleResult:
    """One scheduling cycle: filter nodes until enough are feasible, score those, pick the best.

    ``pod`` may be a Pod object (parsed here), a parsed request, or a parse error (reported).
    ``candidate_nodes`` restricts the nodes considered (network domains, gang members); the
    others are reported as not among the candidates. Pure: the snapshot is not changed —
    call :meth:`Snapshot.assume` with the decision to hold its capacity.
    """
    if isinstance(pod, Mapping):
        pod = parse_pod(pod)
    nodes = snapshot.nodes
    total = len(nodes)
    if isinstance(pod, PodSpecError):
        return _pod_rejected(pod.pod_key, nodes, pod.status)
    if pod.scheduling_gates:  # kube's SchedulingGates: not tried until the last gate is removed
        message = "waiting for scheduling gates: " + ", ".join(pod.scheduling_gates)
        return Failure(pod.key, total, {}, message, Status.unresolvable(message))
    try:
        return _cycle(pod, snapshot, nodes, framework, candidate_nodes)
    except _FilterError as failed:  # kube-scheduler: an Error status ends the attempt
        status = failed.status
        message = f'running "{status.plugin}" filter plugin: {status.message}'
        return Failure(pod.key, total, {n.name: status for n in nodes}, message, status)
    except Exception as exc:  # a bug in a plugin must not take the scheduler down
        status = Status.error(f"{type(exc).__name__}: {exc}")
        return Failure(
            pod.key,
            total,
            {},
            f"0/{total} nodes are available: internal error: {type(exc).__name__}: {exc}.",
            status,
        )


class _FilterError(Exception):
    """A filter returned an ``Error`` status: the pod's attempt ends with it (no node is
    judged further and nothing is preempted), as in kube-scheduler."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status


def _pod_rejected(pod_key: str, nodes: Sequence[NodeInfo], status: Status) -> Failure:
    total = len(nodes)
    return Failure(
        pod_key,
        total,
        {n.name: status for n in nodes},
        f"0/{total} nodes are available: {status.message}.",
        status,
    )


# Nodes filtered at a time: about as many as are still wanted, within these bounds.
_CHUNK_MIN: Final = 16
_CHUNK_MAX: Final = 512


def _cycle(
    pod: PodRequest,
    snapshot: Snapshot,
    nodes: Sequence[NodeInfo],
    fw: Framework,
    candidate_nodes: Collection[str] | None,
) -> ScheduleResult:
    state = CycleState()
    allowed: set[str] | None = set(candidate_nodes) if candidate_nodes is not None else None
    skipped: set[str] = set()
    # PreFilter may reject, skip, or narrow; the placements map must exist before it runs.
    pending = Placements(snapshot, None)
    state.write(PLACEMENTS, pending)
    for p in fw.pre_filter:
        result = p.pre_filter(state, pod, snapshot)
        status = result.status if isinstance(result, PreFilterResult) else result
        if status.is_skip:
            skipped.add(p.name)
            continue
        if not status.is_success:
            return _pod_rejected(pod.key, nodes, status.with_plugin(p.name))
        if isinstance(result, PreFilterResult) and result.node_names is not None:
            allowed = set(result.node_names) if allowed is None else allowed & result.node_names
    if skipped:
        local_filters = [f for f in fw.local_filters if f.name not in skipped]
        other_filters = [f for f in fw.other_filters if f.name not in skipped]
    else:
        local_filters, other_filters = list(fw.local_filters), list(fw.other_filters)
    memo_key = fw.intern(
        (pod_class_key(pod), tuple(f.name for f in local_filters), state.get(DRA_SERVED))
    )
    placements = Placements(snapshot, memo_key)
    state.write(PLACEMENTS, placements)
    # Nodes alike share results (memo.py) unless the pod names nodes or takes DRA devices.
    alike = (
        None
        if pod.node_selector or pod.node_affinity or pod.claims or state.get(DRA_SERVED)
        else fw.alike
    )
    renew = [f for f in fw.epoch_filters if f.name not in skipped]
    epoch = tuple(f.memo_epoch(pod) for f in renew) if renew else None  # type: ignore[attr-defined]
    # A placement of another epoch is chosen again by the filters from the first with an epoch.
    rechoose = local_filters[min((local_filters.index(f) for f in renew), default=0) :]

    # --- filtering: from a rotating start until enough feasible nodes are found ---------------
    # Node-local verdicts come from the memo; the other filters run on the nodes that pass.
    # Filters with an index name a superset of the nodes they pass: those are visited first.
    considered = _considered(snapshot, nodes, allowed)
    want = fw.config.nodes_to_score(len(considered))
    narrowed = _narrowed(fw, skipped, state, pod, snapshot)
    order: Sequence[NodeInfo] | Sequence[str] = considered
    if isinstance(narrowed, Sequence):  # names already in the snapshot's order
        order = narrowed if allowed is None else [n for n in narrowed if n in allowed]
    elif narrowed is not None:
        order = snapshot.in_order(n for n in narrowed if allowed is None or n in allowed)
    by_name = snapshot.by_name
    feasible: list[NodeInfo] = []
    entries: list[Memo] = []
    refused: dict[str, Status] = {}  # by the filters that are not remembered per node

    def verdict_of(node: NodeInfo) -> Status:
        entry = cast(Memo | None, node.memo.get(memo_key))
        if entry is None:
            entry = remember(
                node, memo_key, local_filters, state, pod, placements, epoch, alike=alike
            )
        verdict = entry.verdict
        if verdict is SUCCESS and other_filters:
            known = refused.get(node.name)
            verdict = (
                known if known is not None else _other_verdict(other_filters, state, pod, node)
            )
        return verdict

    def take(part: Sequence[NodeInfo]) -> int:
        """Filter ``part``; keep its feasible nodes up to ``want``. How many of it were needed."""
        got: list[Memo | None] = list(map(dict.get, map(_MEMO, part), repeat(memo_key)))
        if None in got:
            for j, e in enumerate(got):
                if e is None:
                    node = part[j]
                    got[j] = (
                        REFUSED_BEFORE  # refused on the node this one was made from: still is
                        if memo_key in node.refused
                        else remember(
                            node,
                            memo_key,
                            local_filters,
                            state,
                            pod,
                            placements,
                            epoch,
                            None,
                            alike,
                        )
                    )
        passed = cast(list[Memo], got)
        verdicts = list(map(_VERDICT, passed))
        ok: Sequence[int] = (
            range(len(passed))  # the common case: every node passes (no Status compared)
            if verdicts.count(SUCCESS) == len(verdicts)
            else [j for j, v in enumerate(verdicts) if v is SUCCESS]
        )
        if renew and any(passed[j].epoch != epoch for j in ok):
            for j in ok:
                old = passed[j]
                if old.epoch != epoch:  # placed in another epoch: choose again
                    passed[j] = remember(
                        part[j], memo_key, rechoose, state, pod, placements, epoch, old, alike
                    )
            ok = [j for j in ok if passed[j].verdict is SUCCESS]
        if other_filters:
            still = []
            for j in ok:
                verdict = _other_verdict(other_filters, state, pod, part[j])
                if verdict is SUCCESS:
                    still.append(j)
                elif verdict.code is Code.ERROR:
                    raise _FilterError(verdict)
                else:
                    refused[part[j].name] = verdict
            ok = still
        need = want - len(feasible)
        if len(ok) >= need:
            ok = ok[:need]
        if isinstance(ok, range):  # the first len(ok) nodes of the part
            feasible.extend(part[: len(ok)])
            entries.extend(passed[: len(ok)])
        else:
            feasible.extend(part[j] for j in ok)
            entries.extend(passed[j] for j in ok)
        return ok[-1] + 1 if len(feasible) >= want and ok else len(part)

    def scan(seq: Sequence[NodeInfo] | Sequence[str], start: int) -> int:
        """Visit ``seq`` from ``start`` (wrapping) until ``want`` are feasible, in chunks about
        the size still wanted; how many nodes were visited."""
        seen = 0
        for lo, hi in ((start, len(seq)), (0, start)):
            while lo < hi:
                step = min(hi - lo, max(_CHUNK_MIN, min(_CHUNK_MAX, want - len(feasible))))
                part = seq[lo : lo + step]
                if isinstance(part[0], str):
                    part = [by_name[n] for n in part]  # type: ignore[index]
                used = take(part)  # type: ignore[arg-type]
                seen += used
                if len(feasible) >= want:
                    return seen
                lo += step
        return seen

    places: list[Callable[[str], int]] = []  # a node's place in the visit over every node

    def visit(part: Sequence[NodeInfo] | Sequence[str]) -> None:
        """Visit ``part`` (in the snapshot's order) from the first node at or after the
        rotating start; when enough are found, the start moves past the last one taken."""
        if not places:  # built once per cycle (a cycle may visit two parts)
            if allowed is None:
                places.append(snapshot.position)
            else:
                places.append({n.name: i for i, n in enumerate(considered)}.__getitem__)
        place = places[0]

        def at(i: int) -> int:  # where the i-th node of ``part`` is in the visit over every node
            n = part[i]
            return place(n if isinstance(n, str) else n.name)

        begin = bisect.bisect_left(range(len(part)), fw.next_start % len(considered), key=at)
        begin %= len(part)
        seen = scan(part, begin)
        if len(feasible) >= want:  # stopped at the last one wanted; else every node was seen
            fw.next_start = (at((begin + seen - 1) % len(part)) + 1) % len(considered)

    preferred = _visit_first(fw, state, pod, snapshot) if 0 < want < len(order) else None
    if preferred is not None:
        # A scorer asked for some nodes to be seen first: those, then the others, each from
        # the rotating start, until enough are feasible.
        wanted: Collection[str] = preferred
        names_only = bool(order) and isinstance(order[0], str)

        def part(ahead: bool) -> Sequence[NodeInfo] | Sequence[str]:
            if names_only:
                return [n for n in cast(Sequence[str], order) if (n in wanted) is ahead]
            return [n for n in cast(Sequence[NodeInfo], order) if (n.name in wanted) is ahead]

        for ahead in (True, False):
            if len(feasible) < want:  # the others only when the first are not enough
                nodes_part = part(ahead)
                if nodes_part:
                    visit(nodes_part)
    elif narrowed is None:
        if 0 < want < len(order):
            start = fw.next_start % len(order)
            fw.next_start = (start + scan(order, start)) % len(order)
        elif order:
            scan(order, 0)
    elif order and want > 0:
        # kube-scheduler's filters do not narrow by these indexes: it visits every node
        # from the rotating start. The candidates are a superset of the feasible nodes, so the
        # same ones are found visiting the candidates from the first at or after that start,
        # and the start moves past the last node taken, as kube's would.
        visit(order)
    if not feasible and narrowed is not None:  # none of the index's nodes fit: judge the rest
        first = {n if isinstance(n, str) else n.name for n in order}
        rest = [n for n in considered if n.name not in first]
        if rest:
            scan(rest, 0)

    def statuses() -> dict[str, Status]:
        out: dict[str, Status] = {}
        if allowed is not None:
            not_candidate = Status.unresolvable(Reason.NOT_IN_CANDIDATES)
            out.update((n.name, not_candidate) for n in nodes if n.name not in allowed)
        # Every node but the feasible ones found, judged when asked (remembered verdicts, or the
        # filters run now): an explanation names every node that cannot take the pod, including
        # those the cycle did not need to visit.
        seen = {n.name for n in feasible}
        for node in considered:
            name = node.name
            if name in seen:
                continue
            entry = node.memo.get(memo_key)  # a remembered refusal: no call to judge it
            verdict = entry.verdict if entry is not None else SUCCESS  # type: ignore[attr-defined]
            if verdict is SUCCESS:
                verdict = verdict_of(node)
            if verdict is not SUCCESS:
                out[name] = verdict
        return out

    if not feasible:
        total = len(nodes)
        found = statuses()
        return Failure(pod.key, total, found, summarize(total, found))
    if len(feasible) == 1:  # kube-scheduler's schedulePod: the one feasible node, unscored
        verdicts = _Verdicts(statuses, feasible, entries, [], [], array("d", (0.0,)), UNSCORED)
        return _decision(pod, snapshot, nodes, state, placements, feasible, verdicts, 0, 0.0)

    # --- scoring --------------------------------------------------------------------------
    # Node-local plugins without normalisation add up to one memoised sum per node; the others
    # (normalised or cluster-dependent) are computed per cycle.
    local: list[tuple[ScorePlugin, float, object]] = []  # with the key its score is kept under
    # Scores in the order of ``feasible``, kept as arrays (an explanation keeps them: no float
    # objects, nothing for the garbage collector to walk).
    cycle: list[tuple[str, float, Sequence[float]]] = []
    for plugin, weight in fw.scores_for(pod):
        name = plugin.name
        pre = fw.pre_score.get(name)
        if pre is not None:
            st = pre.pre_score(state, pod, feasible, snapshot)
            if st.is_skip:
                continue
            if not st.is_success:
                return _pod_rejected(pod.key, nodes, st.with_plugin(name))
        norm = fw.normalize.get(name)
        score_epoch = fw.score_epochs.get(name)
        key: object = name if score_epoch is None else fw.intern((name, score_epoch(pod)))
        if fw.is_local(plugin) and norm is None:
            local.append((plugin, weight, key))
            continue
        batch = fw.batch_score.get(name)
        if batch is not None:
            values = batch.score_nodes(state, pod, feasible)
        elif fw.is_local(plugin):
            values = [
                local_score(entry, plugin, key, state, pod, node)
                for node, entry in zip(feasible, entries, strict=True)
            ]
        else:
            values = [plugin.score(state, pod, node) for node in feasible]
        if norm is not None:
            values = norm.normalize_scores(state, pod, values)
        cycle.append((name, weight, array("d", values)))

    sum_key = fw.intern(tuple((k, w) for _, w, k in local))
    sums: list[float | None] = list(map(dict.get, map(_SUMS, entries), repeat(sum_key)))
    if None in sums:
        for i, (node, entry) in enumerate(zip(feasible, entries, strict=True)):
            if sums[i] is None:
                t = entry.sums.get(sum_key)  # summed already for an alike node of this cycle
                if t is None:
                    t = 0.0
                    for plugin, weight, key in local:
                        t += weight * local_score(entry, plugin, key, state, pod, node)
                    entry.sums[sum_key] = t
                sums[i] = t
    totals = cast(list[float], sums)
    for _, weight, scored in cycle:
        totals = [t + weight * v for t, v in zip(totals, scored, strict=True)]
    shared = fw.score_share(pod)
    if shared is not None:  # the pod gives this scorer a share of a node's points
        plugin, share = shared
        pre = fw.pre_score.get(plugin.name)
        if pre is None or not pre.pre_score(state, pod, feasible, snapshot).is_skip:
            ratio = share / (1.0 - share)
            pairs = zip(totals, feasible, strict=True)
            others = array("d", (t * plugin.score(state, pod, n) / 100 for t, n in pairs))
            cycle.append((plugin.name, ratio, others))
            totals = [t + ratio * o for t, o in zip(totals, others, strict=True)]

    top = max(totals)
    tied = totals.count(top)
    if tied == 1:
        best_i = totals.index(top)
    elif tied == len(totals):  # every node alike (a fresh cluster): the first by name
        names = list(map(_NAME, feasible))
        best_i = names.index(min(names))
    else:  # a tie: the first by name
        ties = [i for i, t in enumerate(totals) if t == top]
        names = [feasible[i].name for i in ties]
        best_i = ties[names.index(min(names))]
    verdicts = _Verdicts(statuses, feasible, entries, local, cycle, array("d", totals))
    return _decision(
        pod, snapshot, nodes, state, placements, feasible, verdicts, best_i, totals[best_i]
    )


#: The chosen node's verdict when it was the only one that passed the filters: like
#: kube-scheduler, the cycle then runs no PreScore or Score plugin (there is nothing to rank).
UNSCORED: Final = Status(detail="the only node that passed the filters: not scored")


def _decision(
    pod: PodRequest,
    snapshot: Snapshot,
    nodes: Sequence[NodeInfo],
    state: CycleState,
    placements: Placements,
    feasible: Sequence[NodeInfo],
    verdicts: _Verdicts,
    best_i: int,
    score: float,
) -> Decision:
    """The cycle's decision: ``feasible[best_i]``, with ``score``."""
    best = feasible[best_i]
    placement = placements.get(best.name) or _HOLDS_NOTHING
    claims = (state.get(CLAIMS) or {}).get(best.name, ())
    if callable(claims):  # left to the node chosen
        claims = claims()
    return Decision(
        pod_key=pod.key,
        node=best.name,
        placement=placement,
        # GPUs the agent knows by index; else (no agent report yet) the claims' device UUIDs
        device_ids=_device_ids(best.topology, placement)
        or (snapshot.dra.uuids_of(claims) if claims else ()),
        score=score,
        breakdown=verdicts.breakdown(best_i),
        verdicts=verdicts,
        evaluated=len(nodes),
        feasible=len(feasible),
        claims=claims,
        volumes=(state.get(VOLUMES) or {}).get(best.name),
        state=state,
    )


_HOLDS_NOTHING: Final = Placement()  # a pod holding nothing inside its node (immutable: shared)
_MEMO: Final = attrgetter("memo")
_VERDICT: Final = attrgetter("verdict")
_SUMS: Final = attrgetter("sums")
_NAME: Final = attrgetter("name")


def _considered(
    snapshot: Snapshot, nodes: Sequence[NodeInfo], allowed: set[str] | None
) -> Sequence[NodeInfo]:
    if allowed is None:
        return nodes
    if len(allowed) * 4 < len(nodes):  # a few candidates: look them up, not every node
        return snapshot.in_order(allowed)
    return [n for n in nodes if n.name in allowed]


def _narrowed(
    fw: Framework, skipped: set[str], state: CycleState, pod: PodRequest, snapshot: Snapshot
) -> Collection[str] | None:
    """The nodes every indexed filter could pass (``None``: no filter narrows). One filter's
    answer is kept as given (a sequence is in the snapshot's order); several are intersected."""
    out: Collection[str] | None = None
    for f in fw.candidates:
        if f.name in skipped:
            continue
        names = f.candidates(state, pod, snapshot)
        if names is not None:
            out = names if out is None else set(out).intersection(names)
    return out


def _visit_first(
    fw: Framework, state: CycleState, pod: PodRequest, snapshot: Snapshot
) -> Collection[str] | None:
    """The nodes the scorers ask the search to visit first (``None``: none asks)."""
    out: Collection[str] | None = None
    for p in fw.visit_first:
        names = p.visit_first(state, pod, snapshot)
        if names is not None:
            out = names if out is None else set(out).union(names)  # one: not copied
    return out


def _other_verdict(
    filters: Sequence[FilterPlugin], state: CycleState, pod: PodRequest, node: NodeInfo
) -> Status:
    for f in filters:
        status = f.filter(state, pod, node)
        if status is not SUCCESS and not status.is_success:
            return _signed_once(status, f.name)
    return SUCCESS


#: A refusal signed by its plugin, by the refusal's identity: filters return the same constant
#: for every node they refuse, signed here once rather than copied per node. The entry keeps the
#: refusal alive, so its ``id`` is not reused while remembered.
_SIGNED_ONCE: dict[int, tuple[Status, str, Status]] = {}
_SIGNED_ONCE_LIMIT: Final = 4096


def _signed_once(status: Status, plugin: str) -> Status:
    if status.plugin:
        return status
    hit = _SIGNED_ONCE.get(id(status))
    if hit is not None and hit[0] is status and hit[1] == plugin:
        return hit[2]
    if len(_SIGNED_ONCE) >= _SIGNED_ONCE_LIMIT:
        _SIGNED_ONCE.clear()
    signed = status.with_plugin(plugin)
    _SIGNED_ONCE[id(status)] = (status, plugin, signed)
    return signed


class _Verdicts(Mapping[str, NodeVerdict]):
    """Per-node verdicts of one cycle, built when asked for (explanations are rare; cycles
    are not)."""

    def __init__(
        self,
        statuses: Callable[[], dict[str, Status]],
        feasible: list[NodeInfo],
        entries: list[Memo],
        local: list[tuple[ScorePlugin, float, object]],
        cycle: list[tuple[str, float, Sequence[float]]],
        totals: Sequence[float],
        chosen: Status = SUCCESS,
    ) -> None:
        self._make_statuses = statuses
        self._chosen = chosen  # the status of every feasible node (UNSCORED: the only one)
        self._statuses_cache: dict[str, Status] | None = None
        self._feasible_nodes = feasible
        self._index: dict[str, int] | None = None
        self._entries = entries
        self._local = local
        self._cycle = cycle
        self._totals = totals

    @property
    def _statuses(self) -> dict[str, Status]:
        if self._statuses_cache is None:
            self._statuses_cache = self._make_statuses()
        return self._statuses_cache

    @property
    def _names(self) -> list[str]:
        return [n.name for n in self._feasible_nodes]

    def breakdown(self, i: int) -> dict[str, float]:
        if not self._local and not self._cycle:  # not scored
            return {}
        entry = self._entries[i]
        out = {p.name: w * entry.scores[k] for p, w, k in self._local}
        out.update({plugin: w * values[i] for plugin, w, values in self._cycle})
        return out

    def __getitem__(self, name: str) -> NodeVerdict:
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self._names)}
        i = self._index.get(name)
        if i is not None:
            return NodeVerdict(self._chosen, self.breakdown(i), self._totals[i])
        return NodeVerdict(self._statuses[name])

    def __iter__(self) -> Iterator[str]:
        yield from self._statuses
        yield from self._names

    def __len__(self) -> int:
        return len(self._statuses) + len(self._names)


def _device_ids(topology: NodeTopology | None, placement: Placement) -> tuple[str, ...]:
    if topology is None:
        return ()
    ids = [topology.gpus[i].uuid for i in placement.gpus]
    ids.extend(mig_device_id(topology, g, gi) for g, gi in placement.mig)
    return tuple(ids)
