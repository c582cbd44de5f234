"""Certificates and keys for a local control plane, generated with ``cryptography``.

One CA signs the API server's serving certificate and client certificates (the admin is in group
``system:masters``); a separate key pair signs service-account tokens. EC P-256 keys: quick to
generate, accepted everywhere Kubernetes takes a key.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)
_SERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    certificate: bytes
    key: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def make_ca(
    common_name: str = "topos-devcluster-ca", *, dns: tuple[str, ...] = (), rsa_pkcs1: bool = False
) -> KeyPair:
    """A self-signed CA. ``dns``: subject alternative names on the CA certificate itself;
    ``rsa_pkcs1``: an RSA key written as PKCS #1 (``RSA PRIVATE KEY``) instead of EC. Both for
    certificate rotators that read a CA someone else made (open-policy-agent's cert-controller
    verifies its CA by name and parses only PKCS #1 RSA keys)."""
    if rsa_pkcs1:
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return _self_signed(
            common_name,
            dns,
            rsa_key,
            rsa_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            ),
        )
    key = _key()
    return _self_signed(common_name, dns, key, _key_pem(key))


def _self_signed(
    common_name: str,
    dns: tuple[str, ...],
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    key_pem: bytes,
) -> KeyPair:
    now = datetime.datetime.now(datetime.UTC)
    name = _name(common_name)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if dns:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False
        )
    cert = builder.sign(key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem)


def _issue(
    ca: KeyPair,
    subject: x509.Name,
    *,
    usage: x509.ObjectIdentifier,
    ips: tuple[str, ...] = (),
    dns: tuple[str, ...] = (),
) -> KeyPair:
    ca_cert = x509.load_pem_x509_certificate(ca.certificate)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("the CA key is neither an EC nor an RSA key")
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def make_serving_cert(ca: KeyPair, *, ips: tuple[str, ...] = ("127.0.0.1",)) -> KeyPair:
    """The API server's TLS certificate: valid for ``ips`` and the in-cluster DNS names."""
    return _issue(
        ca,
        _name("kube-apiserver"),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        ips=ips,
        dns=_SERVER_DNS,
    )


def make_server_cert(
    ca: KeyPair, common_name: str, *, ips: tuple[str, ...] = (), dns: tuple[str, ...] = ()
) -> KeyPair:
    """A TLS serving certificate for ``ips`` and ``dns`` (e.g. a webhook server on loopback)."""
    return _issue(ca, _name(common_name), usage=ExtendedKeyUsageOID.SERVER_AUTH, ips=ips, dns=dns)


def make_client_cert(ca: KeyPair, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
    """A client certificate: Kubernetes reads the user from CN and the groups from O."""
    return _issue(ca, _name(user, groups), usage=ExtendedKeyUsageOID.CLIENT_AUTH)


def make_signing_key() -> KeyPair:
    """The service-account token signing key; ``certificate`` holds the PEM public key."""
    key = _key()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _key_pem(key))


def write_pair(pair: KeyPair, directory: Path, stem: str, *, cert_suffix: str = ".crt") -> None:
    (directory / f"{stem}{cert_suffix}").write_bytes(pair.certificate)
    key_path = directory / f"{stem}.key"
    key_path.write_bytes(pair.key)
    key_path.chmod(0o600)


def write_kubeconfig(path: Path, *, server: str, ca: bytes, client: KeyPair, user: str) -> None:
    """A kubeconfig for ``server`` authenticating as ``user`` by client certificate."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "topos-devcluster",
                "cluster": {"server": server, "certificate-authority-data": b64(ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client.certificate),
                    "client-key-data": b64(client.key),
                },
            }
        ],
        "contexts": [
            {"name": "topos-devcluster", "context": {"cluster": "topos-devcluster", "user": user}}
        ],
        "current-context": "topos-devcluster",
        "preferences": {},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def load_ca(pki_dir: Path) -> KeyPair:
    """The CA that ``write_pair(ca, pki_dir, "ca")`` wrote."""
    return KeyPair((pki_dir / "ca.crt").read_bytes(), (pki_dir / "ca.key").read_bytes())
