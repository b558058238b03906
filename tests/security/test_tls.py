"""TLS across hosts: amqps:// with the broker's certificate verified and the EXTERNAL login.

Each refusal fails at once, as one line that says which: a plain connection to the TLS
port, a broker certificate from an unknown CA, a client certificate from another CA, no
client certificate, a user the broker no longer knows. No password or key reaches it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import pytest
from tls_support import CertificateAuthority

import agentbus
from agentbus import BrokerUnavailable, Settings, TLSError
from agentbus.bus import verifies_sender
from agentbus.testing.chaos import PrivateBroker

pytestmark = pytest.mark.security

FAST = 5.0  # seconds: each refusal must come well within one connect timeout


def _user(node: PrivateBroker) -> tuple[str, str]:
    name = f"svc{secrets.token_hex(3)}"
    password = secrets.token_hex(12)
    node.add_user(name, password)
    return name, password


def _external(
    node: PrivateBroker, ca: CertificateAuthority, user: str, **extra: object
) -> Settings:
    issued = ca.client(user)
    values: dict[str, object] = {
        "url": node.tls_url(),
        "tls_ca_file": str(ca.ca_file),
        "tls_cert_file": str(issued.cert_file),
        "tls_key_file": str(issued.key_file),
        "exchange": f"tls-{secrets.token_hex(4)}",
        "connect_timeout": FAST,
        **extra,
    }
    return Settings.model_validate(values)


def _key_body(path: Path) -> str:
    return "".join(path.read_text().splitlines()[1:-1])


async def _refused(
    settings: Settings, agent_id: str | None = None
) -> tuple[BrokerUnavailable, float]:
    began = time.monotonic()
    with pytest.raises(BrokerUnavailable) as raised:
        await agentbus.Bus(settings, agent_id=agent_id).open()
    return raised.value, time.monotonic() - began


async def test_external_login_from_a_certificate_serves_requests(
    tls_node: PrivateBroker, ca: CertificateAuthority
) -> None:
    """Two services log in with their certificates; a request and its reply go through."""
    server_user, _ = _user(tls_node)
    client_user, _ = _user(tls_node)
    server_settings = _external(tls_node, ca, server_user)
    client_settings = _external(tls_node, ca, client_user, exchange=server_settings.exchange)
    assert verifies_sender(server_settings), "EXTERNAL identities verify senders by default"

    async def handler(request: agentbus.RequestEnvelope) -> dict[str, str]:
        return {"from": request.sender_id}

    async with (
        agentbus.Bus(server_settings, agent_id=f"{server_user}-1") as server,
        agentbus.Bus(client_settings, agent_id=f"{client_user}-1") as client,
    ):
        await server.serve(handler, service=server_user)
        reply = await client.request(server_user, "work", {}, timeout=10)

    assert reply.payload.result == {"from": f"{client_user}-1"}
    assert server.stats.refused == 0
    assert server.stats.requests_served == 1


async def test_a_plain_connection_to_the_tls_port_fails_at_once(
    tls_node: PrivateBroker,
) -> None:
    """amqp:// to the TLS listener: TLSError saying it may be a TLS port."""
    url = f"amqp://guest:guest@localhost:{tls_node.tls_port}/"
    error, took = await _refused(Settings(url=url, connect_timeout=FAST))
    assert isinstance(error, TLSError)
    assert "is this a TLS port? use amqps://" in str(error)
    assert "\n" not in str(error)
    assert took < FAST


async def test_a_broker_certificate_from_an_unknown_ca_fails_at_once(
    tls_node: PrivateBroker, ca: CertificateAuthority, rogue_ca: CertificateAuthority
) -> None:
    """The client trusts another CA than the broker's: TLSError, not trusted."""
    user, _ = _user(tls_node)
    settings = _external(tls_node, ca, user, tls_ca_file=str(rogue_ca.ca_file))
    error, took = await _refused(settings, f"{user}-1")
    assert isinstance(error, TLSError)
    assert "the broker's certificate is not trusted" in str(error)
    assert "\n" not in str(error)
    assert took < FAST


async def test_a_client_certificate_from_another_ca_fails_at_once(
    tls_node: PrivateBroker, ca: CertificateAuthority, rogue_ca: CertificateAuthority
) -> None:
    """A certificate the broker's CA did not sign: TLSError, refused by the broker."""
    user, _ = _user(tls_node)
    forged = rogue_ca.client(user)
    settings = _external(
        tls_node, ca, user, tls_cert_file=str(forged.cert_file), tls_key_file=str(forged.key_file)
    )
    error, took = await _refused(settings, f"{user}-1")
    assert isinstance(error, TLSError)
    assert "the broker refused the client certificate" in str(error)
    assert took < FAST


async def test_a_connection_without_a_client_certificate_fails_at_once(
    tls_node: PrivateBroker, ca: CertificateAuthority
) -> None:
    """A password over TLS without a certificate: the listener wants one."""
    user, password = _user(tls_node)
    url = tls_node.tls_url(user, password)
    settings = Settings(url=url, tls_ca_file=str(ca.ca_file), connect_timeout=FAST)
    error, took = await _refused(settings, f"{user}-1")
    assert isinstance(error, TLSError)
    assert "the broker requires a client certificate" in str(error)
    assert password not in str(error)
    assert took < FAST


async def test_a_revoked_user_with_a_valid_certificate_is_refused(
    tls_node: PrivateBroker, ca: CertificateAuthority
) -> None:
    """The certificate is good, the user is gone: refused credentials, not a TLS error."""
    user, _ = _user(tls_node)
    settings = _external(tls_node, ca, user)
    tls_node.delete_user(user)
    error, took = await _refused(settings, f"{user}-1")
    assert not isinstance(error, TLSError)
    assert "refused the credentials" in str(error)
    assert took < FAST


async def test_no_password_or_key_reaches_the_error_or_the_log(
    tls_node: PrivateBroker, ca: CertificateAuthority, caplog: pytest.LogCaptureFixture
) -> None:
    """Failing and succeeding connections log neither the password nor the key."""
    user, password = _user(tls_node)
    issued = ca.client(user)
    body = _key_body(issued.key_file)
    caplog.set_level("DEBUG")
    settings = Settings(
        url=tls_node.tls_url(user, password),
        tls_ca_file=str(ca.ca_file),
        tls_cert_file=str(issued.cert_file),
        tls_key_file=str(issued.key_file),
        connect_timeout=FAST,
    )
    async with agentbus.Bus(settings, agent_id=f"{user}-1") as bus:
        assert bus.stats.connections == 1
    error, _ = await _refused(settings.model_copy(update={"tls_ca_file": None}), f"{user}-1")
    seen = caplog.text + str(error) + repr(error)
    assert password not in seen
    assert body[:40] not in seen


async def test_revoking_a_connected_user_cuts_it_off(
    tls_node: PrivateBroker, ca: CertificateAuthority
) -> None:
    """delete_user closes the user's connection; its reconnects are refused; nothing runs."""
    server_user, _ = _user(tls_node)
    client_user, _ = _user(tls_node)
    server_settings = _external(tls_node, ca, server_user)
    client_settings = _external(
        tls_node, ca, client_user, exchange=server_settings.exchange, reconnect_interval=0.2
    )
    ran: list[str] = []

    async def handler(request: agentbus.RequestEnvelope) -> str:
        ran.append(request.sender_id)
        return "ok"

    async with (
        agentbus.Bus(server_settings, agent_id=f"{server_user}-1") as server,
        agentbus.Bus(client_settings, agent_id=f"{client_user}-1") as client,
    ):
        await server.serve(handler, service=server_user)
        before = await client.request(server_user, "go", timeout=10)
        await asyncio.to_thread(tls_node.delete_user, client_user)
        with pytest.raises(agentbus.AgentBusError):
            await client.request(server_user, "go", timeout=2)
        # A window for something that must not happen: five reconnect intervals.
        await asyncio.sleep(1.0)
        assert client.stats.connections == 1, "no reconnect of a revoked user succeeds"

    assert before.result == "ok"
    assert ran == [f"{client_user}-1"]
