"""The API types the NeuroNetes controller reads and writes."""

from __future__ import annotations

from typing import Final

from common.kube import Resource

__all__ = ["AGENT_POOLS", "PRIORITY_CLASSES", "TOOL_BINDINGS"]

AGENT_POOLS: Final = Resource("neuronetes.io", "v1alpha1", "agentpools", True, "AgentPool")
TOOL_BINDINGS: Final = Resource("neuronetes.io", "v1alpha1", "toolbindings", True, "ToolBinding")
PRIORITY_CLASSES: Final = Resource(
    "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False, kind="PriorityClass"
)
