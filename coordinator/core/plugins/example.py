"""The smallest scorer, as a template (docs/architecture.md, "Adding a scorer"): nodes carrying
the label its args name (``topos.io/example-preferred`` by default) with the value ``true``
score 100, others 0. Not in the registry; a test registers it
(tests/coordinator/core/test_sched_example_plugin.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo

__all__ = ["PLUGIN", "PreferLabelled", "PreferLabelledArgs"]

LABEL: Final = "topos.io/example-preferred"


@dataclass(frozen=True, slots=True)
class PreferLabelledArgs:
    label: str = LABEL  # pluginConfig: [{name: PreferLabelled, args: {label: ...}}]


class PreferLabelled(Plugin):
    name = "PreferLabelled"
    node_local = True  # reads only the node: its score is remembered per node and pod class
    alike_nodes = True  # reads only labels, which NodeInfo.state_key stands for

    def __init__(self, args: PreferLabelledArgs) -> None:
        self.label = args.label

    def score(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> float:
        return 100.0 if node.labels.get(self.label) == "true" else 0.0


PLUGIN: Final = PluginSpec(
    plugin=PreferLabelled,
    args=PreferLabelledArgs,
    factory=lambda args, context: PreferLabelled(args),
    weight=10,
)
