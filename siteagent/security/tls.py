"""TLS for the services: a self-signed certificate for localhost on first start, and the server
side's policy (TLS 1.2 or newer).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path
from typing import List, Sequence, Tuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from siteagent.core.files import check_not_writable_by_others
from siteagent.protocol.keys import write_private, write_public

#: Host names a self-signed certificate is made for when none are given.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def self_signed_certificate(hosts: Sequence[str], days: int = 365) -> Tuple[bytes, bytes]:
    """A self-signed server certificate and its key (PEM), valid for ``hosts``.

    ECDSA P-256 because every TLS client accepts it; the certificate is its own CA (so a
    client can trust exactly it with ``cafile=``) and carries the extensions that strict
    X.509 verification (Python 3.13's default) insists on.
    """
    if not hosts:
        raise ValueError("a certificate needs at least one host name")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.UTC)
    names: List[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def write_self_signed(
    cert: Path, key: Path, hosts: Sequence[str] = LOCAL_HOSTS, overwrite: bool = False
) -> None:
    """Write a self-signed certificate (0644) and its key (0600)."""
    cert_pem, key_pem = self_signed_certificate(hosts)
    write_private(key, key_pem, overwrite)
    write_public(cert, cert_pem, overwrite)


def ensure_self_signed(cert: Path, key: Path) -> bool:
    """Make the default localhost certificate on first start; True if it was made now."""
    if cert.exists() and key.exists():
        return False
    write_self_signed(cert, key, overwrite=True)
    return True


def server_ssl_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The TLS settings of the API: TLS 1.2 or newer, the library's default ciphers. A key
    that others may write is refused (UnsafeFile): whoever replaces it is the server."""
    check_not_writable_by_others(key, "TLS private key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context
