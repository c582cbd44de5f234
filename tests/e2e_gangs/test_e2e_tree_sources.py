"""The domain tree from objects the cluster already keeps, watched live on the real control plane
(``gangs.tree.source``): Volcano HyperNodes (deploy/crds/hypernodes.topology.volcano.sh.yaml)
and a Kueue or KAI ``Topology`` (Kueue's own CRD, from its Go module at the catalog's version;
KAI's as published, tests/support/crds/topologies.kai.scheduler.yaml).

Every node also carries a ``topos.io/leaf`` of its own naming one leaf for all: with a source
configured that label is not read, so a gang that keeps to one rack does so because of the
source's tree.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from common.kube import EVENTS, KubeClient, NotFound, Resource
from coordinator.adapters.kube.tree import HYPERNODES, KAI_TOPOLOGIES, KUEUE_TOPOLOGIES, tree_watch
from coordinator.api.gangs import domains_summary
from coordinator.api.keys import INVENTORY
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from coordinator.core.domains.sources import SOURCE_KEYS
from coordinator.engine.gangs.service import GangSettings
from coordinator.inventory.store import Inventory
from tests.support.gang_cluster import LEAF, GangCluster, gang_pod, install_crd
from tests.support.inventory_wait import until
from tests.support.polling import eventually
from tests.support.workload_crds import install_workload_crds

RACK = "example.com/rack"
BLOCK = "example.com/block"
ONE_LEAF = "one-leaf-for-all"
SETTINGS = GangSettings(backoff_s=2.0, keys=SOURCE_KEYS)


@pytest.fixture(scope="module")
def hypernode_crd(kubectl: Callable[..., Any]) -> None:
    install_crd(kubectl, "hypernodes.topology.volcano.sh")


@pytest.fixture(scope="module")
def topology_crds(kubectl: Callable[..., Any]) -> None:
    install_workload_crds(kubectl, "Topology")  # Kueue's, from its module
    install_crd(kubectl, "topologies.kai.scheduler")  # KAI's, tests/support/crds


@contextlib.asynccontextmanager
async def watching(
    client: KubeClient,
    inventory: Inventory,
    source: str,
    topology: str = "",
    *,
    own_pod: tuple[str, str] | None = None,
) -> AsyncIterator[None]:
    """The coordinator's tree watch (what ``KubeBackend`` starts for ``gangs.tree``), posting
    its Events (``own_pod``: the coordinator's Pod, namespace and name)."""
    reflector = tree_watch(
        client, inventory, source=source, topology=topology, events_client=client, own_pod=own_pod
    )
    assert reflector is not None
    task = asyncio.create_task(reflector.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def objects(client: KubeClient, resource: Resource) -> AsyncIterator[list[str]]:
    """Names created into the list are deleted on the way out (cluster-scoped objects)."""
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            with contextlib.suppress(NotFound):
                await client.delete(resource, name)


def hypernode(name: str, tier: int, *members: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": HYPERNODES.api_version,
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": tier, "members": list(members)},
    }


def exact(kind: str, name: str) -> dict[str, Any]:
    return {"type": kind, "selector": {"exactMatch": {"name": name}}}


def leaf_of(inventory: Inventory, node: str) -> str | None:
    state = inventory.node(node)
    return None if state is None else state.labels.get(LEAF)


async def gang(cluster: GangCluster, name: str, size: int) -> set[str]:
    for k in range(size):
        await cluster.create(gang_pod(f"{name}-{k}", name, size, gpus=8, cpu="8"))
    return set((await cluster.all_bound(f"topos.io/gang={name}", size)).values())


@pytest.mark.usefixtures("hypernode_crd")
async def test_hypernodes_are_the_tree_and_what_cannot_be_one_is_named(
    cluster: GangCluster,
) -> None:
    run = cluster.run
    everywhere = {LEAF: ONE_LEAF}  # not read: the HyperNodes are the tree
    a = [await cluster.add_node(f"a{i}", "dgx-a100", labels_extra=everywhere) for i in (1, 2)]
    b = [
        await cluster.add_node(f"b{i}", "dgx-a100", labels_extra={**everywhere, RACK: f"b-{run}"})
        for i in (1, 2, 3)
    ]
    c1 = await cluster.add_node("c1", "dgx-a100", labels_extra=everywhere)
    rack_a, rack_b, block = f"rack-a-{run}", f"rack-b-{run}", f"block-{run}"
    a_nodes = {"type": "Node", "selector": {"regexMatch": {"pattern": f"^a[0-9]-{run}$"}}}
    b_nodes = {"type": "Node", "selector": {"labelMatch": {"matchLabels": {RACK: f"b-{run}"}}}}
    async with objects(cluster.kube, HYPERNODES) as made:
        for body in (
            hypernode(rack_a, 1, a_nodes),
            hypernode(rack_b, 1, b_nodes),
            hypernode(
                block,
                2,
                exact("HyperNode", rack_a),
                exact("HyperNode", rack_b),
                exact("HyperNode", f"ghost-{run}"),
            ),
            hypernode(f"dup-1-{run}", 1, exact("Node", c1)),
            hypernode(f"dup-2-{run}", 1, exact("Node", c1)),
            hypernode(f"loop-x-{run}", 3, exact("HyperNode", f"loop-y-{run}")),
            hypernode(f"loop-y-{run}", 3, exact("HyperNode", f"loop-x-{run}")),
        ):
            await cluster.kube.create(HYPERNODES, body)
            made.append(body["metadata"]["name"])
        async with cluster.gang_coordinator(gang_settings=SETTINGS) as coord:
            inventory = coord.inventory
            async with watching(cluster.kube, inventory, "volcano"):
                await until(inventory, lambda: leaf_of(inventory, b[2]) == rack_b)
                assert {leaf_of(inventory, n) for n in a} == {rack_a}
                assert leaf_of(inventory, c1) is None
                problems = inventory.tree_status().problems
                assert (
                    f"HyperNode {block}: members[2] names HyperNode ghost-{run}, which does not "
                    "exist: not used"
                ) in problems
                assert (
                    f"HyperNode loop-y-{run}: members[0] selects HyperNode loop-x-{run}, which "
                    f"leads back to loop-y-{run} (a cycle loop-y-{run} → loop-x-{run} → "
                    f"loop-y-{run}): not used"
                ) in problems
                twice = (
                    f"node {c1} is a member of HyperNodes dup-1-{run}, dup-2-{run} (tier 1): "
                    "read as in none of them"
                )
                assert twice in problems
                # a Warning Event about each of the two HyperNodes (kubectl describe hypernode)
                for name in (f"dup-1-{run}", f"dup-2-{run}"):
                    warning = await eventually(
                        lambda name=name: tree_problem(cluster.kube, "default", name),
                        what=f"the TreeProblem Event about {name}",
                    )
                    assert warning["involvedObject"]["kind"] == "HyperNode"
                    assert (warning["type"], warning["message"]) == ("Warning", twice)
                # another HyperNode changes, the problem stays: no second Event, no new count
                racks = [exact("HyperNode", rack_a), exact("HyperNode", rack_b)]
                await cluster.kube.patch(HYPERNODES, block, {"spec": {"members": racks}})
                await eventually(
                    lambda: not any("ghost" in p for p in inventory.tree_status().problems),
                    what="the ghost member gone",
                )
                assert twice in inventory.tree_status().problems
                again = await tree_problem(cluster.kube, "default", f"dup-1-{run}")
                assert again is not None
                assert again.get("count", 1) == 1
                # three whole nodes: rack b is the one leaf that holds them (a1, a2 come first
                # by name, and one leaf label covers all six)
                assert await gang(cluster, "first", 3) == set(b)
                # live: c1 joins rack a (its duplicate racks gone) — rack a now holds three
                for name in (f"dup-1-{run}", f"dup-2-{run}"):
                    await cluster.kube.delete(HYPERNODES, name)
                members = [a_nodes, exact("Node", c1)]
                await cluster.kube.patch(HYPERNODES, rack_a, {"spec": {"members": members}})
                await until(inventory, lambda: leaf_of(inventory, c1) == rack_a)
                problems = inventory.tree_status().problems
                assert not any(p.startswith(f"node {c1} is a member") for p in problems)
                # its own topos.io/leaf (one for all six) differs from the tree's: named
                assert (
                    f"node {c1}: {LEAF} is {ONE_LEAF} on the Node, {rack_a} in the volcano tree: "
                    "the tree's is used"
                ) in problems
                assert await gang(cluster, "second", 3) == {*a, c1}


async def tree_problem(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The one TreeProblem Event about the object ``name`` (asserting there is at most one)."""
    found = await kube.list(
        EVENTS, namespace=namespace, field_selector=f"involvedObject.name={name}"
    )
    events = [e for e in found["items"] if e.get("reason") == "TreeProblem"]
    assert len(events) <= 1, events
    return events[0] if events else None


def only_differ(problems: Sequence[str], source: str, leaves: Mapping[str, str]) -> bool:
    """Whether ``problems`` name each node of ``leaves`` whose own topos.io/leaf differs from
    the tree's leaf for it, and nothing but such nodes (other tests' nodes among them)."""
    lines = {
        f"node {n}: {LEAF} is {ONE_LEAF} on the Node, {leaf} in the {source} tree: "
        "the tree's is used"
        for n, leaf in leaves.items()
    }
    others = [p for p in problems if not p.startswith(("node ", "… and "))]
    return lines <= set(problems) and not others


def topology_object(resource: Resource, name: str, *levels: str) -> dict[str, Any]:
    return {
        "apiVersion": resource.api_version,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": level} for level in levels]},
    }


@pytest.mark.usefixtures("topology_crds")
@pytest.mark.parametrize("source", ["kueue", "kai"])
async def test_a_named_topology_is_followed_live_and_a_deleted_one_keeps_its_tree(
    cluster: GangCluster, source: str
) -> None:
    resource = KUEUE_TOPOLOGIES if source == "kueue" else KAI_TOPOLOGIES
    run = cluster.run
    name = f"topo-{run}"
    what = f"Topology {name} ({resource.plural}.{resource.group})"
    rack_of: dict[str, str] = {}
    for i in (1, 2, 3, 4):  # n1, n3 in rack r1; n2, n4 in rack r2; one block
        rack = f"r{2 - i % 2}"
        labels = {LEAF: ONE_LEAF, RACK: rack, BLOCK: "blk"}
        rack_of[await cluster.add_node(f"n{i}", "dgx-a100", labels_extra=labels)] = rack
    n1 = next(iter(rack_of))
    async with (
        objects(cluster.kube, resource) as made,
        cluster.gang_coordinator(gang_settings=SETTINGS) as coord,
    ):
        inventory = coord.inventory
        me = f"coordinator-{run}"  # the coordinator's Pod (POD_NAME): where its Events go
        own = (cluster.namespace, me)
        async with watching(cluster.kube, inventory, source, name, own_pod=own):
            await eventually(
                lambda: "not found" in str(inventory.tree_status().problems), what="not found"
            )
            missing = f"{what}: not found; no tree yet: nodes are in no leaf, spine or zone"
            assert inventory.tree_status().problems == (missing,)
            # a Warning Event on the coordinator's Pod (kubectl describe pod)
            warning = await eventually(
                lambda: tree_problem(cluster.kube, cluster.namespace, me), what="the Event"
            )
            assert warning["involvedObject"]["kind"] == "Pod"
            assert (warning["type"], warning["message"]) == ("Warning", missing)
            assert leaf_of(inventory, n1) is None  # its own topos.io/leaf is not read
            levels = (BLOCK, RACK, "kubernetes.io/hostname")
            await cluster.kube.create(resource, topology_object(resource, name, *levels))
            made.append(name)
            await until(inventory, lambda: leaf_of(inventory, n1) == "r1")
            assert {n: leaf_of(inventory, n) for n in rack_of} == rack_of
            # n1's own topos.io/leaf differs from the tree's: named, the tree's used
            assert only_differ(inventory.tree_status().problems, source, {n1: "r1"})
            # two whole nodes inside one rack (by name n1, n2 would come first, across racks)
            placed = await gang(cluster, "pair", 2)
            assert len({rack_of[n] for n in placed}) == 1
            # deleted: the tree it gave is kept, and the status says so
            await cluster.kube.delete(resource, name)
            await eventually(
                lambda: "deleted" in str(inventory.tree_status().problems), what="deleted"
            )
            problems = inventory.tree_status().problems
            assert problems[0] == (
                f"{what}: deleted; the tree of its levels {', '.join(levels)} is kept"
            )
            assert only_differ(problems[1:], source, {n1: "r1"})
            assert leaf_of(inventory, n1) == "r1"
            # the same Event, its count and message brought up to date (one per reason)

            async def deleted() -> dict[str, Any] | None:
                event = await tree_problem(cluster.kube, cluster.namespace, me)
                return event if event and event["message"] == problems[0] else None

            updated = await eventually(deleted, what="the Event saying deleted")
            assert updated["count"] == 2
            # created again with other levels (both make the levels immutable): the new tree
            await cluster.kube.create(resource, topology_object(resource, name, BLOCK))
            await until(inventory, lambda: leaf_of(inventory, n1) == "blk")
            assert {leaf_of(inventory, n) for n in rack_of} == {"blk"}
            assert only_differ(inventory.tree_status().problems, source, {n1: "blk"})


@pytest.mark.usefixtures("hypernode_crd")
async def test_the_coordinator_wired_from_its_config_follows_the_hypernodes(
    cluster: GangCluster, kubeconfig: Path
) -> None:
    """``gangs.tree.source: volcano`` in the config: ``wire()`` starts the watch,
    ``GET /v1/domains`` names the source, the HyperNode leaf and what is not used, and the
    HyperNode gets a Warning Event saying it."""
    run = cluster.run
    node = await cluster.add_node("w1", "dgx-a100", labels_extra={LEAF: "own"})
    rack = f"rack-w-{run}"
    config = parse_config(
        {
            "scheduler": {"namespace": cluster.namespace},
            "gangs": {"tree": {"source": "volcano"}},
            # a Lease of its own: it writes the Event only while it leads, whatever coordinator
            # another test of the session left holding the default one
            "leaderElection": {"leaseName": f"topos-{run}"},
        }
    )
    app = wire(config, KubeBackend(str(kubeconfig)))
    async with objects(cluster.kube, HYPERNODES) as made, running(app):
        inventory = app[INVENTORY]
        body = hypernode(rack, 1, exact("Node", node), exact("HyperNode", f"gone-{run}"))
        await cluster.kube.create(HYPERNODES, body)
        made.append(rack)
        await eventually(lambda: leaf_of(inventory, node) == rack, what="the HyperNode leaf")
        summary = domains_summary(app)
        assert summary.tree_source == "volcano"
        assert rack in {leaf.name for leaf in summary.leaves}
        assert (
            f"HyperNode {rack}: members[1] names HyperNode gone-{run}, which does not exist: "
            "not used"
        ) in summary.tree_problems

        async def event() -> dict[str, Any] | None:
            found = await cluster.kube.list(
                EVENTS, namespace="default", field_selector=f"involvedObject.name={rack}"
            )
            return next((e for e in found["items"] if e.get("reason") == "TreeProblem"), None)

        # kubectl describe hypernode shows it
        warning = await eventually(event, what="the TreeProblem Event")
        assert warning["type"] == "Warning"
        assert warning["involvedObject"]["kind"] == "HyperNode"
        assert warning["message"] == (
            f"HyperNode {rack}: members[1] names HyperNode gone-{run}, which does not exist: "
            "not used"
        )
