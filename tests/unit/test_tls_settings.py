"""TLS settings: which login, which context, and what each handshake failure is called."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from pathlib import Path

import aiormq.exceptions
import pytest

from agentbus import ConfigurationError, Settings
from agentbus.security import login_mechanism, tls_context, tls_failure, verifies_sender
from agentbus.security._admission import connection_user

PEM = "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n"


def test_auto_logs_in_with_the_certificate_when_the_url_has_no_password() -> None:
    """auto: EXTERNAL with a client certificate and no password; PLAIN otherwise."""
    assert login_mechanism(Settings(url="amqps://h/", tls_cert_file="c.pem")) == "external"
    assert login_mechanism(Settings(url="amqps://u:pw@h/", tls_cert_file="c.pem")) == "plain"
    assert login_mechanism(Settings(url="amqps://u:pw@h/")) == "plain"
    forced = Settings(url="amqps://u:pw@h/", tls_cert_file="c.pem", auth_mechanism="external")
    assert login_mechanism(forced) == "external"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"url": "amqp://h/", "tls_ca_file": "ca.pem"}, "need an amqps:// URL"),
        ({"url": "amqps://h/;amqp://g/"}, "mix amqp:// and amqps://"),
        ({"url": "amqps://h/", "auth_mechanism": "external"}, "needs a client certificate"),
        ({"url": "amqps://h/", "tls_ca_file": "/nonexistent/ca.pem"}, "cannot load the CA file"),
    ],
)
def test_tls_settings_that_cannot_work_are_a_configuration_error(
    values: dict[str, str], message: str
) -> None:
    """Each says what is wrong in one line, naming the setting."""
    settings = Settings.model_validate(values)
    nodes = tuple(settings.url.split(";"))
    with pytest.raises(ConfigurationError, match=message):
        tls_context(settings, nodes)


def test_a_plain_url_has_no_context_and_an_amqps_url_verifies_the_broker() -> None:
    """No TLS for amqp://; for amqps://, CERT_REQUIRED and the host name checked."""
    assert tls_context(Settings(), ("amqp://localhost/",)) is None
    context = tls_context(Settings(url="amqps://h/"), ("amqps://h/",))
    assert context is not None
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname is True


def test_an_unreadable_certificate_is_a_configuration_error_without_its_contents(
    tmp_path: Path,
) -> None:
    """The certificate's user cannot be read: say so, without quoting the file."""
    path = tmp_path / "client.pem"
    path.write_text(PEM)
    settings = Settings(url="amqps://h/", tls_cert_file=str(path))
    with pytest.raises(ConfigurationError, match="cannot read the client certificate") as caught:
        connection_user(settings)
    assert "not a certificate" not in str(caught.value)
    assert verifies_sender(settings), "an EXTERNAL identity is verified by default"


def _wrapped(cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise aiormq.exceptions.AMQPConnectionError("Server connection reset") from exc
    except aiormq.exceptions.AMQPConnectionError as outer:
        return outer


def test_each_handshake_failure_says_which() -> None:
    """aiormq wraps the cause; the cause decides the one line."""
    untrusted = ssl.SSLCertVerificationError(1, "certificate verify failed")
    untrusted.verify_message = "self-signed certificate in certificate chain"
    refused = ssl.SSLError(1, "alert")
    refused.reason = "TLSV1_ALERT_UNKNOWN_CA"
    reset = ConnectionResetError(104, "Connection reset by peer")
    said = {
        "untrusted": tls_failure(_wrapped(untrusted), secure=True, client_cert=True),
        "refused": tls_failure(_wrapped(refused), secure=True, client_cert=True),
        "reset, no cert": tls_failure(_wrapped(reset), secure=True, client_cert=False),
        "reset, cert": tls_failure(_wrapped(reset), secure=True, client_cert=True),
        "plain": tls_failure(_wrapped(asyncio.IncompleteReadError(b"", 7)), secure=False,
                             client_cert=False),
        "refused port": tls_failure(ConnectionRefusedError(111, "x"), secure=False,
                                    client_cert=False),
    }  # fmt: skip
    assert "the broker's certificate is not trusted (self-signed" in str(said["untrusted"])
    assert "the broker refused the client certificate (TLSV1_ALERT_UNKNOWN_CA)" in str(
        said["refused"]
    )
    assert "requires a client certificate" in str(said["reset, no cert"])
    assert "refused the client certificate" in str(said["reset, cert"])
    assert "is this a TLS port? use amqps://" in str(said["plain"])
    assert said["refused port"] is None, "a closed port is no TLS matter"


def test_an_encrypted_key_is_refused_rather_than_prompted_for(tmp_path: Path) -> None:
    """OpenSSL would prompt on the terminal for the pass phrase: a clear error instead."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "billing")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "c.pem", tmp_path / "c.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret-phrase"),
        )
    )
    settings = Settings(url="amqps://h/", tls_cert_file=str(cert_file), tls_key_file=str(key_file))
    with pytest.raises(ConfigurationError, match="is encrypted") as caught:
        tls_context(settings, ("amqps://h/",))
    assert "secret-phrase" not in str(caught.value)
    assert connection_user(settings) == "billing", "the CN is the EXTERNAL user"
