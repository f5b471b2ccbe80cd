"""A throwaway CA and a server certificate for loopback HTTPS servers in tests.

Clients trust the server with ``REQUESTS_CA_BUNDLE=<ca_cert>`` or ``verify=ca_cert``; nothing
is installed anywhere. The default host list names every host the GitHub stand-in serves.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STANDIN_HOSTS", "TLSFiles", "cert_hosts", "make_tls"]

#: Every host name the stand-in answers on: ``localhost`` and one loopback address per role
#: (Linux routes all of 127.0.0.0/8 to ``lo``, so each can be bound separately).
STANDIN_HOSTS = ("localhost", *(f"127.0.0.{i}" for i in range(1, 7)))


@dataclass(frozen=True)
class TLSFiles:
    """PEM files of a throwaway CA and of a server certificate it signed."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_tls(dir: Path, hosts: Sequence[str] = STANDIN_HOSTS) -> TLSFiles:
    """Write a throwaway CA and a server certificate for ``hosts`` into ``dir``.

    Host names that parse as IP addresses become IP SANs, the others DNS SANs. Keys are EC
    P-256; the certificates are valid from an hour ago for three days. Clients trust the
    server with ``REQUESTS_CA_BUNDLE=<ca_cert>`` or ``verify=ca_cert``.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not hosts:
        raise ValueError("make_tls needs at least one host name")
    dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=3)

    def usage(*, signs_certs: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=not signs_certs,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=signs_certs,
            crl_sign=signs_certs,
            encipher_only=False,
            decipher_only=False,
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "safehub stand-in test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage(signs_certs=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )

    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage(signs_certs=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )

    files = TLSFiles(dir / "ca.pem", dir / "server.pem", dir / "server-key.pem")
    files.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(files.server_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key_pem)
    return files


def cert_hosts(cert_pem: Path) -> frozenset[str]:
    """The DNS names and IP addresses a PEM certificate's SAN extension names."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(san.get_values_for_type(x509.DNSName))
    names |= {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return frozenset(names)
