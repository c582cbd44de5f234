"""Shared helpers for the simulation tests: clusters from YAML text on the profile-driven fake
hardware (each profile discovered once per session)."""

from __future__ import annotations

import functools

from agent.devices import discover_profile
from common.model import NodeTopology
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.sim import ClusterSpec, build_nodes, parse_cluster


@functools.cache
def topology_of(profile: str) -> NodeTopology:
    return discover_profile(profile, hostname=profile)


def make_cluster(text: str) -> tuple[ClusterSpec, list[NodeInfo]]:
    spec = parse_cluster(text)
    return spec, build_nodes(spec, topology_of)
