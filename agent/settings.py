"""What the agent is told to do: ``AgentSettings``, and the flags of ``topos agent`` /
``topos-agent`` that build them (docs/design.md §8)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Final

from agent.health_monitor import HealthThresholds, ThresholdError
from agent.podresources import DEFAULT_SOCKET
from common.hostport import parse_host_port
from common.labeling import COMPAT_SETS, LabelingSettings

SERVICE_ACCOUNT_TOKEN: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"
DEFAULT_LISTEN: Final = "0.0.0.0:9400"


class AgentError(Exception):
    """A problem the user must fix (bad flag, missing node name, Node absent); one line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    node_name: str
    """The Node to publish to (``--node``, else ``$NODE_NAME`` from the downward API)."""
    profile: str | None = None
    """A hardware profile name or file: run on the fake NVML instead of the real one."""
    kubeconfig: str | None = None
    """Kubeconfig file; default ``$KUBECONFIG``, then the pod's in-cluster identity."""
    coordinator: str | None = None
    """Coordinator base URL (``http://topos-coordinator:8080``); no stream when ``None``."""
    once: bool = False
    """Discover, publish once, exit."""
    dry_run: bool = False
    """Print the labels and annotations instead of publishing (implies ``once``)."""
    interval_s: float = 60.0
    """Seconds between discovery cycles (an NVML event triggers one at once)."""
    listen: str | None = DEFAULT_LISTEN
    """``HOST:PORT`` for /healthz, /readyz, /metrics; ``None`` serves nothing."""
    labeling: LabelingSettings = field(default_factory=LabelingSettings)
    """Which label sets to write."""
    podresources_socket: str | None = DEFAULT_SOCKET
    """The kubelet's PodResources socket; ``None`` to not report allocations."""
    token_file: str | None = SERVICE_ACCOUNT_TOKEN
    """Bearer token for the coordinator stream (the pod's ServiceAccount token)."""
    coordinator_ca: str | None = None
    """CA bundle to verify the coordinator's certificate (system CAs when absent)."""
    model_cache_dir: str | None = None
    """A Hugging Face hub cache on the host (mounted into the agent) whose models are published
    as ``topos.io/models``; ``None``: no model annotation."""
    health_thresholds: HealthThresholds = field(default_factory=HealthThresholds)
    """When NVML's health readings make a GPU or link degraded/unhealthy (docs/health.md)."""
    sysfs_root: str = "/"
    """Where the host's sysfs is (real NVML only; tests point it at a fake tree)."""


def load_thresholds(path: str) -> HealthThresholds:
    """``--health-thresholds FILE``: a YAML mapping of ``HealthThresholds`` fields."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise AgentError(f"--health-thresholds {path}: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AgentError(f"--health-thresholds {path}: must be a mapping of thresholds")
    try:
        return HealthThresholds.from_mapping(data, origin=path)
    except ThresholdError as exc:
        raise AgentError(f"--health-thresholds {exc}") from None


def stream_url(base: str) -> str:
    """``http://coord:8080`` → ``ws://coord:8080/v1/agents/stream`` (a full ws URL is kept)."""
    base = base.rstrip("/")
    if base.startswith(("ws://", "wss://")):
        return base if base.endswith("/v1/agents/stream") else base + "/v1/agents/stream"
    if base.startswith("https://"):
        return "wss://" + base.removeprefix("https://") + "/v1/agents/stream"
    if base.startswith("http://"):
        return "ws://" + base.removeprefix("http://") + "/v1/agents/stream"
    raise AgentError(f"--coordinator {base!r} must start with http://, https://, ws:// or wss://")


def parse_listen(text: str) -> tuple[str, int]:
    """``--listen``'s ``HOST:PORT``, or an :class:`AgentError` saying so."""
    try:
        return parse_host_port(text)
    except ValueError as exc:
        raise AgentError(f"--listen: {exc}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``topos agent`` and ``topos-agent`` (docs/design.md §8)."""
    parser.add_argument("--node", help="Node name (default: $NODE_NAME, set by the downward API)")
    parser.add_argument("--profile", help="hardware profile name or file: run on the fake NVML")
    parser.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, then in-cluster)")
    parser.add_argument("--coordinator", metavar="URL", help="stream capacity to this coordinator")
    parser.add_argument("--once", action="store_true", help="discover, publish once and exit")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the labels and annotations as JSON instead of publishing (no cluster needed)",
    )
    parser.add_argument(
        "--interval", type=float, default=60.0, metavar="S", help="seconds between discoveries"
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"serve /healthz, /readyz, /metrics here ('' for none; default {DEFAULT_LISTEN})",
    )
    parser.add_argument(
        "--labels-compat",
        default=os.environ.get("TOPOS_LABELS_COMPAT", ",".join(COMPAT_SETS)),
        metavar="SETS",
        help="compatibility label sets to write: any of gfd,neuronetes,kubenexus, or none "
        "(default: all, or $TOPOS_LABELS_COMPAT)",
    )
    parser.add_argument(
        "--mig-strategy",
        default=os.environ.get("TOPOS_MIG_STRATEGY", "mixed"),
        choices=("none", "single", "mixed"),
        help="GFD MIG strategy for the nvidia.com/* labels (default: mixed)",
    )
    parser.add_argument(
        "--pod-resources-socket",
        default=DEFAULT_SOCKET,
        metavar="PATH",
        help="kubelet PodResources socket ('' to not report allocations)",
    )
    parser.add_argument(
        "--token-file",
        default=SERVICE_ACCOUNT_TOKEN,
        metavar="PATH",
        help="bearer token for the coordinator stream (default: the ServiceAccount token)",
    )
    parser.add_argument(
        "--coordinator-ca",
        metavar="FILE",
        help="CA bundle for the coordinator's TLS certificate (ignored if the file is absent)",
    )
    parser.add_argument(
        "--model-cache-dir",
        default=os.environ.get("TOPOS_MODEL_CACHE_DIR", ""),
        metavar="PATH",
        help="Hugging Face hub cache to publish as topos.io/models (default: "
        "$TOPOS_MODEL_CACHE_DIR; '' for none)",
    )
    parser.add_argument(
        "--health-thresholds",
        metavar="FILE",
        default=os.environ.get("TOPOS_HEALTH_THRESHOLDS", ""),
        help="YAML file of GPU/NVLink health thresholds (docs/health.md; default: built in)",
    )
    parser.add_argument(
        "--sysfs-root",
        metavar="DIR",
        default="/",
        help="read the PCI tree, NUMA nodes and NICs under DIR instead of / (real NVML only)",
    )
    parser.add_argument("--log-level", default="info", help="debug, info, warning or error")


def settings_from_args(
    args: argparse.Namespace, environ: dict[str, str] | None = None
) -> AgentSettings:
    env = os.environ if environ is None else environ
    node = args.node or env.get("NODE_NAME", "")
    if not node and not args.dry_run:
        raise AgentError(
            "no node name: set NODE_NAME (the DaemonSet sets it from spec.nodeName) or pass --node"
        )
    if args.interval <= 0:
        raise AgentError(f"--interval must be positive, not {args.interval}")
    try:
        labeling = LabelingSettings.from_compat(
            args.labels_compat, gfd_mig_strategy=args.mig_strategy
        )
    except ValueError as exc:
        raise AgentError(f"--labels-compat: {exc}") from None
    if args.coordinator:
        stream_url(args.coordinator)  # validate early
    if args.listen:
        parse_listen(args.listen)
    return AgentSettings(
        node_name=node or "(dry-run)",
        profile=args.profile,
        kubeconfig=args.kubeconfig,
        coordinator=args.coordinator,
        once=args.once or args.dry_run,
        dry_run=args.dry_run,
        interval_s=args.interval,
        listen=args.listen or None,
        labeling=labeling,
        podresources_socket=args.pod_resources_socket or None,
        token_file=args.token_file or None,
        coordinator_ca=args.coordinator_ca or None,
        model_cache_dir=getattr(args, "model_cache_dir", "") or None,
        health_thresholds=(
            load_thresholds(args.health_thresholds)
            if getattr(args, "health_thresholds", "")
            else HealthThresholds()
        ),
        sysfs_root=getattr(args, "sysfs_root", "/") or "/",
    )
