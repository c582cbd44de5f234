"""The test control plane's etcd, through its HTTP gateway (no etcdctl needed)."""

from __future__ import annotations

import json
import urllib.request

from devcluster.controlplane import ControlPlane


def compact(plane: ControlPlane) -> None:
    """Compact etcd up to its current revision: older resourceVersions are gone (410).

    Only an API server without a watch cache shows it (``--watch-cache=false``); the cache
    otherwise answers lists and watches from memory."""
    base = f"http://127.0.0.1:{plane.state.etcd_port}/v3/kv"
    probe = urllib.request.Request(f"{base}/range", data=b'{"key":"AA=="}', method="POST")
    with urllib.request.urlopen(probe, timeout=30) as reply:
        revision = json.load(reply)["header"]["revision"]
    body = json.dumps({"revision": revision, "physical": True}).encode()
    request = urllib.request.Request(f"{base}/compaction", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=30):
        pass
