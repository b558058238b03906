"""A robust connection between a loss and its reconnect: opening a channel is a ConnectionLost."""

from __future__ import annotations

import aio_pika
import pytest

from agentbus import ConnectionLost
from agentbus.bus._rabbitmq._errors import map_transport_errors, through_reconnects


async def test_aio_pika_still_says_a_connection_without_transport_was_not_opened() -> None:
    """The seam: the one aio-pika message read. If this fails, aio-pika changed it."""
    connection = aio_pika.RobustConnection("amqp://guest:guest@127.0.0.1:1/")
    with pytest.raises(ConnectionLost, match="reconnecting"), map_transport_errors():
        connection.channel()


def test_aiormq_still_says_a_closed_connection_is_closed() -> None:
    """The seam: aiormq's ``channel()`` on a closed connection raises ``<...> closed``, which
    a robust connection's channel meets just after a loss: a ConnectionLost, tried again."""
    import inspect

    import aiormq

    assert '"%r closed" % self' in inspect.getsource(aiormq.Connection.channel)
    closed = RuntimeError('<Connection: "amqp://guest:******@127.0.0.1:5672/" at 0x7f> closed')
    with pytest.raises(ConnectionLost, match="was lost"), map_transport_errors():
        raise closed


async def test_an_operation_that_meets_a_reconnect_is_tried_again() -> None:
    calls = 0

    async def operation() -> str:
        nonlocal calls
        calls += 1
        with map_transport_errors():
            if calls < 3:
                raise RuntimeError("Connection was not opened")
        return "opened"

    assert await through_reconnects(operation, seconds=5) == "opened"
    assert calls == 3


async def test_a_stream_without_its_local_replica_yet_is_waited_out_not_a_configuration_error() -> (
    None
):
    """After a node restarts, consuming a stream there fails until its replica is up again.

    RabbitMQ says PRECONDITION_FAILED then, as for a real conflict; that one text is a
    ConnectionLost (tried again), and any other precondition stays a configuration error.
    """
    from aiormq.exceptions import ChannelPreconditionFailed

    from agentbus import ConfigurationError

    replica = "PRECONDITION_FAILED - queue 'queue 'x.journal.plans' in vhost '/'' does not have a replica on the local node"  # noqa: E501
    calls = 0

    async def read() -> str:
        nonlocal calls
        calls += 1
        with map_transport_errors():
            if calls < 3:
                raise ChannelPreconditionFailed(replica)
        return "read"

    assert await through_reconnects(read, seconds=5) == "read"
    assert calls == 3
    with pytest.raises(ConfigurationError), map_transport_errors():
        raise ChannelPreconditionFailed("PRECONDITION_FAILED - inequivalent arg 'x-max-age'")
