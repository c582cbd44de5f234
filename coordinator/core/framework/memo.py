"""What the cycle remembers per node: node-local verdicts, placements and scores per pod class.

A :class:`Memo` lives in ``NodeInfo.memo`` under the pod class's key (the class, the node-local
filters run, whether DRA serves the pod's GPUs); a ``NodeInfo`` never changes, so what was
computed for it stays true. A node that gets a pod is a new ``NodeInfo`` with an empty memo —
but some refusals are known to stay: a filter declaring ``lasting_refusals = True`` promises
that when it refuses a pod class on a node, it refuses it on every node
:meth:`~coordinator.core.snapshot.nodeinfo.NodeInfo.adding` makes from that one (more pods never
free CPU, GPUs, room on a GPU or host ports; labels, taints and the hardware do not change).
Such refusals are kept as keys in ``NodeInfo.refused``, which ``adding`` carries over: the cycle
skips those nodes without running a filter. The refusal's own status (its numbers, and maybe
an earlier filter's reason) is worked out afresh only when a message or explanation asks for it.

Nodes alike share their entries. When every node-local plugin of the profile declares
``alike_nodes = True`` (it reads only what ``NodeInfo.state_key`` stands for, see
:mod:`coordinator.core.snapshot.statekey`), the framework keeps a table (``Framework.alike``)
from (state key, pod class) to the last passing entry made for it: a node just made (a pod was
placed, forgotten, bound, nominated, or the node changed) whose state equals one judged before
takes that entry — verdict, placement, scores — without a filter run. A changed node is a new
``NodeInfo`` with a new state key, so nothing is ever invalidated by hand; the cycle shares
nothing for pods that name nodes (``nodeSelector``, node affinity: NodeAffinity reads the
node's name) or use DRA (their GPUs are chosen from the node's ResourceSlices).

Refusals are shared per filter. A whole node state is rarely seen twice where a pod is refused
(the CPU its pods request differs), but what one filter reads often is: a node-local filter may
declare ``filter_key(node)``, a token of everything of the node it reads (``None``: share
nothing), and the framework keeps its refusals by (filter, that token, pod class). A node whose
earlier filters pass takes such a refusal — the very status the filter would return — without
running the filter. Passes are not kept (a filter may choose a placement as it passes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import (
    FilterKeyPlugin,
    FilterPlugin,
    Plugin,
    ScorePlugin,
)
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.podinfo import Placement
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SUCCESS, Code, Status

__all__ = [
    "ALIKE_LIMIT",
    "MEMO_LIMIT",
    "NOT_SCORED",
    "REFUSED_BEFORE",
    "Alike",
    "Memo",
    "Placements",
    "has_lasting_refusals",
    "local_score",
    "remember",
]


@dataclass(slots=True, eq=False)
class Memo:
    """Node-local verdict, placement and raw scores of one pod class on one NodeInfo."""

    verdict: Status
    placement: Placement | None
    #: plugin (with its epoch, if it has one) → raw score; and the weighted local sums. Only a
    #: passing entry is scored: a refusal's are :data:`NOT_SCORED`, one dict for all.
    scores: dict[object, float]
    sums: dict[object, float]
    epoch: object = None  # the filters' epochs the placement was chosen in


#: The scores of every refusal (never written: only nodes that pass are scored). Sharing it
#: leaves fewer objects for the garbage collector to walk.
NOT_SCORED: Final[dict[object, float]] = {}

#: Pod classes remembered per NodeInfo before its memo is cleared. A cluster sharing GPUs sees
#: more classes (a share's fraction is part of its class): at 64 the memo of a node visited by
#: every failing cycle was cleared so often that the Alibaba-shaped trace ran at twice the µs.
MEMO_LIMIT: Final = 256

#: Entries the table of alike nodes holds before it is cleared (then filled again).
ALIKE_LIMIT: Final = 50_000

#: Stands in for a refusal known from the node this one was made from (``NodeInfo.refused``):
#: never stored in a memo, so whoever needs the refusal's status judges the node afresh.
REFUSED_BEFORE: Final = Memo(
    Status(Code.UNSCHEDULABLE, detail="refused on the node this one was made from"),
    None,
    NOT_SCORED,
    NOT_SCORED,
)


@dataclass(slots=True, eq=False)
class Alike:
    """What nodes alike share: passing entries by (state key, pod class), and refusals by
    (filter, its ``filter_key`` of the node, pod class) for the filters that declare one."""

    entries: dict[object, Memo] = field(default_factory=dict)
    refusals: dict[tuple[str, object, object], Status] = field(default_factory=dict)
    #: filter name → its ``filter_key``
    keys: dict[str, Callable[[NodeInfo], object]] = field(default_factory=dict)

    @classmethod
    def of(cls, filters: Sequence[FilterPlugin]) -> Alike:
        return cls(keys={f.name: f.filter_key for f in filters if isinstance(f, FilterKeyPlugin)})


def has_lasting_refusals(plugin: object) -> bool:
    """Whether ``plugin`` declares that adding pods to a node never lifts its refusals."""
    return isinstance(plugin, Plugin) and plugin.lasting_refusals


class Placements(dict[str, Placement]):
    """The cycle's placements: written by filters on memo misses, read through to the memo for
    nodes whose verdict was remembered (so a warm cycle never copies them)."""

    __slots__ = ("_key", "_snapshot")

    def __init__(self, snapshot: Snapshot, key: object) -> None:
        super().__init__()
        self._snapshot = snapshot
        self._key = key

    def _remembered(self, name: str) -> Placement | None:
        node = self._snapshot.get(name)
        entry = node.memo.get(self._key) if node is not None else None
        return entry.placement if isinstance(entry, Memo) else None

    def __missing__(self, name: str) -> Placement:
        placement = self._remembered(name)
        if placement is None:
            raise KeyError(name)
        return placement

    def get(self, name: str, default: Placement | None = None) -> Placement | None:  # type: ignore[override]
        if name in self:
            return dict.__getitem__(self, name)
        placement = self._remembered(name)
        return default if placement is None else placement


def remember(
    node: NodeInfo,
    key: object,
    local_filters: Sequence[FilterPlugin],
    state: CycleState,
    pod: PodRequest,
    placements: Placements,
    epoch: object,
    since: Memo | None = None,
    alike: Alike | None = None,
) -> Memo:
    """Run the node-local filters on ``node`` and remember the verdict on it (replacing what
    was remembered for ``key``). ``since``: the node's entry from another epoch, which passed:
    ``local_filters`` are then only those from the first filter with an epoch on (the others
    passed on this very node), and the placement they chose stands unless one chooses again;
    when the same placement is chosen, ``since`` is kept, with its scores. ``alike``: the
    framework's table of entries by (state key, ``key``) — an entry there for a node in the
    same state (and, with ``since``, of this epoch) is taken instead of running the filters,
    and a filter's refusal kept there for a node it reads alike instead of running that one."""
    if node.state_key is None:
        alike = None
    table = alike.entries if alike is not None else None
    shared = (node.state_key, key)
    if table is not None:
        known = table.get(shared)
        if known is not None and (since is None or (known.epoch == epoch and known is not since)):
            _store(node.memo, key, known)
            return known
    verdict = SUCCESS
    if since is not None and since.placement is not None:
        placements[node.name] = since.placement
    keyed = alike.keys if alike is not None else None
    for f in local_filters:
        key_of = keyed.get(f.name) if keyed else None
        if key_of is None:
            status = f.filter(state, pod, node)
            if status is SUCCESS or status.is_success:
                continue
            verdict = _signed(status, f.name)
        else:
            verdict = _keyed_verdict(alike, f, (f.name, key_of(node), key), state, pod, node)  # type: ignore[arg-type]
            if verdict is SUCCESS:
                continue
        if has_lasting_refusals(f) and len(node.refused) < MEMO_LIMIT:
            node.refused.add(key)
        break
    placement = dict.get(placements, node.name)
    if since is not None and verdict is SUCCESS and placement == since.placement:
        since.epoch = epoch  # chosen alike: its scores (those of an epoch under its key) stand
        return since
    entry = (
        Memo(verdict, placement, {}, {}, epoch)
        if verdict is SUCCESS
        else Memo(verdict, placement, NOT_SCORED, NOT_SCORED, epoch)
    )
    _store(node.memo, key, entry)
    if table is not None and verdict is SUCCESS:  # whole states refused alike are rare
        if len(table) >= ALIKE_LIMIT:
            table.clear()
        table[shared] = entry
    return entry


def _keyed_verdict(
    alike: Alike,
    f: FilterPlugin,
    shared: tuple[str, object, object],
    state: CycleState,
    pod: PodRequest,
    node: NodeInfo,
) -> Status:
    """``f``'s verdict on ``node``, signed: a refusal kept for its ``filter_key`` of the node, or
    the filter run (and its refusal kept)."""
    refusals = alike.refusals
    if shared[1] is not None:
        known = refusals.get(shared)
        if known is not None:
            return known
    status = f.filter(state, pod, node)
    if status is SUCCESS or status.is_success:
        return SUCCESS
    signed = _signed(status, f.name)
    if shared[1] is not None:
        if len(refusals) >= ALIKE_LIMIT:
            refusals.clear()
        refusals[shared] = signed
    return signed


#: Refusals signed by their plugin, one object per distinct refusal: nodes refused alike hold
#: the same status (fewer objects for the garbage collector to walk).
_SIGNED: dict[tuple[Status, str], Status] = {}


def _signed(status: Status, plugin: str) -> Status:
    key = (status, plugin)
    signed = _SIGNED.get(key)
    if signed is None:
        if len(_SIGNED) >= ALIKE_LIMIT:
            _SIGNED.clear()
        signed = _SIGNED[key] = status.with_plugin(plugin)
    return signed


def _store(memo: dict[object, object], key: object, entry: Memo) -> None:
    if len(memo) >= MEMO_LIMIT and key not in memo:
        memo.clear()
    memo[key] = entry


def local_score(
    entry: Memo,
    plugin: ScorePlugin,
    key: object,
    state: CycleState,
    pod: PodRequest,
    node: NodeInfo,
) -> float:
    value = entry.scores.get(key)
    if value is None:
        value = entry.scores[key] = plugin.score(state, pod, node)
    return value
