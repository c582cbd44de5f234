"""Running ``kubectl topos`` as a user does (the real ``kubectl`` finding the ``kubectl-topos``
executable of this venv on PATH), and the scheduling metrics a read-only command must leave as
they were."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from aiohttp import ClientSession

from devcluster.binaries import Binaries
from devcluster.subprocess_env import subprocess_env

#: The plugin executable ``pip install -e '.[dev]'`` puts next to this Python.
PLUGIN = Path(sys.executable).parent / "kubectl-topos"


async def kubectl_topos(binaries: Binaries, kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    """``kubectl topos …`` with the real kubectl, which finds kubectl-topos on PATH."""
    env = subprocess_env(
        KUBECONFIG=str(kubeconfig),
        PATH=f"{PLUGIN.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    proc = await asyncio.create_subprocess_exec(
        str(binaries.kubectl),
        "topos",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def scheduling_metrics(url: str) -> list[str]:
    """The coordinator's scheduling, pending and preemption metric lines (``GET /metrics``)."""
    async with ClientSession() as http, http.get(f"{url}/metrics") as resp:
        text = await resp.text()
    return [
        line
        for line in text.splitlines()
        if line.startswith(("topos_scheduling", "topos_pending", "topos_preempt"))
    ]
