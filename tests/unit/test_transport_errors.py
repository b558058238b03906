"""A robust connection between a loss and its reconnect: opening a channel is a ConnectionLost."""

from __future__ import annotations

import aio_pika
import pytest

from agentbus import ConnectionLost
from agentbus.bus._errors import map_transport_errors, through_reconnects


async def test_aio_pika_still_says_a_connection_without_transport_was_not_opened() -> None:
    """The seam: the one aio-pika message read. If this fails, aio-pika changed it."""
    connection = aio_pika.RobustConnection("amqp://guest:guest@127.0.0.1:1/")
    with pytest.raises(ConnectionLost, match="reconnecting"), map_transport_errors():
        connection.channel()


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
