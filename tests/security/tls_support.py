"""Certificates made by the tests (``cryptography``): a CA, the broker's, clients', a rogue CA."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "Issued"]

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its key, as PEM files."""

    cert_file: Path
    key_file: Path


class CertificateAuthority:
    """A self-signed CA under ``directory`` that issues server and client certificates."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
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
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = directory / f"{name}-ca.pem"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def server(self, host: str = "localhost") -> Issued:
        """A server certificate for ``host`` and 127.0.0.1."""
        names = [x509.DNSName(host), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        return self._issue(host, ExtendedKeyUsageOID.SERVER_AUTH, names)

    def client(self, common_name: str) -> Issued:
        """A client certificate whose subject's CN is ``common_name`` (the broker user)."""
        return self._issue(common_name, ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def _issue(
        self, common_name: str, usage: x509.ObjectIdentifier, names: list[x509.GeneralName]
    ) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        stem = self.directory / f"{self.name}-{common_name}"
        issued = Issued(Path(f"{stem}.pem"), Path(f"{stem}.key"))
        issued.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        issued.key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        issued.key_file.chmod(0o600)
        return issued
