"""What the coordinator loads before it serves an API server: not the CEL interpreter (cel-python
with its parser and date library, loaded once a DRA selector is compiled) nor the in-memory
cluster (``--in-memory`` only) — each costs start-up time at every restart."""

from __future__ import annotations

import subprocess
import sys

from devcluster.subprocess_env import subprocess_env

_LAZY = ("celpy", "lark", "pendulum", "coordinator.core.dra.cel", "coordinator.adapters.memory")


def test_the_api_server_entry_point_leaves_the_cel_interpreter_unloaded() -> None:
    probe = (
        "import sys, coordinator.app.main\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {_LAZY!r} or m in {_LAZY!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert out.stdout.strip() == "[]"
