"""The bus on a real RabbitMQ, beyond the scenarios shared with the in-memory bus.

tests/scenarios runs request/response, errors, unroutable requests, timeouts, broadcast,
competing consumers, duplicates, deadlines and closing on both transports.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import aio_pika
import aiormq.exceptions
import pytest
from helpers import BusFactory

from agentbus import (
    ConfigurationError,
    RequestEnvelope,
    RequestTimeout,
)
from support.waiting import wait_until


async def echo(request: RequestEnvelope) -> dict[str, Any]:
    return {"echo": request.payload.parameters, "action": request.payload.action}


async def test_request_to_an_instance_id_reaches_that_instance(make_bus: BusFactory) -> None:
    """A request addressed to an instance id is served by that instance."""
    server = await make_bus("only-me")
    await server.serve(echo)
    client = await make_bus()

    reply = await client.request("only-me", "ping", timeout=10)

    assert reply.sender_id == "only-me"


async def test_hundred_concurrent_requests_with_mixed_timeouts_end_once(
    make_bus: BusFactory,
) -> None:
    """100 requests in flight at once each end exactly once: a reply or a timeout."""
    release = asyncio.Event()

    async def handler(request: RequestEnvelope) -> int:
        if request.payload.parameters["slow"]:
            await release.wait()
        return int(request.payload.parameters["i"])

    server = await make_bus(prefetch=200)
    await server.serve(handler, service="mixed", prefetch=200)
    client = await make_bus()

    async def one(i: int) -> str:
        slow = i % 2 == 1
        try:
            reply = await client.request(
                "mixed", "work", {"i": i, "slow": slow}, timeout=0.5 if slow else 20
            )
        except RequestTimeout:
            return "timeout"
        assert reply.result == i
        return "reply"

    outcomes = await asyncio.gather(*(one(i) for i in range(100)))
    release.set()

    assert Counter(outcomes) == {"reply": 50, "timeout": 50}
    assert client.in_flight == 0
    # The slow ones are answered after their requesters gave up: dropped and counted. On a
    # loaded host some time out before they are even sent, and one may reach the server past
    # its deadline and be answered `timeout` at once: whatever reached the server is
    # answered once, matched or late, and nothing else comes back.
    stats, served = client.stats, server.stats
    await wait_until(
        lambda: stats.replies_matched + stats.late_replies == served.requests_served >= 50,
        timeout=20,
    )
    assert stats.replies_matched >= 50
    assert client.stats.unknown_replies == 0


async def test_invalid_service_name_is_refused(make_bus: BusFactory) -> None:
    """A service name outside the id grammar is a ConfigurationError, nothing declared."""
    bus = await make_bus()

    with pytest.raises(ConfigurationError):
        await bus.serve(echo, service="has.dot")


@pytest.mark.parametrize(
    ("settings", "quorum"),
    [
        ({}, False),
        ({"queue_type": "quorum"}, True),  # follows the service queues by default
        ({"queue_type": "quorum", "instance_queue_type": "classic"}, False),
        ({"instance_queue_type": "quorum"}, True),
    ],
)
async def test_the_instance_queue_is_quorum_when_asked_and_answers_the_same(
    make_bus: BusFactory,
    raw_channel: aio_pika.abc.AbstractChannel,
    settings: dict[str, Any],
    quorum: bool,
) -> None:
    """A quorum instance queue (a cluster's replies survive a node) carries replies as before."""
    server = await make_bus(**settings)
    await server.serve(echo, service="typed")
    client = await make_bus(**settings)

    reply = await client.request("typed", "ping", {"n": 1}, timeout=10)

    assert reply.result == {"echo": {"n": 1}, "action": "ping"}
    name = client.topology.instance_queue(client.agent_id)
    arguments = {
        "x-expires": int(client.settings.instance_queue_expires * 1000),
        "x-dead-letter-exchange": client.topology.dead_letter_exchange,
    }
    # The broker takes only an equivalent redeclaration: same type, same durability.
    kind = {"x-queue-type": "quorum"} if quorum else {}
    await raw_channel.declare_queue(name, durable=quorum, arguments=arguments | kind)
    other = {} if quorum else {"x-queue-type": "quorum"}
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed):
        await raw_channel.declare_queue(name, durable=not quorum, arguments=arguments | other)


@pytest.mark.parametrize("persistent", [True, False])
async def test_a_request_is_persistent_unless_asked_transient(
    make_bus: BusFactory,
    raw_channel: aio_pika.abc.AbstractChannel,
    exchange_name: str,
    persistent: bool,
) -> None:
    """request(persistent=False) goes out transient (delivery mode 1), the default mode 2."""
    client = await make_bus()  # declares the exchange
    queue = await raw_channel.declare_queue(exclusive=True)
    await queue.bind(exchange_name, routing_key="agent.listener.request")

    asking = asyncio.create_task(
        client.request("listener", "look", timeout=10, persistent=persistent)
    )
    message = None
    async with asyncio.timeout(5):
        while message is None:  # the request in the queue, while its caller waits
            message = await queue.get(fail=False)
            await asyncio.sleep(0.02)
    asking.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asking
    assert message.delivery_mode == (
        aio_pika.DeliveryMode.PERSISTENT if persistent else aio_pika.DeliveryMode.NOT_PERSISTENT
    )
