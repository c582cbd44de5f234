"""Shared helpers for the simulation tests: clusters from YAML text on the profile-driven fake
hardware (each profile discovered once per session)."""

from __future__ import annotations

import functools

from agent.devices import discover_profile
from common.model import NodeTopology
from coordinator.core.snapshot.nodeinfo import NodeInfo
from coordinator.sim import ClusterSpec, RunResult, build_nodes, parse_cluster
from coordinator.sim.cluster import NodeGroup
from tests.support.nvl72 import clique


@functools.cache
def topology_of(profile: str) -> NodeTopology:
    return discover_profile(profile, hostname=profile)


def make_cluster(text: str) -> tuple[ClusterSpec, list[NodeInfo]]:
    spec = parse_cluster(text)
    return spec, build_nodes(spec, topology_of)


def two_nvl72_racks(*, hgx: int = 0) -> list[NodeInfo]:
    """Two GB200 NVL72 racks of 4 trays (``r1-…``, ``r2-…``, each its NVLink clique) in one leaf,
    and ``hgx`` DGX H100 nodes beside them, for the replay."""
    racks = [
        NodeGroup(
            profile="gb200-nvl72",
            count=4,
            name_prefix=f"r{r}",
            leaf="leaf-1",
            spine="spine-1",
            labels={"nvidia.com/gpu.clique": clique(r)},
        )
        for r in (1, 2)
    ]
    if hgx:
        racks.append(
            NodeGroup(
                profile="dgx-h100", count=hgx, name_prefix="hgx", leaf="leaf-1", spine="spine-1"
            )
        )
    return build_nodes(ClusterSpec(name="two-racks", groups=tuple(racks)), topology_of)


def racks_of(result: RunResult, job_id: str) -> set[str]:
    """The racks (node name prefixes) job ``job_id`` of a replay ran on."""
    outcome = next(o for o in result.outcomes.values() if o.job.job_id == job_id)
    return {node.split("-")[0] for node in outcome.nodes}
