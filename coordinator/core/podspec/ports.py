"""Ports a pod binds on its node (``hostPort`` of app containers and sidecars)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator.core.podspec.fields import FieldError, entry, integer, sequence, text

__all__ = ["HostPort", "host_ports"]


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port bound on the node (``hostPort``)."""

    port: int
    protocol: str = "TCP"
    ip: str = "0.0.0.0"

    def conflicts(self, other: HostPort) -> bool:
        """Same port and protocol, on the same address or where either listens on all."""
        if self.port != other.port or self.protocol != other.protocol:
            return False
        wildcard = ("0.0.0.0", "::", "")
        return self.ip == other.ip or self.ip in wildcard or other.ip in wildcard


def host_ports(spec: Mapping[str, object]) -> tuple[HostPort, ...]:
    """``hostPort`` entries of the app containers and sidecars (restartable init containers)."""
    out: list[HostPort] = []
    groups = [("containers", sequence(spec, "containers", "spec"))]
    groups.append(("initContainers", sequence(spec, "initContainers", "spec")))
    for group, containers in groups:
        for i, c in enumerate(containers):
            path = f"spec.{group}[{i}]"
            container = entry(c, path)
            if group == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            for j, port in enumerate(sequence(container, "ports", path)):
                p = entry(port, f"{path}.ports[{j}]")
                number = integer(p, "hostPort", f"{path}.ports[{j}]")
                if not number:
                    continue
                if not 0 < number < 65536:
                    raise FieldError(
                        f"{path}.ports[{j}].hostPort", f"{number} is not a port number"
                    )
                out.append(
                    HostPort(
                        number,
                        text(p, "protocol", f"{path}.ports[{j}]", "TCP") or "TCP",
                        text(p, "hostIP", f"{path}.ports[{j}]", "0.0.0.0") or "0.0.0.0",
                    )
                )
    return tuple(out)
