"""``/ui`` with the tree from Volcano HyperNodes (``gangs.tree.source: volcano``), on the real
control plane: the leaves drawn are the HyperNodes (not the Nodes' own ``topos.io/leaf``), and
what of the HyperNodes is not used, and the Nodes whose own leaf label disagrees, are listed above
the fabric."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from common.kube import KubeClient, NotFound
from common.labels import LEAF
from coordinator.adapters.kube.tree import HYPERNODES
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from tests.support.gang_cluster import install_crd
from tests.support.gpu_cluster import RUN_LABEL, GpuCluster, Kubectl
from tests.ui.browser import chromium_or_skip, launch


def _hypernode(name: str, tier: int, *members: tuple[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": HYPERNODES.api_version,
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {
            "tier": tier,
            "members": [{"type": t, "selector": {"exactMatch": {"name": n}}} for t, n in members],
        },
    }


async def test_the_page_draws_the_hypernode_leaves_and_lists_what_is_not_used(
    kube: KubeClient, kubeconfig: Path, namespace: str, kubectl: Kubectl, tmp_path: Path
) -> None:
    chromium_or_skip()
    install_crd(kubectl, "hypernodes.topology.volcano.sh")
    cluster = GpuCluster(kube, kubeconfig, namespace)
    own = {LEAF: f"own-{cluster.run}"}  # not used: the HyperNodes are the tree
    nodes = [await cluster.add_node(f"t{i}", "dgx-h100", labels_extra=own) for i in (1, 2)]
    rack, block = f"rack-ui-{cluster.run}", f"block-ui-{cluster.run}"
    missing = f"gone-{cluster.run}"
    config = parse_config(
        {
            "auth": {"enabled": False},
            "scheduler": {
                "namespace": namespace,
                "nodeSelector": {RUN_LABEL: cluster.run},
                "agentGraceSeconds": 0,  # no agents: the hardware comes from the Nodes
            },
            "gangs": {"tree": {"source": "volcano"}},
        }
    )
    made: list[str] = []
    try:
        for body in (
            _hypernode(rack, 1, *(("Node", n) for n in nodes)),
            _hypernode(block, 2, ("HyperNode", rack), ("HyperNode", missing)),
        ):
            await kube.create(HYPERNODES, body)
            made.append(body["metadata"]["name"])
        async with (
            running(wire(config, KubeBackend(str(kubeconfig)))) as url,
            launch(tmp_path / "chromium") as page,
        ):
            await page.goto(f"{url}/ui#nodes={cluster.run}")
            await page.wait_for(
                "[...document.querySelectorAll('[data-leaf]')].map((s) => s.dataset.leaf)"
                f".join() === {rack!r}",
                what="the HyperNode's leaf",
            )
            spines = await page.evaluate(
                "[...document.querySelectorAll('[data-spine]')].map((s) => s.dataset.spine)"
            )
            assert spines == [block]
            listed = await page.wait_for(
                "document.querySelector('.tree-problems')?.innerText", what="the tree's problems"
            )
            # The Nodes' own leaf label disagrees with the tree: named, the tree's used.
            disagree = f"topos.io/leaf is {own[LEAF]} on the Node, {rack} in the volcano tree"
            assert listed.splitlines() == [
                "tree from volcano: 3 problems",
                f"HyperNode {block}: members[1] names HyperNode {missing}, which does not exist: "
                "not used",
                *(f"node {n}: {disagree}: the tree's is used" for n in nodes),
            ]
    finally:
        for name in made:
            with contextlib.suppress(NotFound):
                await kube.delete(HYPERNODES, name)
