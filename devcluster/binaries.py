"""Kubernetes binaries for the local control plane: find them, or build them from Go modules.

``python -m devcluster.binaries ensure [--all]`` makes ``etcd``, ``kube-apiserver``,
``kube-controller-manager`` and ``kubectl`` available (``--all`` adds ``kube-scheduler``, ``kwok``
and KWOK's stage definitions) and prints the directory holding them. The playground
(``topos devcluster up --nodes``) asks for ``kwok`` alone on top of the core
(``ensure(kwok=True)``): it brings its own stages and runs no kube-scheduler.

Where binaries come from, first match wins:

1. ``$TOPOS_K8S_BIN``: a directory with the binaries (nothing is built; missing ones are an error,
   except ``kube-controller-manager``: without it the control plane runs no controllers).
2. ``$KUBEBUILDER_ASSETS``: controller-runtime envtest's asset directory (which has no
   controller-manager), same rule.
3. The cache ``~/.cache/topos/k8s/v<KUBERNETES_VERSION>/`` (``$XDG_CACHE_HOME`` honoured, or
   ``$TOPOS_CACHE_DIR`` for the ``topos`` part), filled on first use by building from the Go module
   proxy: Kubernetes through a generated wrapper module that pins its staging modules, etcd
   through a one-line wrapper around ``etcdmain.Main``, KWOK with ``go install``.

Builds are lean (``CGO_ENABLED=0 -trimpath -ldflags '-s -w'``, only the commands asked for),
serialised by a file lock in the cache so parallel runs wait instead of colliding, and atomic
(a binary appears under its final name only when complete), so a second ``ensure`` is instant.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "1.36.3"
ETCD_VERSION = "3.6.16"
KWOK_VERSION = "0.8.0"

CORE_BINARIES: tuple[str, ...] = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
#: Core binaries an override directory may lack (envtest's assets have no controller-manager).
_OPTIONAL_IN_OVERRIDE = frozenset({"kube-controller-manager"})
EXTRA_BINARIES: tuple[str, ...] = ("kube-scheduler", "kwok")
KWOK_STAGES_DIR = "kwok-stages"

_KUBE_COMMANDS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
}
_STAGING_LINE = re.compile(r"^\s*(k8s\.io/[A-Za-z0-9._/-]+)\s*=>\s*\./staging/", re.MULTILINE)
_ETCD_LOCAL_REPLACE = re.compile(
    r"^\s*(go\.etcd\.io/etcd/[A-Za-z0-9._/-]+)\s*=>\s*\.\./", re.MULTILINE
)
_GODEBUG_LINE = re.compile(r"^godebug\b.*$", re.MULTILINE)
_GO_LINE = re.compile(r"^go\s+(\S+)\s*$", re.MULTILINE)


class BinariesUnavailable(Exception):
    """The binaries are neither present nor buildable here; the message says why."""


@dataclass(frozen=True, slots=True)
class Binaries:
    """Where each binary lives. Extra ones are ``None`` unless asked for."""

    directory: Path
    source: str  # "TOPOS_K8S_BIN", "KUBEBUILDER_ASSETS" or "cache"
    etcd: Path
    kube_apiserver: Path
    kubectl: Path
    kube_controller_manager: Path | None = None
    """``None`` only from an override directory without one: then no controllers run."""
    kube_scheduler: Path | None = None
    kwok: Path | None = None
    kwok_stages: Path | None = None


def cache_root() -> Path:
    """``~/.cache/topos/k8s`` (or under ``$TOPOS_CACHE_DIR`` / ``$XDG_CACHE_HOME``)."""
    topos = os.environ.get("TOPOS_CACHE_DIR")
    if topos:
        return Path(topos) / "k8s"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "topos" / "k8s"


def cache_dir() -> Path:
    return cache_root() / f"v{KUBERNETES_VERSION}"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _wanted(*, extra: bool, kwok: bool) -> tuple[str, ...]:
    if extra:
        return CORE_BINARIES + EXTRA_BINARIES
    return CORE_BINARIES + (("kwok",) if kwok else ())


def _from_directory(directory: Path, source: str, *, extra: bool, kwok: bool = False) -> Binaries:
    wanted = _wanted(extra=extra, kwok=kwok)
    found: dict[str, Path] = {}
    for name in wanted:
        path = directory / name
        if not _executable(path) and name == "kubectl":
            on_path = shutil.which("kubectl")
            path = Path(on_path) if on_path else path
        if not _executable(path):
            if source != "cache" and name in _OPTIONAL_IN_OVERRIDE:
                continue
            raise BinariesUnavailable(f"${source} is set but {path} is missing or not executable")
        found[name] = path
    stages: Path | None = None
    if extra:
        stages = directory / KWOK_STAGES_DIR
        if not stages.is_dir():
            raise BinariesUnavailable(f"${source} is set but {stages} (KWOK stages) is missing")
    return Binaries(
        directory=directory,
        source=source,
        etcd=found["etcd"],
        kube_apiserver=found["kube-apiserver"],
        kubectl=found["kubectl"],
        kube_controller_manager=found.get("kube-controller-manager"),
        kube_scheduler=found.get("kube-scheduler"),
        kwok=found.get("kwok"),
        kwok_stages=stages,
    )


def _override() -> tuple[Path, str] | None:
    for variable in ("TOPOS_K8S_BIN", "KUBEBUILDER_ASSETS"):
        value = os.environ.get(variable)
        if value:
            return Path(value).expanduser(), variable
    return None


def find(*, extra: bool = False, kwok: bool = False) -> Binaries | None:
    """The binaries if already present (override or cache); never builds."""
    override = _override()
    try:
        if override is not None:
            return _from_directory(override[0], override[1], extra=extra, kwok=kwok)
        return _from_directory(cache_dir(), "cache", extra=extra, kwok=kwok)
    except BinariesUnavailable:
        if override is not None:
            raise
        return None


def ensure(*, extra: bool = False, kwok: bool = False, log: bool = True) -> Binaries:
    """Return the binaries, building the missing ones into the cache first: the core ones, with
    ``kwok`` the ``kwok`` binary too, with ``extra`` also kube-scheduler and KWOK's stock stages.

    Raises ``BinariesUnavailable`` when an override points at an incomplete directory, or when a
    build is needed and Go is missing or the build fails.
    """
    found = find(extra=extra, kwok=kwok)
    if found is not None:
        return found
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    with _locked(target / ".lock"):
        _build_missing(target, wanted=_wanted(extra=extra, kwok=kwok), stages=extra, log=log)
    return _from_directory(target, "cache", extra=extra, kwok=kwok)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _say(log: bool, message: str) -> None:
    if log:
        print(f"k8s-binaries: {message}", file=sys.stderr, flush=True)


def _go() -> str:
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if _executable(Path("/usr/local/go/bin/go")) else None
    )
    if go is None:
        raise BinariesUnavailable(
            "no Kubernetes binaries and no Go toolchain to build them: install Go 1.26+ or set "
            "TOPOS_K8S_BIN / KUBEBUILDER_ASSETS to a directory with etcd, kube-apiserver, kubectl"
        )
    return go


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = "-mod=mod"
    env.setdefault("GOWORK", "off")
    return env


def _run_go(go: str, args: Sequence[str], *, cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        [go, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-15:]
        raise BinariesUnavailable(f"`go {' '.join(args[:2])}` failed:\n" + "\n".join(tail))
    return result.stdout


def _module_download(go: str, module: str, *, cwd: Path, env: dict[str, str]) -> dict[str, str]:
    info: dict[str, str] = json.loads(
        _run_go(go, ["mod", "download", "-json", module], cwd=cwd, env=env)
    )
    if info.get("Error"):
        raise BinariesUnavailable(f"cannot download {module}: {info['Error']}")
    return info


def _build_missing(target: Path, *, wanted: Sequence[str], stages: bool, log: bool) -> None:
    missing = [name for name in wanted if not _executable(target / name)]
    need_stages = stages and not (target / KWOK_STAGES_DIR).is_dir()
    if not missing and not need_stages:
        return
    go = _go()
    env = _go_env()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="build-", dir=target) as scratch:
        work = Path(scratch)
        kube = [name for name in missing if name in _KUBE_COMMANDS]
        if "etcd" in missing:
            _say(log, f"building etcd v{ETCD_VERSION} (Go module go.etcd.io/etcd/server/v3)")
            _build_etcd(go, env, work / "etcd", target)
        if kube:
            _say(
                log,
                f"building {', '.join(kube)} v{KUBERNETES_VERSION} (Go module k8s.io/kubernetes)",
            )
            _build_kubernetes(go, env, work / "kubernetes", target, kube)
        if "kwok" in missing or need_stages:
            _say(log, f"building kwok v{KWOK_VERSION}")
            _build_kwok(go, env, work / "kwok", target, binary="kwok" in missing)
    _say(
        log,
        f"built {', '.join(missing) or 'kwok stages'} in {time.monotonic() - started:.0f}s",
    )


def _install(built: Path, target: Path) -> None:
    """Move a finished binary into place atomically (same file system: rename)."""
    final = target / built.name
    staged = target / f".{built.name}.new"
    shutil.move(str(built), staged)
    staged.chmod(0o755)
    staged.replace(final)


def _build_etcd(go: str, env: dict[str, str], work: Path, target: Path) -> None:
    work.mkdir(parents=True)
    module = f"go.etcd.io/etcd/server/v3@v{ETCD_VERSION}"
    info = _module_download(go, module, cwd=work, env=env)
    upstream = Path(info["GoMod"]).read_text()
    # etcd's go.mod replaces its sibling modules with ../ paths; pin them to the same release.
    replaces = [
        f"\t{name} => {name} v{ETCD_VERSION}" for name in _ETCD_LOCAL_REPLACE.findall(upstream)
    ]
    (work / "go.mod").write_text(
        "module topos.local/etcd\n\n"
        f"go {_go_directive(upstream)}\n\n"
        f"require go.etcd.io/etcd/server/v3 v{ETCD_VERSION}\n\n"
        + ("replace (\n" + "\n".join(replaces) + "\n)\n" if replaces else "")
    )
    (work / "main.go").write_text(
        "// Command etcd: the etcd server, built from its Go module.\n"
        "package main\n\n"
        'import (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\n'
        "func main() { etcdmain.Main(os.Args) }\n"
    )
    _run_go(go, ["mod", "tidy"], cwd=work, env=env)
    out = work / "out"
    _run_go(
        go,
        ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "etcd"), "."],
        cwd=work,
        env=env,
    )
    _install(out / "etcd", target)


def _go_directive(go_mod: str) -> str:
    match = _GO_LINE.search(go_mod)
    return match.group(1) if match else "1.26.0"


def kubernetes_wrapper_go_mod(upstream_go_mod: str, version: str, commands: Sequence[str]) -> str:
    """The go.mod of a module that builds ``commands`` of k8s.io/kubernetes ``version``.

    k8s.io/kubernetes refers to its staging modules (k8s.io/api, k8s.io/client-go, …) as
    ``v0.0.0`` replaced by ``./staging/…``; replace directives of dependencies are ignored, so
    the wrapper pins each staging module to its published ``v0.X.Y`` release instead.
    """
    staging = _STAGING_LINE.findall(upstream_go_mod)
    if not staging:
        raise BinariesUnavailable("k8s.io/kubernetes go.mod lists no ./staging/ replacements")
    staging_version = "v0." + version.split(".", 1)[1]
    godebug = _GODEBUG_LINE.search(upstream_go_mod)
    lines = [
        "module topos.local/kubernetes",
        "",
        f"go {_go_directive(upstream_go_mod)}",
        "",
    ]
    if godebug:
        lines += [godebug.group(0), ""]
    lines += [f"require k8s.io/kubernetes v{version}", "", "replace ("]
    lines += [f"\t{name} => {name} {staging_version}" for name in staging]
    lines += [")", "", "tool ("]
    lines += [f"\t{_KUBE_COMMANDS[name]}" for name in commands]
    lines += [")", ""]
    return "\n".join(lines)


def _kube_ldflags(version: str) -> str:
    major, minor = version.split(".")[:2]
    values = {
        "gitVersion": f"v{version}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def _build_kubernetes(
    go: str, env: dict[str, str], work: Path, target: Path, commands: Sequence[str]
) -> None:
    work.mkdir(parents=True)
    info = _module_download(go, f"k8s.io/kubernetes@v{KUBERNETES_VERSION}", cwd=work, env=env)
    upstream = Path(info["GoMod"]).read_text()
    (work / "go.mod").write_text(kubernetes_wrapper_go_mod(upstream, KUBERNETES_VERSION, commands))
    _run_go(go, ["mod", "tidy"], cwd=work, env=env)
    out = work / "out"
    out.mkdir()
    packages = [_KUBE_COMMANDS[name] for name in commands]
    _run_go(
        go,
        [
            "build",
            "-trimpath",
            "-ldflags",
            _kube_ldflags(KUBERNETES_VERSION),
            "-o",
            f"{out}/",
            *packages,
        ],
        cwd=work,
        env=env,
    )
    for name in commands:
        _install(out / name, target)


def _build_kwok(go: str, env: dict[str, str], work: Path, target: Path, *, binary: bool) -> None:
    work.mkdir(parents=True)
    module = f"sigs.k8s.io/kwok@v{KWOK_VERSION}"
    if binary:
        install_env = dict(env, GOBIN=str(work / "bin"))
        install_env.pop("GOFLAGS", None)
        _run_go(
            go,
            [
                "install",
                "-trimpath",
                "-ldflags",
                "-s -w",
                f"sigs.k8s.io/kwok/cmd/kwok@v{KWOK_VERSION}",
            ],
            cwd=work,
            env=install_env,
        )
        _install(work / "bin" / "kwok", target)
    # KWOK refuses to start without stage definitions; they ship in its module, not its binary.
    source = Path(_module_download(go, module, cwd=work, env=env)["Dir"]) / "kustomize" / "stage"
    staged = work / KWOK_STAGES_DIR
    for path in sorted(source.rglob("*.yaml")):
        relative = path.relative_to(source)
        if "testdata" in relative.parts:
            continue
        data = path.read_bytes()
        if not re.search(rb"^kind:\s*Stage\s*$", data, re.MULTILINE):
            continue  # kustomizations, RBAC for KWOK's own pod: not stage definitions
        destination = staged / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
    final = target / KWOK_STAGES_DIR
    if final.exists():
        shutil.rmtree(final)
    staged.replace(final)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devcluster.binaries", description="Find or build the Kubernetes binaries."
    )
    sub = parser.add_subparsers(dest="action", required=True)
    ensure_parser = sub.add_parser("ensure", help="find or build; print the directory")
    ensure_parser.add_argument(
        "--all", action="store_true", help="also kube-scheduler, kwok and KWOK's stage definitions"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        binaries = ensure(extra=args.all)
    except BinariesUnavailable as exc:
        print(f"k8s-binaries: unavailable: {exc}", file=sys.stderr)
        return 1
    _say(True, f"ready in {time.monotonic() - started:.1f}s ({binaries.source})")
    print(binaries.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
