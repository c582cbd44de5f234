"""Custom scorers that misbehave, for the customScorers tests (loaded by module path)."""

from __future__ import annotations

from typing import Any


class FailsSometimes:
    """Scores 100 on nodes named in ``good``; raises on the node named ``bad``."""

    name = "FailsSometimes"

    def __init__(self, good: tuple[str, ...] = (), bad: str = "") -> None:
        self.good = set(good)
        self.bad = bad

    def score(self, state: Any, pod: Any, node: Any) -> float:
        if node.name == self.bad:
            raise RuntimeError(f"no data for {node.name}")
        return 100.0 if node.name in self.good else 0.0


class CannotStart:
    def __init__(self) -> None:
        raise ValueError("needs a license key")


class NoScore:
    name = "NoScore"


NOT_CALLABLE = 3
