"""Fixtures for the security tier: certificates made here, a private node with a TLS listener.

The node has a plain listener (for ``guest`` and the tests' own set-up) and a TLS one that
asks every client for a certificate from the tests' CA; EXTERNAL logins take the user from
the certificate's common name. Without ``rabbitmq-server`` the tier skips (fails under CI).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator

import pytest
from security_support import SecuredTeam
from tls_support import CertificateAuthority

from agentbus.definitions import definitions, team_grants
from agentbus.testing.chaos import PrivateBroker, PrivateBrokerError, TlsListener, find_rabbitmq
from support.required import missing

# RabbitMQ's x509 login: the EXTERNAL mechanism, the user from the subject's CN.
TLS_CONFIG = {
    "auth_mechanisms.1": "PLAIN",
    "auth_mechanisms.2": "EXTERNAL",
    "ssl_cert_login_from": "common_name",
}
TLS_PLUGINS = ("rabbitmq_auth_mechanism_ssl",)


def _missing() -> str | None:
    """Why the tier cannot run here, if it cannot (./scripts/ensure-tls-tier checks the same)."""
    sbin = find_rabbitmq()
    if sbin is None:
        return "rabbitmq-server is not installed: no private TLS node for the security tier"
    plugins = (sbin / "rabbitmq-server").resolve().parent.parent / "plugins"
    if not any(plugins.glob("rabbitmq_auth_mechanism_ssl-*")):
        return f"rabbitmq_auth_mechanism_ssl is not in {plugins}: no EXTERNAL login to test"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/security as ``security``."""
    for item in items:
        if f"{os.sep}security{os.sep}" in str(item.path):
            item.add_marker(pytest.mark.security)


@pytest.fixture(scope="session")
def pki(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[CertificateAuthority, CertificateAuthority]:
    """The tests' CA and a rogue CA the broker does not trust."""
    directory = tmp_path_factory.mktemp("pki")
    return CertificateAuthority(directory, "agentbus-test"), CertificateAuthority(
        directory, "rogue"
    )


@pytest.fixture(scope="session")
def ca(pki: tuple[CertificateAuthority, CertificateAuthority]) -> CertificateAuthority:
    """The CA the TLS node trusts and that signed its certificate."""
    return pki[0]


@pytest.fixture(scope="session")
def rogue_ca(pki: tuple[CertificateAuthority, CertificateAuthority]) -> CertificateAuthority:
    """A CA nobody here trusts."""
    return pki[1]


@pytest.fixture(scope="session")
def tls_node(ca: CertificateAuthority) -> Iterator[PrivateBroker]:
    """A private node with a TLS listener that requires client certificates from ``ca``."""
    message = _missing()
    if message is not None:
        missing(message)
    server = ca.server("localhost")
    node = PrivateBroker(
        f"agentbus-tls-{secrets.token_hex(2)}",
        config=TLS_CONFIG,
        plugins=TLS_PLUGINS,
        tls=TlsListener(ca.ca_file, server.cert_file, server.key_file),
    )
    try:
        node.start()
    except PrivateBrokerError as exc:
        node.stop()
        pytest.fail(f"the private TLS node did not start: {exc}", pytrace=False)
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def secured_team(
    tls_node: PrivateBroker, ca: CertificateAuthority, tmp_path_factory: pytest.TempPathFactory
) -> SecuredTeam:
    """The generated definitions of the test team, imported into the TLS node."""
    exchange = f"secure-{secrets.token_hex(3)}"
    grants = team_grants(
        ["work", "admin"],
        clients={"caller": ["work"], "caller-eu": ["work"], "mallory": ["work"]},
    )
    document = definitions(grants, exchange=exchange, queue_type="classic")
    path = tmp_path_factory.mktemp("definitions") / "definitions.json"
    path.write_text(json.dumps(document))
    tls_node.rabbitmqctl("import_definitions", str(path))
    return SecuredTeam(tls_node, ca, exchange, document)
