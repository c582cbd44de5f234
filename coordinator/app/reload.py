"""Applying a changed configuration file without a restart (``coordinator.reloadIntervalSeconds``;
``docs/deploy.md``, "Changing the configuration while it runs").

The file is read again every few seconds (a mounted ConfigMap is swapped in place by the kubelet,
so its content, not its mtime, is compared). A new file that parses is applied:

- the ``scheduling`` section (weights, plugins, ``topologyConstraints``, seed objects) becomes a
  new framework, swapped in between two scheduling cycles — a cycle runs wholly under the old
  settings or wholly under the new;
- every other changed key (listen address, TLS, auth, limits, leader election, the scheduler
  loop, gangs, metrics, a profile's ``schedulerName``) is named in a log line as needing a
  restart, and keeps its old value until then.

A file that does not parse changes nothing: the old settings keep running, the error (naming the
key) is logged, ``topos_config_reloads_total{result="refused"}`` counts it and, on Kubernetes, a
Warning Event ``ConfigRefused`` is posted on the coordinator's Pod (``POD_NAME``/``POD_NAMESPACE``
from the downward API).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import msgspec
from aiohttp import web
from prometheus_client import Counter

from coordinator.api.keys import METRICS
from coordinator.app.backend import Backend
from coordinator.app.config.load import ConfigError, load_file
from coordinator.app.config.sections import Config
from coordinator.app.scheduler import RUNNING
from coordinator.core.framework.config import SchedulerConfig
from coordinator.core.registry import build_profiles

log = logging.getLogger(__name__)

__all__ = ["install_reload", "restart_needed"]

REASON_REFUSED = "ConfigRefused"


def install_reload(app: web.Application, path: str, config: Config, backend: Backend) -> None:
    """Watch ``path`` while ``app`` runs (unless ``coordinator.reloadIntervalSeconds`` is 0)."""
    every = config.coordinator.reload_interval_s
    if not every:
        return
    reloads = Counter(
        "topos_config_reloads",
        "Configuration file changes seen, by result (applied, refused)",
        ["result"],
        registry=app[METRICS].registry,
    )
    state = _State(app, path, config, backend, reloads)

    async def ctx(_: web.Application) -> AsyncIterator[None]:
        task = asyncio.get_running_loop().create_task(state.watch(every))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app.cleanup_ctx.append(ctx)


class _State:
    def __init__(
        self, app: web.Application, path: str, config: Config, backend: Backend, reloads: Counter
    ) -> None:
        self.app, self.path, self.config, self.backend = app, path, config, backend
        self.reloads = reloads
        self.seen = _digest(path)
        # What the file said at start (``--listen`` may have overridden it): the baseline for
        # naming the keys a change would need a restart for.
        try:
            self.base = load_file(path)
        except ConfigError:
            self.base = config

    async def watch(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            digest = _digest(self.path)
            if digest is None or digest == self.seen:
                continue  # a ConfigMap mid-swap may be briefly absent: wait for it
            self.seen = digest
            try:
                self.apply(load_file(self.path))
            except ConfigError as exc:
                await self._refuse(str(exc))
            except Exception:  # a bug here must not end the watching
                log.exception("config %s: applying the change failed; old settings kept", self.path)

    def apply(self, new: Config) -> None:
        """Put ``new``'s scheduling settings in force, or raise :class:`ConfigError`."""
        # The restart-only keys keep their old values (the scheduler's name, the leaf label
        # from ``gangs``), so the next change is compared against what really runs.
        scheduling = _keep_names(new.scheduling, self.config.scheduling)
        running = self.app[RUNNING]
        try:
            profiles = build_profiles(
                scheduling,
                history=running.history,
                carbon=running.carbon,
                leaf_label=self.config.gangs.keys.leaf,  # gangs': a restart applies it
            )
        except KeyError as exc:  # enabled_plugins names a plugin nothing registered
            raise ConfigError(f"'scheduling' in {self.path}: {exc.args[0]}") from None
        restart = restart_needed(self.base, new)
        if restart:
            log.warning(
                "config %s: %s changed; restart the coordinator to apply (old values kept)",
                self.path,
                ", ".join(restart),
            )
        if running.runtime is not None:
            if running.history is not None:
                running.history.half_life_s = scheduling.process.history_half_life_s
            # One assignment between two awaits: no cycle sees half of each.
            running.runtime.scheduler.profiles = profiles
        running.prices = scheduling.process.prices
        self.config = msgspec.structs.replace(self.config, scheduling=scheduling)
        self.base = msgspec.structs.replace(self.base, scheduling=scheduling)
        self.reloads.labels("applied").inc()
        log.info("config %s: scheduling settings applied", self.path)

    async def _refuse(self, error: str) -> None:
        self.reloads.labels("refused").inc()
        log.error("config %s refused, the previous settings keep running: %s", self.path, error)
        pod = self.backend.own_pod()
        if pod is not None:
            await pod.warn(
                REASON_REFUSED, f"configuration refused, previous settings kept: {error}"
            )


def restart_needed(old: Config, new: Config) -> list[str]:
    """The changed keys (``section.key``) that only a restart applies."""
    out: list[str] = []
    for f in msgspec.structs.fields(Config):
        before, after = getattr(old, f.name), getattr(new, f.name)
        if f.name == "scheduling":
            old_names, new_names = _names(before), _names(after)
            if len(old_names) != len(new_names):
                out.append("scheduling.profiles")
            else:
                out.extend(
                    f"scheduling.profiles[{i}].schedulerName"
                    for i, (o, n) in enumerate(zip(old_names, new_names, strict=True))
                    if o != n
                )
            continue
        if before == after:
            continue
        out.extend(_changed(f.encode_name, before, after))
    return out


def _names(config: SchedulerConfig) -> tuple[str | None, ...]:
    """The profiles' ``schedulerName``s (the pending watches select by them: a restart)."""
    return tuple(p.scheduler_name for p in (config, *config.other_profiles))


def _keep_names(new: SchedulerConfig, old: SchedulerConfig) -> SchedulerConfig:
    """``new`` with the restart-only keys of ``old`` (so the next change is compared against what
    really runs): the profiles' names — a renamed profile keeps its old name; profiles added or
    removed wait for the restart (the others kept)."""
    if len(new.other_profiles) != len(old.other_profiles):
        new = dataclasses.replace(new, other_profiles=old.other_profiles)
    others = tuple(
        dataclasses.replace(n, scheduler_name=o.scheduler_name)
        for n, o in zip(new.other_profiles, old.other_profiles, strict=True)
    )
    return dataclasses.replace(new, scheduler_name=old.scheduler_name, other_profiles=others)


def _changed(path: str, before: object, after: object) -> Iterator[str]:
    if not (isinstance(before, msgspec.Struct) and type(before) is type(after)):
        yield path
        return
    for f in msgspec.structs.fields(before):
        if getattr(before, f.name) != getattr(after, f.name):
            yield f"{path}.{f.encode_name}"


def _digest(path: str) -> bytes | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).digest()
    except OSError:
        return None
