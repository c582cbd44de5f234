"""``helm`` for the chart's tests (``deploy/helm/topos``): find it, or build it from its Go module.

``python -m devcluster.helm ensure`` makes ``helm`` available and prints its path. First match wins:

1. ``$TOPOS_HELM``: a helm binary (nothing is built; a missing file is an error).
2. The cache ``~/.cache/topos/helm/v<HELM_VERSION>/helm`` (next to the Kubernetes binaries'
   cache, :func:`devcluster.binaries.cache_root`), filled on first use by ``go install
   helm.sh/helm/v3/cmd/helm@v<HELM_VERSION>`` from the Go module proxy — about two minutes on a
   clean two-core machine, most of it downloading modules.

As for the Kubernetes binaries: a lean build (``CGO_ENABLED=0 -trimpath -ldflags '-s -w'``, the
version stamped in), serialised by a file lock in the cache, and atomic, so a second ``ensure``
is instant. Nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from devcluster.binaries import (
    BinariesUnavailable,
    _executable,
    _go,
    _go_env,
    _install,
    _locked,
    _run_go,
    cache_root,
)

HELM_VERSION = "3.22.0"
HELM_MODULE = "helm.sh/helm/v3"


def cache_dir() -> Path:
    return cache_root().parent / "helm" / f"v{HELM_VERSION}"


def find() -> Path | None:
    """The helm binary if present (``$TOPOS_HELM`` or the cache); never builds."""
    override = os.environ.get("TOPOS_HELM")
    if override:
        path = Path(override).expanduser()
        if not _executable(path):
            raise BinariesUnavailable(f"$TOPOS_HELM is set but {path} is not an executable")
        return path
    cached = cache_dir() / "helm"
    return cached if _executable(cached) else None


def ensure(*, log: bool = True) -> Path:
    """The helm binary, built into the cache first if missing. Raises ``BinariesUnavailable``
    when Go is missing or the build fails."""
    found = find()
    if found is not None:
        return found
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    with _locked(target / ".lock"):
        if not _executable(target / "helm"):  # another process may have built it meanwhile
            _build(target, log=log)
    return target / "helm"


def _say(log: bool, message: str) -> None:
    if log:
        print(f"helm: {message}", file=sys.stderr, flush=True)


def _build(target: Path, *, log: bool) -> None:
    go = _go()
    env = _go_env()
    env.pop("GOFLAGS", None)  # `go install pkg@version` builds outside any module
    started = time.monotonic()
    _say(log, f"building helm v{HELM_VERSION} (Go module {HELM_MODULE})")
    with tempfile.TemporaryDirectory(prefix="build-", dir=target) as scratch:
        work = Path(scratch)
        ldflags = f"-s -w -X {HELM_MODULE}/internal/version.version=v{HELM_VERSION}"
        _run_go(
            go,
            [
                "install",
                "-trimpath",
                "-ldflags",
                ldflags,
                f"{HELM_MODULE}/cmd/helm@v{HELM_VERSION}",
            ],
            cwd=work,
            env=dict(env, GOBIN=str(work / "bin")),
        )
        _install(work / "bin" / "helm", target)
    _say(log, f"built helm in {time.monotonic() - started:.0f}s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devcluster.helm", description="Find or build helm."
    )
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("ensure", help="find or build; print the binary's path")
    parser.parse_args(argv)
    try:
        path = ensure()
    except BinariesUnavailable as exc:
        print(f"helm: unavailable: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
