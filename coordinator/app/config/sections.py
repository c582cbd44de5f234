"""The configuration tree: one typed object per section, decoded once by :mod:`.load`.

Each section is handed to the component that reads it: ``auth`` (:class:`AuthSettings`) and
``tls`` to the security wiring, ``limits`` (:class:`LimitSettings`) to the request limits,
``leaderElection`` (:class:`LeaderElectionSettings`) to the elector, ``scheduler``, ``kube``,
``gangs`` and ``scheduling`` (:class:`SchedulerConfig`, parsed by ``core.framework.config``) to the
scheduler runtime, ``metrics`` (the seed metric sets) to ``/metrics``, ``coordinator`` to the
process itself. Key names are the file's (camelCase); attribute names are Python's. A section's
own checks live in its ``__post_init__``, so a bad value is reported with the section's path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

import msgspec

from common.hostport import parse_host_port
from common.kube import ClientSettings, RateLimit
from common.labels import (
    check_namespace_name,
    is_dns1123_subdomain,
    is_label_key,
    is_label_value,
)
from coordinator.api.keys import (
    DEFAULT_HELLO_TIMEOUT_S,
    DEFAULT_STREAM_IDLE_TIMEOUT_S,
    StreamTimeouts,
)
from coordinator.api.limits import LimitSettings
from coordinator.api.scheduling_metrics import METRIC_SETS
from coordinator.app.auth.settings import AuthSettings
from coordinator.app.config.defragmentation import DefragmentationSection
from coordinator.app.config.health import HealthSection
from coordinator.app.config.protections import ProtectionsSection
from coordinator.app.config.scheduling import load_config as _scheduling_defaults
from coordinator.app.election import LeaderElectionSettings
from coordinator.core.domains.layout import DomainKeys
from coordinator.core.domains.sources import SOURCE_KEYS, keys_from_levels
from coordinator.core.framework.config import SchedulerConfig
from coordinator.engine.gangs.service import GangSettings
from coordinator.inventory.state import NodeState
from coordinator.inventory.store import DEFAULT_STALE_TTL_S, DEFAULT_UNKNOWN_NODE_TTL_S
from coordinator.neuronetes.decide.settings import NeuronetesSettings

__all__ = [
    "Config",
    "CoordinatorSection",
    "GangsSection",
    "KubeSection",
    "MetricsSection",
    "SchedulerSection",
    "TlsSection",
]

Positive = Annotated[float, msgspec.Meta(gt=0)]
MIN_INTERVAL_S = 0.01
"""The shortest period of a timer the configuration sets: below it a loop only burns CPU."""
Name = Annotated[str, msgspec.Meta(min_length=1)]
DEFAULT_AGENT_GRACE_S = 0.0


class CoordinatorSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``coordinator``: the process's listener and the agents' staleness."""

    listen: str = "0.0.0.0:8080"
    """Address of the API and the agent streams (``--listen`` overrides it)."""
    stale_ttl_s: Positive = msgspec.field(default=DEFAULT_STALE_TTL_S, name="staleTtlSeconds")
    """An agent silent this long marks its node stale (no new placements there)."""
    sweep_interval_s: Annotated[float, msgspec.Meta(ge=MIN_INTERVAL_S)] | None = msgspec.field(
        default=None, name="sweepIntervalSeconds"
    )
    """How often to look for stale agents (default: a quarter of the TTL; at least 0.01 s)."""
    unknown_node_ttl_s: Positive = msgspec.field(
        default=DEFAULT_UNKNOWN_NODE_TTL_S, name="unknownNodeTtlSeconds"
    )
    """An agent reporting a node the API server does not have is dropped after this long (its
    stream closed with ``unknown-node``); such a node is never a placement target meanwhile."""
    hello_timeout_s: Positive = msgspec.field(
        default=DEFAULT_HELLO_TIMEOUT_S, name="helloTimeoutSeconds"
    )
    """An agent stream that sends no ``hello`` this long after connecting is closed
    (``timeout``)."""
    stream_idle_timeout_s: Positive = msgspec.field(
        default=DEFAULT_STREAM_IDLE_TIMEOUT_S, name="streamIdleTimeoutSeconds"
    )
    """An agent stream that sends no frame this long after its last one is closed (``timeout``);
    agents send a heartbeat every 5 s."""
    reload_interval_s: Annotated[float, msgspec.Meta(ge=0)] = msgspec.field(
        default=5.0, name="reloadIntervalSeconds"
    )
    """How often the configuration file is read again; a changed ``scheduling`` section is
    applied without a restart (``docs/deploy.md``). 0: never; else at least 0.01 s."""
    event_loop: Literal["uvloop", "asyncio"] = msgspec.field(default="uvloop", name="eventLoop")
    """The process's one event loop: ``uvloop`` (libuv; about a tenth less CPU per bound pod, in
    the HTTP and TLS transports — docs/benchmarks-history.md) or the standard library's."""

    def __post_init__(self) -> None:
        try:
            parse_host_port(self.listen)
        except ValueError as exc:
            raise ValueError(f"listen: {exc}") from None
        if 0 < self.reload_interval_s < MIN_INTERVAL_S:
            raise ValueError(
                f"reloadIntervalSeconds: {self.reload_interval_s!r} would read the file in a busy "
                f"loop (0 for never, or at least {MIN_INTERVAL_S})"
            )

    @property
    def address(self) -> tuple[str, int]:
        return parse_host_port(self.listen)

    @property
    def stream_timeouts(self) -> StreamTimeouts:
        return StreamTimeouts(hello_s=self.hello_timeout_s, idle_s=self.stream_idle_timeout_s)

    @property
    def sweep_every_s(self) -> float:
        return self.sweep_interval_s or max(self.stale_ttl_s / 4, 0.01)


class TlsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``tls``: the serving certificate and key (PEM, mounted from a Secret); none: plain HTTP."""

    cert_file: Name | None = msgspec.field(default=None, name="certFile")
    key_file: Name | None = msgspec.field(default=None, name="keyFile")

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("certFile and keyFile go together")


class SchedulerSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``scheduler``: the scheduling loop inside the coordinator."""

    enabled: bool = True
    """Run the scheduling loop (false: serve the API only, never bind)."""
    namespace: Name | None = None
    """Only pods of this namespace; none: every namespace."""
    node_selector: dict[str, str] = msgspec.field(default_factory=dict, name="nodeSelector")
    """Only onto nodes carrying all these labels."""
    max_binds_in_flight: Annotated[int, msgspec.Meta(ge=1, le=4096)] = msgspec.field(
        default=64, name="maxBindsInFlight"
    )
    """Binds pipelined while the next pod is scheduled."""
    agent_grace_s: Annotated[float, msgspec.Meta(ge=0, le=600)] = msgspec.field(
        default=DEFAULT_AGENT_GRACE_S, name="agentGraceSeconds"
    )
    """After start-up, how long GPU pods wait for the agents of known nodes to reconnect before
    the topology published on each Node (``topos.io/topology``) is used; 0 (the default): at
    once. A GPU node with neither a stream nor a valid annotation takes no GPU pods."""

    def __post_init__(self) -> None:
        if self.namespace is not None:
            check_namespace_name("namespace", self.namespace)
        for key, value in self.node_selector.items():
            if not is_label_key(key):
                raise ValueError(f"nodeSelector: {key!r} is not a label key")
            if not is_label_value(value):
                raise ValueError(f"nodeSelector.{key}: {value!r} is not a label value")

    def node_filter(self) -> Callable[[NodeState], bool] | None:
        if not self.node_selector:
            return None
        wanted = dict(self.node_selector)
        return lambda node: all(node.labels.get(k) == v for k, v in wanted.items())


class KubeSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``kube``: client-side rate limit of the scheduler's API-server clients (kube-scheduler's
    ``clientConnection.qps``/``burst``, and its defaults)."""

    qps: Annotated[float, msgspec.Meta(ge=0)] = 50.0
    """Requests per second; 0: no client-side limit."""
    burst: Annotated[int, msgspec.Meta(ge=1)] = 100
    """Requests at once after a quiet spell."""

    def __post_init__(self) -> None:
        _ = self.rate_limit  # an infinite qps is refused here, with the section's path

    @property
    def rate_limit(self) -> RateLimit | None:
        return RateLimit(qps=self.qps, burst=self.burst) if self.qps else None

    def client_settings(self) -> ClientSettings:
        return ClientSettings(rate_limit=self.rate_limit)


TreeSourceName = Literal["labels", "volcano", "kueue", "kai"]


class TreeSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``gangs.tree``: where the domain tree comes from (docs/topology.md)."""

    source: TreeSourceName = "labels"
    """``labels``: the Node labels ``domainKeys`` (or ``topologyLevels``) name; ``volcano``: the
    cluster's HyperNodes; ``kueue`` / ``kai``: the levels of the ``Topology`` named ``topology``,
    followed live."""
    topology: str = ""
    """The ``Topology`` object's name (``kueue``, ``kai``)."""

    def __post_init__(self) -> None:
        named = self.source in ("kueue", "kai")
        if named and not is_dns1123_subdomain(self.topology):
            raise ValueError(
                f"topology: {self.topology!r} is not an object name (source {self.source} "
                "follows the Topology it names)"
            )
        if not named and self.topology:
            raise ValueError(
                f"topology: {self.topology!r} is set but source {self.source!r} reads no "
                "Topology (kueue or kai does)"
            )


class GangsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``gangs``: gang timeouts, preemption, recovery and the network tiers' node labels."""

    default_timeout_s: Positive = msgspec.field(default=300.0, name="defaultTimeoutSeconds")
    """A gang not bound by then releases what it holds."""
    backoff_s: Positive = msgspec.field(default=10.0, name="backoffSeconds")
    """…and sits out this long before its next attempt."""
    preemption: bool = True
    """Evict lower-priority pods and gangs for a pod or gang that does not fit."""
    recovery: bool = True
    """Move gangs and pods off failed GPUs and nodes."""
    domain_keys: DomainKeys = msgspec.field(default_factory=DomainKeys, name="domainKeys")
    """Node labels naming the ``clique`` (NVLink, ``""``: none), ``leaf``, ``spine`` and ``zone``
    tiers."""
    topology_levels: tuple[str, ...] = msgspec.field(default=(), name="topologyLevels")
    """Instead of ``domainKeys``: the levels of a Kueue or KAI ``Topology`` as written there
    (``spec.levels[].nodeLabel``, broadest first; docs/topology.md)."""
    tree: TreeSection = msgspec.field(default_factory=TreeSection)
    """Instead of both: a source watched live — Volcano HyperNodes, a Kueue or KAI Topology."""
    protections: ProtectionsSection = msgspec.field(default_factory=ProtectionsSection)
    """Minimum runtime, preemption delay, eviction budget (docs/preemption-protections.md)."""

    def __post_init__(self) -> None:
        keys = self.domain_keys
        if self.tree.source != "labels" and (self.topology_levels or keys != DomainKeys()):
            raise ValueError(
                f"tree.source {self.tree.source!r} names the tree: leave domainKeys and "
                "topologyLevels out"
            )
        for tier in ("clique", "leaf", "spine", "zone"):
            key = getattr(keys, tier)
            if tier == "clique" and key == "":
                continue
            if not is_label_key(key):
                raise ValueError(f"domainKeys.{tier}: {key!r} is not a label key")
        if not self.topology_levels:
            return
        if keys != DomainKeys():
            raise ValueError("domainKeys and topologyLevels both name the tree: keep one")
        for i, level in enumerate(self.topology_levels):
            if not is_label_key(level):
                raise ValueError(f"topologyLevels[{i}]: {level!r} is not a label key")
        _ = self.keys  # a list that is no tree is refused here, with the section's path

    @property
    def keys(self) -> DomainKeys:
        """The tree's labels: a watched source's (:data:`SOURCE_KEYS`), ``topologyLevels`` read
        as a tree when set, else ``domainKeys``."""
        if self.tree.source != "labels":
            return SOURCE_KEYS
        if not self.topology_levels:
            return self.domain_keys
        try:
            return keys_from_levels(self.topology_levels)
        except ValueError as bad:
            raise ValueError(f"topologyLevels: {bad}") from None

    def settings(self) -> GangSettings:
        return GangSettings(
            default_timeout_s=self.default_timeout_s,
            backoff_s=self.backoff_s,
            preemption=self.preemption,
            recovery=self.recovery,
            keys=self.keys,
            protections=self.protections.protections(),
        )


class MetricsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``metrics``: which seed systems' metric names ``/metrics`` exports beside ``topos_*``
    (``docs/metrics.md``)."""

    compat: tuple[str, ...] = METRIC_SETS
    """Any of ``neuronetes`` (seed 000) and ``topology-scheduler`` (seeds 003/004); ``[]``:
    only the ``topos_*`` names."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.compat) - set(METRIC_SETS))
        if unknown:
            raise ValueError(
                f"compat: unknown metric set(s) {', '.join(unknown)}; "
                f"expected some of {', '.join(METRIC_SETS)}"
            )


class Config(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The whole file. A section left out (or left empty) is its defaults."""

    coordinator: CoordinatorSection = msgspec.field(default_factory=CoordinatorSection)
    tls: TlsSection = msgspec.field(default_factory=TlsSection)
    auth: AuthSettings | None = None
    """None: no section — authentication on against an API server, off with ``--in-memory``."""
    limits: LimitSettings = msgspec.field(default_factory=LimitSettings)
    leader_election: LeaderElectionSettings | None = msgspec.field(
        default=None, name="leaderElection"
    )
    """None: no section — elected on the default Lease against an API server when the scheduler
    runs (two coordinators never both bind); no election with ``--in-memory``, where nothing else
    can share the cluster."""
    scheduler: SchedulerSection = msgspec.field(default_factory=SchedulerSection)
    kube: KubeSection = msgspec.field(default_factory=KubeSection)
    gangs: GangsSection = msgspec.field(default_factory=GangsSection)
    defragmentation: DefragmentationSection = msgspec.field(default_factory=DefragmentationSection)
    """Moving movable pods so that a waiting workload fits (``docs/defragmentation.md``)."""
    scheduling: SchedulerConfig = msgspec.field(default_factory=lambda: _scheduling_defaults(None))
    """Scoring weights and plugins, the profiles (``docs/scheduling.md``)."""
    metrics: MetricsSection = msgspec.field(default_factory=MetricsSection)
    health: HealthSection = msgspec.field(default_factory=HealthSection)
    """Unhealthy GPUs published as DRA device taints (``docs/health.md``)."""
    neuronetes: NeuronetesSettings = msgspec.field(default_factory=NeuronetesSettings)
    """The AgentPool / ToolBinding controller (``docs/neuronetes.md``)."""
