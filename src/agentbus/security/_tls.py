"""TLS to the broker: the context ``amqps://`` connects with, the login mechanism, and
what a failed handshake means.

The context verifies the broker's certificate (against ``tls_ca_file``, or the system's
CAs) and its host name, always; it presents ``tls_cert_file`` when one is set. With the
EXTERNAL mechanism the broker takes the identity from that certificate (RabbitMQ's
``ssl_cert_login_from``, here the subject's common name), so ``certificate_user`` reads
the same name for the checks that need the identity before the broker is asked.

The context travels to aio-pika as an object, never as paths in the URL, so no URL
that is logged names a file; nothing here logs a path's contents.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Final, Literal
from urllib.parse import urlsplit

from agentbus._config import Settings
from agentbus._exceptions import ConfigurationError

__all__ = ["certificate_user", "login_mechanism", "tls_context", "tls_failure"]

Mechanism = Literal["plain", "external"]

# OpenSSL's reasons when the broker's alert says our certificate was refused or missing.
_CLIENT_CERT_REFUSED: Final = frozenset(
    {
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV1_ALERT_DECRYPT_ERROR",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_ACCESS_DENIED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    }
)
_CLIENT_CERT_MISSING: Final = frozenset(
    {"TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_HANDSHAKE_FAILURE"}
)

_PLAIN_TO_TLS_PORT: Final = (
    "the broker closed the connection before the AMQP handshake: is this a TLS port? use amqps://"
)
# What a reset after a TLS handshake means, by whether a client certificate was presented.
_RESET_AFTER_HANDSHAKE: Final = {
    True: (
        "the broker refused the client certificate (it reset the TLS connection): "
        "is it signed by a CA the broker trusts?"
    ),
    False: (
        "the broker requires a client certificate (it reset the TLS connection): set tls_cert_file"
    ),
}

# The peer hanging up on us (a refused port is no TLS matter).
_DROPS: Final = (
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
    EOFError,
    asyncio.IncompleteReadError,
)


def login_mechanism(settings: Settings) -> Mechanism:
    """Return how a connection with ``settings`` logs in: ``plain`` or ``external``.

    ``auto`` is ``external`` when a client certificate is set and the URL has no password.
    """
    if settings.auth_mechanism != "auto":
        return settings.auth_mechanism
    password = urlsplit(settings.url.split(";")[0]).password
    return "external" if settings.tls_cert_file and not password else "plain"


def tls_context(settings: Settings, nodes: tuple[str, ...]) -> ssl.SSLContext | None:
    """Return the TLS context for ``nodes`` (None when none is ``amqps://``).

    Raises:
        ConfigurationError: TLS settings without ``amqps://``, EXTERNAL without a client
            certificate, or a CA, certificate or key file that cannot be loaded.
    """
    if not _is_secure(settings, nodes):
        return None
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.tls_ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"cannot load the CA file (tls_ca_file): {_reason(exc)}") from exc
    if settings.tls_cert_file:
        _load_client_certificate(context, settings.tls_cert_file, settings.tls_key_file)
    return context


def _is_secure(settings: Settings, nodes: tuple[str, ...]) -> bool:
    """Whether ``nodes`` are ``amqps://``; raise if the TLS settings do not fit them."""
    secure = [urlsplit(node).scheme == "amqps" for node in nodes]
    external = login_mechanism(settings) == "external"
    if not any(secure):
        if settings.tls_cert_file or settings.tls_ca_file or external:
            raise ConfigurationError(
                "TLS settings (tls_ca_file, tls_cert_file, EXTERNAL login) need an amqps:// URL"
            )
        return False
    if not all(secure):
        raise ConfigurationError("the broker nodes mix amqp:// and amqps://: use amqps:// for all")
    if external and not settings.tls_cert_file:
        raise ConfigurationError("the EXTERNAL login needs a client certificate (tls_cert_file)")
    return True


def _load_client_certificate(context: ssl.SSLContext, cert_file: str, key_file: str | None) -> None:
    try:
        # Never OpenSSL's own prompt for a pass phrase: an agent has no terminal.
        context.load_cert_chain(cert_file, key_file, password=_no_pass_phrase)
    except ConfigurationError:
        raise
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(
            f"cannot load the client certificate and key (tls_cert_file, tls_key_file): "
            f"{_reason(exc)}"
        ) from exc


def _no_pass_phrase() -> bytes:
    raise ConfigurationError(
        "the client key (tls_key_file) is encrypted: give agentbus an unencrypted key, "
        "readable only by the agent's own user"
    )


def certificate_user(path: str) -> str:
    """Return the broker user the certificate at ``path`` logs in as: its subject's CN.

    Raises:
        ConfigurationError: the file is not a PEM certificate with a common name, or the
            ``cryptography`` package (the ``agentbus[tls]`` extra) is not installed.
    """
    try:
        from cryptography import x509
        from cryptography.x509.oid import NameOID
    except ImportError as exc:
        raise ConfigurationError(
            "reading the identity of a client certificate needs the 'cryptography' "
            "package: pip install 'agentbus[tls]'"
        ) from exc
    try:
        with open(path, "rb") as file:
            certificate = x509.load_pem_x509_certificate(file.read())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot read the client certificate (tls_cert_file): {_reason(exc)}"
        ) from exc
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        raise ConfigurationError("the client certificate (tls_cert_file) has no common name")
    value = names[0].value
    return value if isinstance(value, str) else value.decode()


def tls_failure(exc: BaseException, *, secure: bool, client_cert: bool) -> str | None:
    """Say in one phrase which TLS failure ``exc`` is, or return None if it is none.

    Args:
        exc: What a connection attempt raised.
        secure: Whether the attempt was ``amqps://``.
        client_cert: Whether it presented a client certificate.
    """
    if not secure:
        # A TLS-only listener drops the AMQP header it cannot parse as a ClientHello.
        return _PLAIN_TO_TLS_PORT if _dropped(exc) else None
    cause = _ssl_cause(exc)
    if cause is None:
        # TLS 1.3: the broker checks the client's certificate after the handshake and
        # resets the connection; Python sees the reset, not always the alert.
        return _RESET_AFTER_HANDSHAKE[client_cert] if _dropped(exc) else None
    return _handshake_failure(cause, client_cert=client_cert)


def _handshake_failure(cause: ssl.SSLError, *, client_cert: bool) -> str:
    """Say which side refused what, from the ``ssl.SSLError`` of a failed handshake."""
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (
            f"the broker's certificate is not trusted ({cause.verify_message}): "
            "set tls_ca_file to the CA that signed it"
        )
    reason = cause.reason or ""
    if reason in _CLIENT_CERT_REFUSED:
        return (
            f"the broker refused the client certificate ({reason}): it is not signed "
            "by a CA the broker trusts"
        )
    if reason in _CLIENT_CERT_MISSING and not client_cert:
        return f"the broker requires a client certificate ({reason}): set tls_cert_file"
    return f"the TLS handshake failed ({reason or cause.strerror or type(cause).__name__})"


def _dropped(exc: BaseException) -> bool:
    """Whether ``exc`` is the peer closing or resetting the connection (aiormq wraps it)."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, _DROPS):
            return True
        current = current.__cause__
    return False


def _ssl_cause(exc: BaseException) -> ssl.SSLError | None:
    """The ``ssl.SSLError`` that ``exc`` is or was raised from (aiormq wraps it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
