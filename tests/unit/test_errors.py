"""aio-pika / aiormq exceptions are translated into the agentbus tree at the bus boundary."""

from __future__ import annotations

import aiormq.exceptions
import pytest
from pamqp.commands import Basic as _Basic

import agentbus
from agentbus import (
    AccessRefused,
    AgentBusError,
    BrokerUnavailable,
    ConfigurationError,
    ConnectionLost,
    PublishFailed,
    TransportError,
)
from agentbus.bus._rabbitmq._errors import map_connect_errors, map_transport_errors, translate

CASES = [
    pytest.param(
        aiormq.exceptions.ConnectionClosed(320, "forced"), ConnectionLost, id="conn-closed"
    ),
    pytest.param(
        aiormq.exceptions.ChannelInvalidStateError("closed"), ConnectionLost, id="chan-state"
    ),
    pytest.param(aiormq.exceptions.ChannelClosed(504, "gone"), ConnectionLost, id="chan-closed"),
    pytest.param(ConnectionResetError("reset"), ConnectionLost, id="reset"),
    pytest.param(
        aiormq.exceptions.ChannelPreconditionFailed("inequivalent arg"),
        ConfigurationError,
        id="precondition",
    ),
    pytest.param(aiormq.exceptions.ChannelAccessRefused("403"), AccessRefused, id="access"),
    pytest.param(
        aiormq.exceptions.DeliveryError(None, _Basic.Nack(delivery_tag=1)),
        PublishFailed,
        id="nack",
    ),
    pytest.param(aiormq.exceptions.AMQPError("other"), TransportError, id="amqp-other"),
]


@pytest.mark.parametrize(("raised", "expected"), CASES)
def test_transport_exceptions_map_to_the_tree(raised: Exception, expected: type) -> None:
    """Each transport exception becomes the agentbus error a caller can act on."""
    mapped = translate(raised)
    assert type(mapped) is expected
    assert isinstance(mapped, AgentBusError)


@pytest.mark.parametrize(("raised", "expected"), CASES)
def test_map_transport_errors_chains_the_cause(raised: Exception, expected: type) -> None:
    """Inside map_transport_errors the original exception is kept as __cause__."""
    with pytest.raises(expected) as caught, map_transport_errors():
        raise raised
    assert caught.value.__cause__ is raised


def test_unrelated_exceptions_pass_through() -> None:
    """Exceptions that are not transport failures are not swallowed or renamed."""
    assert translate(ValueError("x")) is None
    with pytest.raises(ValueError, match="x"), map_transport_errors():
        raise ValueError("x")


def test_access_refused_carries_the_unauthorized_code() -> None:
    """Permission failures map to the wire code unauthorized."""
    assert AccessRefused("no").code == "unauthorized"


def test_connect_failure_names_the_masked_url_and_a_remedy() -> None:
    """A failed connect says which broker (without password) and how to get one."""
    with (
        pytest.raises(BrokerUnavailable) as caught,
        map_connect_errors("amqp://guest:***@localhost:5999/"),
    ):
        raise ConnectionRefusedError(111, "Connect call failed")
    message = str(caught.value)
    assert "amqp://guest:***@localhost:5999/" in message
    assert "rabbitmq-server" in message


async def test_connecting_to_a_closed_port_raises_broker_unavailable() -> None:
    """Opening a bus against nothing fails fast with BrokerUnavailable, password masked."""
    bus = agentbus.connect("amqp://user:s3cret@127.0.0.1:1/", agent_id="nobody")
    with pytest.raises(BrokerUnavailable) as caught:
        await bus.open()
    assert "s3cret" not in str(caught.value)
    assert "amqp://user:***@127.0.0.1:1/" in str(caught.value)


def test_error_codes_of_the_tree() -> None:
    """Errors that stand for wire errors carry the contract's codes."""
    assert agentbus.Unroutable("x").code == "agent_unavailable"
    assert agentbus.RequestTimeout("x").code == "timeout"
    assert agentbus.InvalidParameters("x").code == "invalid_parameters"
    assert agentbus.UnknownAction("x").code == "unknown_action"
    assert agentbus.Cancelled("x").code == "cancelled"
    assert agentbus.PayloadTooLarge("x").code == "payload_too_large"
    assert agentbus.UnsupportedVersion("x").code == "unsupported_version"
    assert AgentBusError("x", code="unauthorized").code == "unauthorized"
