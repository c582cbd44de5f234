"""``topos demo --serve`` as a newcomer uses it: the printed topology-view address opens in a real
browser (headless Chromium) and shows the demo's 32 nodes — NVSwitch, NVLink and PCIe machines,
MIG-split A100s — the pod that does not fit with the scheduler's reason, and the demo's gangs,
with no error in the page. Authentication is off here (the demo), so no token is asked for. A
screenshot is saved as ``demo.png`` in the test's temp folder."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from devcluster.subprocess_env import subprocess_env
from tests.ui.browser import chromium_or_skip, launch

ROOT = Path(__file__).resolve().parents[2]
VIEW_LINE = "  Topology view: "


async def _view_address(proc: asyncio.subprocess.Process) -> str:
    """The address ``--serve`` prints, read from the demo's output."""
    assert proc.stdout is not None
    printed: list[str] = []
    async with asyncio.timeout(90):
        while line := (await proc.stdout.readline()).decode():
            printed.append(line)
            if line.startswith(VIEW_LINE):
                return line.removeprefix(VIEW_LINE).split()[0]
    raise AssertionError("no topology view address printed:\n" + "".join(printed[-20:]))


async def test_demo_serve_prints_the_view_which_shows_the_demo_cluster(tmp_path: Path) -> None:
    chromium_or_skip()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "cli.main", "demo", "--serve"),
        cwd=ROOT,
        env=subprocess_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        url = await _view_address(proc)
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/ui/")
        async with launch(tmp_path / "chromium") as page:
            await page.goto(url)
            await page.wait_for(
                "document.querySelectorAll('article.node').length === 32", what="32 nodes"
            )
            await page.wait_for(
                "document.querySelectorAll('[data-gang]').length > 0", what="the gangs"
            )
            assert await page.evaluate("document.getElementById('token-form').hidden")
            classes = await page.evaluate(
                "[...new Set([...document.querySelectorAll('td.link')].map((c) => c.className))]"
            )
            assert {"link link-nvswitch", "link link-pix", "link link-sys"} <= set(classes)
            held_slices = await page.evaluate(
                "[...document.querySelectorAll('.mig.held [data-holder]')]"
                ".map((h) => h.dataset.holder)"
            )
            assert "demo/serve-1g-0" in held_slices
            assert (
                await page.evaluate(
                    "document.querySelectorAll('[data-holder=\"demo/llm-pretrain-2-0\"]').length"
                )
                == 8
            )
            pending = await page.evaluate(
                "document.querySelector('[data-pending=\"demo/oversized\"]').innerText"
            )
            assert "0/32 nodes are available: 32 Insufficient nvidia.com/gpu." in pending
            phases = await page.evaluate(
                "[...document.querySelectorAll('[data-gang] .badge')].map((b) => b.innerText)"
            )
            assert len(phases) == 4
            assert set(phases) == {"Bound"}
            await page.screenshot(tmp_path / "demo.png")
            assert page.errors == []
    finally:
        proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(30):
            rc = await proc.wait()
    assert rc in (0, 130)
