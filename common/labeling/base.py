"""The labeler contract: one pure function from a topology snapshot to labels/annotations.

A labeler never talks to NVML or Kubernetes; it reads one frozen ``NodeTopology`` and returns a
``NodeLabels``. Labelers are merged in order, later wins (``common.labels.merge``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from common.labels import NodeLabels
from common.model import NodeTopology

Labeler: TypeAlias = Callable[[NodeTopology], NodeLabels]
