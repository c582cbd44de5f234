"""A user's Score plugin (``scheduling.customScorers``), guarded so its failures stay its own.

:class:`GuardedScorer` scores every feasible node in PreScore by calling the user's
``pre_score`` (when it has one), ``score`` per node and ``normalize_scores`` (when it has one).
Anything raised, a score that is not a finite number, or a PreScore that fails, skips the plugin
for that cycle: the pod is placed on the other plugins' scores and the reason is logged (once a
minute per plugin). Scores are clamped to 0–100.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Final

from coordinator.core.framework.cyclestate import CycleState, StateKey
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Status

__all__ = ["GuardedScorer"]

log = logging.getLogger(__name__)

_LOG_EVERY_S: Final = 60.0


class GuardedScorer:
    def __init__(self, plugin: object, name: str) -> None:
        self.plugin = plugin
        self.name = name
        self._key = StateKey[dict[str, float]](f"custom:{name}")
        self._last_logged = -math.inf
        #: The last failure (for tests and explanations): "" while the plugin behaves.
        self.last_error = ""

    def pre_score(
        self, state: CycleState, pod: PodRequest, nodes: Sequence[NodeInfo], snapshot: Snapshot
    ) -> Status:
        try:
            pre = getattr(self.plugin, "pre_score", None)
            if pre is not None:
                status = pre(state, pod, nodes, snapshot)
                if isinstance(status, Status) and not status.is_success:
                    if status.is_skip:
                        return SKIP
                    raise RuntimeError(f"pre_score said {status.message}")
            scores: dict[str, float] = {}
            for node in nodes:
                value = self.plugin.score(state, pod, node)  # type: ignore[attr-defined]
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise TypeError(f"score returned {value!r}, not a number")
                if not math.isfinite(value):
                    raise ValueError(f"score returned {value!r}")
                scores[node.name] = float(value)
            normalize = getattr(self.plugin, "normalize_scores", None)
            if normalize is not None:
                normalize(state, pod, scores)
        except Exception as exc:
            self._failed(pod, exc)
            return SKIP
        state.write(self._key, {n: min(100.0, max(0.0, float(v))) for n, v in scores.items()})
        return SUCCESS

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        return state.read(self._key).get(node.name, 0.0)

    def _failed(self, pod: PodRequest, exc: Exception) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if now - self._last_logged >= _LOG_EVERY_S:
            self._last_logged = now
            log.warning(
                "custom scorer %s skipped for pod %s: %s (scheduling goes on without it)",
                self.name,
                pod.key,
                self.last_error,
            )
