"""``HOST:PORT`` listener addresses, as the agent's and the coordinator's ``--listen`` take them."""

from __future__ import annotations


def parse_host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6; an empty host is every address; port 0 is any free
    port). Raises ValueError naming the expected form."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, e.g. 0.0.0.0:8080, not {text!r}")
    return (host.strip("[]") or "0.0.0.0"), int(port)
