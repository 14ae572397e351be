"""Throwaway certificates for TLS on loopback: a CA, a server certificate, client certificates.

The hostile benchmark (:mod:`services.bench.wire.hostile`) and the tests make them with the
``cryptography`` package (in the ``dev`` extra): a CA, a server certificate for ``localhost``
and ``127.0.0.1`` signed by it, a client certificate it signed (mutual TLS), and a second CA
with a client certificate of its own (one the server must refuse). Never use them for anything
but a test: the keys are written next to the certificates, unencrypted.

Examples:
    >>> paths = make_pki(tmp_path)  # doctest: +SKIP
    >>> paths["ca"], paths["server_cert"], paths["server_key"]  # doctest: +SKIP
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path


def _require_cryptography():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise ImportError(
            'test certificates need the cryptography package: pip install "relayrl[dev]"'
        ) from None
    return x509, hashes, serialization, ec, ExtendedKeyUsageOID, NameOID


def make_pki(directory: str | Path) -> dict[str, str]:
    """Writes the PEM files into ``directory``; returns their paths by role.

    Returns:
        ``ca``, ``server_cert``, ``server_key``, ``client_cert``, ``client_key`` (signed by
        ``ca``), ``other_ca``, ``other_cert``, ``other_key`` (signed by ``other_ca``).
    """
    x509, hashes, serialization, ec, usage, names = _require_cryptography()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    paths: dict[str, str] = {}

    def write(role: str, data: bytes) -> None:
        path = directory / f"{role}.pem"
        path.write_bytes(data)
        paths[role] = str(path)

    def key_pem(key) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def certificate(subject: str, key, issuer=None, issuer_key=None, *, ca=False, server=False):
        name = x509.Name([x509.NameAttribute(names.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer.subject if issuer else name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if server:
            alt = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        if not ca:
            purpose = usage.SERVER_AUTH if server else usage.CLIENT_AUTH
            builder = builder.add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
        return builder.sign(issuer_key or key, hashes.SHA256())

    def pem(cert) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    for prefix, ca_role in (("", "ca"), ("other_", "other_ca")):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = certificate(f"relayrl test {ca_role}", ca_key, ca=True)
        write(ca_role, pem(ca_cert))
        if not prefix:
            server_key = ec.generate_private_key(ec.SECP256R1())
            write("server_cert", pem(certificate("localhost", server_key, ca_cert, ca_key,
                                                 server=True)))  # fmt: skip
            write("server_key", key_pem(server_key))
        client_key = ec.generate_private_key(ec.SECP256R1())
        role = "client" if not prefix else "other"
        write(f"{role}_cert", pem(certificate(f"{role} actor", client_key, ca_cert, ca_key)))
        write(f"{role}_key", key_pem(client_key))
    return paths
