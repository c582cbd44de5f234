"""The topology view in a real browser (headless Chromium, ``tests/ui/browser.py``) against a whole
coordinator on the real control plane with authentication on.

Three nodes on one spine, from hardware profiles with the agent's labels and its
``topos.io/topology`` annotation (no agent streams: the coordinator reads the hardware from the
Node): an NVSwitch DGX H100, an 8×PCIe box and a MIG-split A100. Pods created through the API
server are placed by the coordinator: an 8-GPU trainer, a MIG pod, a 2-pod gang, two pods asking
for half a GPU each (on one GPU), and two pods that fit nowhere (16 GPUs; half a GPU with more
memory than any GPU has). The page asks for a token, says so when a bad one is typed, and with a
real ServiceAccount token (checked by TokenReview) must show the nodes, link classes in colour,
MIG slices with their holder, who holds which GPU, the shared GPU with both holders at 0.5 and
nothing free, the pending pods (the share's ask, not "no GPU") with the scheduler's reason
and its per-node explanation, the gang, and — refreshing by itself — the pending pod gone once it
is deleted. A screenshot of
the page is saved as ``topology.png`` in the test's temp folder.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from common.kube import PODS, KubeClient
from common.labels import LEAF, SPINE
from common.podkeys import ASSIGNED_GPUS
from coordinator.app.config.load import parse_config
from coordinator.app.kube_backend import KubeBackend
from coordinator.app.main import running, wire
from devcluster.pods import gang_members, gpu_pod, pod
from tests.support.gpu_cluster import RUN_LABEL, GpuCluster
from tests.support.kube_objects import create_service_account
from tests.ui.browser import Page, chromium_or_skip, launch

pytestmark = pytest.mark.kube

FRACTION, MEMORY = "topos.io/gpu-fraction", "topos.io/gpu-memory"
NODES_JS = "[...document.querySelectorAll('article.node')]"
CLIQUE = "nvidia.com/gpu.clique"


def _mig_pod(name: str, profile: str) -> dict[str, Any]:
    obj = pod(name, namespace=None, cpu=None, memory=None)
    obj["spec"]["containers"][0]["resources"] = {"limits": {f"nvidia.com/mig-{profile}": "1"}}
    return obj


def _share_pod(
    name: str, annotations: dict[str, str], node_selector: dict[str, str] | None = None
) -> dict[str, Any]:
    """Part of one GPU, as the share's users write it: annotations, no nvidia.com/gpu."""
    return pod(
        name,
        namespace=None,
        cpu=None,
        memory=None,
        annotations=annotations,
        node_selector=node_selector,
    )


async def _card(page: Page, node: str) -> Any:
    """What one node's card shows: link cells by class, holders, MIG slices, NUMA nodes, text."""
    return await page.evaluate(
        f"""(() => {{
        const card = document.querySelector(`article.node[data-node={json.dumps(node)}]`);
        if (!card) return null;
        const all = (sel) => [...card.querySelectorAll(sel)];
        return {{
            links: all('td.link').map((c) => [c.className.replace('link ', ''), c.dataset.link]),
            holders: all('td.holders [data-holder]').map((h) => h.dataset.holder),
            migs: all('.mig').map((m) => [
                m.dataset.mig, m.querySelector('[data-holder]')?.dataset.holder ?? m.innerText]),
            numa: all('[data-numa]').map((n) => n.dataset.numa),
            shared: all('.shared').map((g) => ({{
            holders: [...g.querySelectorAll('[data-holder]')].map(
                    (h) => [h.dataset.holder, h.dataset.fraction]),
                free: g.dataset.free,
                text: g.innerText,
                bar: [...g.querySelectorAll('.share-seg')].map(
                    (b) => Math.round(b.getBoundingClientRect().width)),
            }})),
            text: card.innerText,
        }};
    }})()"""
    )


async def test_the_page_shows_a_real_clusters_topology_pods_and_gangs(
    kube: KubeClient, kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    chromium_or_skip()
    cluster = GpuCluster(kube, kubeconfig, namespace)
    spine, leaf_a, leaf_b = (f"{t}-{cluster.run}" for t in ("spine", "leaf-a", "leaf-b"))
    h100 = await cluster.add_node("h100", "dgx-h100", labels_extra={LEAF: leaf_a, SPINE: spine})
    pcie = await cluster.add_node("pcie", "pcie-8x", labels_extra={LEAF: leaf_b, SPINE: spine})
    # the MIG box is in an NVLink clique of its own (GFD's <clusterUUID>.<cliqueId>)
    clique = f"{uuid.uuid4()}.1"
    mig = await cluster.add_node(
        "mig", "a100-mig", labels_extra={LEAF: leaf_b, SPINE: spine, CLIQUE: clique}
    )
    await create_service_account(kube, namespace, "viewer")
    token = await kube.request_token(namespace=namespace, service_account="viewer")
    config = parse_config(
        {
            "auth": {"enabled": True, "agentServiceAccounts": [f"{namespace}/topos-agent"]},
            "scheduler": {
                "namespace": namespace,
                "nodeSelector": {RUN_LABEL: cluster.run},
                "agentGraceSeconds": 0,  # no agents: the hardware comes from the Nodes
            },
        }
    )
    async with running(wire(config, KubeBackend(str(kubeconfig)))) as url:
        await cluster.create(gpu_pod("trainer", 8))
        await cluster.create(_mig_pod("server", "1g.5gb"))
        for member in gang_members("pair", 2, gpus=2, namespace=None, cpu=None, memory=None):
            await cluster.create(member)
        await cluster.create(gpu_pod("too-big", 16))
        trainer_node = str((await cluster.bound("trainer"))["spec"]["nodeName"])
        for name in ("server", "pair-0", "pair-1"):
            await cluster.bound(name)
        reason = await cluster.unschedulable("too-big")
        assert "Insufficient nvidia.com/gpu" in reason
        # two halves of one GPU, on the node the trainer left room on
        shared_node = pcie if trainer_node == h100 else h100
        for name in ("half-a", "half-b"):
            await cluster.create(
                _share_pod(name, {FRACTION: "0.5"}, {"kubernetes.io/hostname": shared_node})
            )
        halves = [
            (await cluster.bound(name))["metadata"]["annotations"] for name in ("half-a", "half-b")
        ]
        assert halves[0][ASSIGNED_GPUS] == halves[1][ASSIGNED_GPUS]  # one GPU, shared
        await cluster.create(_share_pod("half-huge", {FRACTION: "0.5", MEMORY: "1Ti"}))
        await cluster.unschedulable("half-huge")

        async with launch(tmp_path / "chromium") as page:
            # /ui redirects to the page; the filter in the address keeps other tests' nodes out
            await page.goto(f"{url}/ui#nodes={cluster.run}")
            await page.wait_for(
                "!document.getElementById('token-form').hidden", what="the token form"
            )
            await page.type_into("#token", "not-a-token")
            await page.click("#token-form button")
            refused = await page.wait_for(
                "!document.getElementById('token-problem').hidden"
                " && document.getElementById('token-problem').innerText",
                what="the bad token refused",
            )
            assert refused == "the coordinator refused the token: invalid bearer token"
            await page.type_into("#token", token)
            await page.click("#token-form button")
            await page.wait_for(f"{NODES_JS}.length === 3", what="the three nodes")
            await page.wait_for(
                "document.querySelector('[data-gang] .badge')?.innerText === 'Bound'",
                what="the gang bound",
            )
            assert await page.evaluate("sessionStorage.getItem('topos.token')") == token
            assert await page.evaluate("location.pathname") == "/ui/"
            names = await page.evaluate(f"{NODES_JS}.map((n) => n.dataset.node)")
            assert names == [h100, mig, pcie]  # leaf-a, then leaf-b's two by name

            spines = await page.evaluate(
                "[...document.querySelectorAll('[data-spine]')].map((s) => s.dataset.spine)"
            )
            assert spines == [spine]
            leaves = await page.evaluate(
                "[...document.querySelectorAll('[data-leaf]')].map((s) => s.dataset.leaf)"
            )
            assert leaves == [leaf_a, leaf_b]
            # leaf-b draws its clique as a box holding the MIG node, the PCIe box beside it
            in_clique = await page.evaluate(
                f"""[...document.querySelectorAll('[data-clique="{clique}"] article.node')]
                .map((n) => n.dataset.node)"""
            )
            assert in_clique == [mig]
            heading = await page.evaluate(
                f"""document.querySelector('[data-clique="{clique}"] h5').innerText"""
            )
            assert heading.startswith(f"NVLink clique {clique}")

            dgx = await _card(page, h100)
            assert ["link-nvswitch", "NV18"] in dgx["links"]
            assert "NVSwitch" in dgx["text"]
            assert "hardware from Node annotation" in dgx["text"]
            assert dgx["numa"] == ["0", "1"]
            box = await _card(page, pcie)
            assert {"link-pix", "link-sys"} <= {cls for cls, _ in box["links"]}
            assert not any(cls.startswith("link-nv") for cls, _ in box["links"])
            # the colours are the legend's: a NVSwitch cell looks like the legend's swatch
            colours = await page.evaluate(
                """[document.querySelector('td.link-nvswitch'),
                    document.querySelector('.legend .swatch.link-nvswitch'),
                    document.querySelector('td.link-sys')]
                   .map((e) => getComputedStyle(e).backgroundColor)"""
            )
            assert colours[0] == colours[1] != colours[2]

            trainer_card = await _card(page, trainer_node)
            assert trainer_card["holders"].count(f"{namespace}/trainer") == 8
            pair_holders = [
                h
                for n in (h100, pcie)
                for h in (await _card(page, n))["holders"]
                if h.startswith(f"{namespace}/pair-")
            ]
            assert len(pair_holders) == 4  # 2 members × 2 GPUs

            slices = dict((await _card(page, mig))["migs"])  # profile → holder, or its text
            assert slices["1g.5gb"] == f"{namespace}/server"
            assert slices["3g.20gb"] == "3g.20gb free"

            shared_card = await _card(page, shared_node)
            # pair's 4 GPUs and the shared one are not free, though the halves ask no nvidia.com/gpu
            assert "3 of 8 GPUs free · 1 shared" in shared_card["text"]
            (shared,) = shared_card["shared"]
            assert sorted(shared["holders"]) == [
                [f"{namespace}/half-a", "0.5"],
                [f"{namespace}/half-b", "0.5"],
            ]
            assert shared["free"] == "0"
            assert "shared by 2" in shared["text"]
            assert "full" in shared["text"]
            assert len(shared["bar"]) == 2  # two halves, nothing free
            assert abs(shared["bar"][0] - shared["bar"][1]) <= 1
            assert shared["bar"][0] >= 20
            huge_row = f"[data-pending={json.dumps(f'{namespace}/half-huge')}]"
            huge_text = await page.evaluate(f"document.querySelector('{huge_row}').innerText")
            assert "0.5 of one GPU · 1.0 TiB" in huge_text
            assert "no GPU" not in huge_text.split("\t")[1]

            row = f"[data-pending={json.dumps(f'{namespace}/too-big')}]"
            pending_text = await page.evaluate(f"document.querySelector('{row}').innerText")
            assert reason in pending_text
            assert "16 GPUs" in pending_text
            gang_text = await page.evaluate("document.querySelector('[data-gang]').innerText")
            assert f"{namespace}/pair" in gang_text
            assert "2 bound of 2" in gang_text

            await page.click(f"{row} button")
            explained = await page.wait_for(
                "document.querySelector('.explain-row table')?.innerText",
                what="the per-node explanation",
            )
            assert all(node in explained for node in (h100, pcie, mig))
            assert "Insufficient nvidia.com/gpu" in explained

            shot = await page.screenshot(tmp_path / "topology.png")
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

            await kube.delete(PODS, "too-big", namespace=namespace)
            await page.wait_for(
                f"!document.querySelector('{row}')",
                what="the deleted pod gone on the next refresh",
                timeout_s=20,
            )
            # one half goes: the other half stays, and half the GPU is free again
            await kube.delete(PODS, "half-b", namespace=namespace, grace_period_seconds=0)
            card = f"article.node[data-node={json.dumps(shared_node)}]"
            left = await page.wait_for(
                f"document.querySelector('{card} .shared')?.dataset.free === '0.5'"
                f" && document.querySelector('{card} .shared').innerText",
                what="the shared GPU half free",
                timeout_s=20,
            )
            assert "0.5 free" in left
            assert "half-a 0.5" in left
            assert "half-b" not in left
            await page.screenshot(tmp_path / "topology-half-free.png")
            # the failed requests: the first, with no token, and the one with the bad token
            unauthorized = "the server responded with a status of 401 (Unauthorized)"
            assert page.errors == 2 * [
                f"network: Failed to load resource: {unauthorized} {url}/v1/inventory"
            ]
