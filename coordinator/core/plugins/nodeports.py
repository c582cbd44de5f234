"""Host ports, as kube-scheduler's NodePorts plugin: a pod binding ``hostPort`` P/protocol may
not go where a pod already binds the same port and protocol on the same address, or where
either side listens on all addresses ("node(s) didn't have free ports for the requested pod
ports")."""

from __future__ import annotations

from typing import Final

from coordinator.core.framework.cyclestate import CycleState
from coordinator.core.framework.interfaces import Plugin
from coordinator.core.plugins.declaration import PluginSpec
from coordinator.core.podspec.parse import PodRequest
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.core.snapshot.snapshot import Snapshot
from coordinator.core.status import SKIP, SUCCESS, Reason, Status

__all__ = ["NodePorts"]

_TAKEN = Status.unschedulable(Reason.NODE_PORTS)


class NodePorts(Plugin):
    name = "NodePorts"
    node_local = True
    alike_nodes = True  # reads only what NodeInfo.state_key stands for
    lasting_refusals = True  # pods added to a node only bind more ports

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: Snapshot) -> Status:
        return SUCCESS if pod.host_ports else SKIP

    def filter(self, state: CycleState, pod: PodRequest, node: NodeInfo) -> Status:
        for wanted in pod.host_ports:
            for used in node.used_ports:
                if wanted.conflicts(used):
                    return _TAKEN
        return SUCCESS


PLUGIN: Final = PluginSpec[None](plugin=NodePorts)
