"""Built-in plugins and the default profile.

The registry maps a plugin name to a factory taking the :class:`~..config.SchedulerConfig`.
Other packages add theirs by passing ``registry={"MyPlugin": MyPlugin}`` to
:meth:`~..framework.Framework.build` and naming it in ``profile`` or the config's
``enabled_plugins``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.plugins.gpu import GpuAvailability, GpuPacking, GpuTopology, NumaTopology
from coordinator.core.plugins.interpodaffinity import InterPodAffinity
from coordinator.core.plugins.nodeaffinity import NodeAffinity
from coordinator.core.plugins.nodeports import NodePorts
from coordinator.core.plugins.noderesources import NodeResourcesFit
from coordinator.core.plugins.nodestate import NodeHealth, NodeUnschedulable
from coordinator.core.plugins.podtopologyspread import PodTopologySpread
from coordinator.core.plugins.tainttoleration import TaintToleration

__all__ = ["DEFAULT_PROFILE", "default_registry"]

# Filter order follows kube-scheduler's (cheap node-level gates first), so the reason a node
# reports is the same one kube would report.
DEFAULT_PROFILE: Final = (
    "NodeHealth",
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "GpuTopology",
    "PodTopologySpread",
    "InterPodAffinity",
    "NumaTopology",
    "GpuPacking",
    "GpuAvailability",
)


def default_registry() -> Mapping[str, Callable[[SchedulerConfig], object]]:
    return {
        "NodeHealth": lambda _: NodeHealth(),
        "NodeUnschedulable": lambda _: NodeUnschedulable(),
        "TaintToleration": lambda _: TaintToleration(),
        "NodeAffinity": lambda _: NodeAffinity(),
        "NodePorts": lambda _: NodePorts(),
        "NodeResourcesFit": NodeResourcesFit,
        "GpuTopology": lambda _: GpuTopology(),
        "PodTopologySpread": lambda _: PodTopologySpread(),
        "InterPodAffinity": lambda _: InterPodAffinity(),
        "NumaTopology": lambda _: NumaTopology(),
        "GpuPacking": GpuPacking,
        "GpuAvailability": lambda _: GpuAvailability(),
    }
