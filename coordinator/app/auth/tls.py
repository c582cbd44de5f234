"""TLS for the coordinator's listener: the certificate and key come from a mounted Secret.

The Deployment mounts the ``kubernetes.io/tls`` Secret ``topos-coordinator-tls`` at
``/etc/topos/tls`` (``tls.crt``, ``tls.key``, optionally ``ca.crt`` for agents to verify us).
"""

from __future__ import annotations

import ssl
from pathlib import Path

DEFAULT_TLS_DIR = Path("/etc/topos/tls")


class TlsConfigError(Exception):
    """The certificate or key is missing or unusable; the message names the file."""


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context with TLS 1.2+ and the certificate chain loaded."""
    for path in (cert_file, key_file):
        if not path.is_file():
            raise TlsConfigError(f"TLS file {path} does not exist")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
    except (ssl.SSLError, ValueError) as exc:
        message = f"cannot load TLS certificate {cert_file} / key {key_file}: {exc}"
        raise TlsConfigError(message) from exc
    return context


def server_context_from_dir(directory: Path = DEFAULT_TLS_DIR) -> ssl.SSLContext:
    return server_context(directory / "tls.crt", directory / "tls.key")
