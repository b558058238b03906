"""A service queue's delivery limit: the leaders' own (plans), and a queue declared before.

A quorum queue keeps the ``x-delivery-limit`` it was declared with, and the broker refuses
a declaration that names another: what a queue holds is read back by declaring it again
with one value (accepted) and with another (refused).
"""

from __future__ import annotations

import aio_pika
import aiormq.exceptions
import pytest
from helpers import BusFactory

from agentbus import ConfigurationError, Settings
from agentbus.bus import Topology
from agentbus.envelopes import RequestEnvelope
from agentbus.leader import Leader
from support.broker import delete_topology


async def _holds_limit(url: str, queue: str, limit: int) -> bool:
    """Whether ``queue`` (quorum) was declared with ``x-delivery-limit`` = ``limit``."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        try:
            await channel.declare_queue(
                queue,
                durable=True,
                arguments={
                    "x-dead-letter-exchange": queue.split(".service.")[0] + ".dlx",
                    "x-queue-type": "quorum",
                    "x-delivery-limit": limit,
                },
            )
        except aiormq.exceptions.ChannelPreconditionFailed:
            return False
        return True


async def test_the_leaders_queue_takes_the_plan_delivery_limit(
    broker_url: str, exchange_name: str
) -> None:
    settings = Settings(
        url=broker_url, exchange=exchange_name, queue_type="quorum", plan_delivery_limit=17
    )
    leader = Leader(agent_id="leader-dl-1", settings=settings, heartbeat_interval=1.0)
    queue = Topology(exchange_name).service_queue("leader")
    await leader.start()
    try:
        assert await _holds_limit(broker_url, queue, 17)
        assert not await _holds_limit(broker_url, queue, settings.delivery_limit)
    finally:
        await leader.stop()
        await delete_topology(
            broker_url, exchange_name, {queue, Topology(exchange_name).instance_queue(leader.id)}
        )


async def test_a_service_queue_declared_before_with_another_limit_is_served_as_it_is(
    make_bus: BusFactory, broker_url: str, exchange_name: str, raw_channel: aio_pika.Channel
) -> None:
    queue = Topology(exchange_name).service_queue("echo")
    await raw_channel.declare_queue(
        queue,
        durable=True,
        arguments={
            "x-dead-letter-exchange": Topology(exchange_name).dead_letter_exchange,
            "x-queue-type": "quorum",
            "x-delivery-limit": 5,
        },
    )
    server = await make_bus("echo-dl-1", queue_type="quorum")

    async def echo(request: RequestEnvelope) -> dict[str, str]:
        return {"ok": "yes"}

    await server.serve(echo, service="echo", delivery_limit=20)
    assert server.service == "echo"
    client = await make_bus("client-dl-1", queue_type="quorum")
    answer = await client.request("echo", "ping", {}, timeout=10)
    assert answer.result == {"ok": "yes"}
    assert await _holds_limit(broker_url, queue, 5)  # kept: the broker holds its arguments


async def test_a_bus_serving_with_a_limit_declares_it(
    make_bus: BusFactory, broker_url: str, exchange_name: str
) -> None:
    limit = 3
    server = await make_bus("limited-dl-1", queue_type="quorum")

    async def echo(request: RequestEnvelope) -> dict[str, str]:
        return {}

    await server.serve(echo, service="limited", delivery_limit=limit)
    queue = Topology(exchange_name).service_queue("limited")
    assert await _holds_limit(broker_url, queue, limit)
    assert not await _holds_limit(broker_url, queue, server.settings.delivery_limit)


async def test_a_service_queue_of_another_type_is_still_refused(
    make_bus: BusFactory, exchange_name: str, raw_channel: aio_pika.Channel
) -> None:
    queue = Topology(exchange_name).service_queue("typed")
    await raw_channel.declare_queue(
        queue,
        durable=True,
        arguments={"x-dead-letter-exchange": Topology(exchange_name).dead_letter_exchange},
    )
    server = await make_bus("typed-dl-1", queue_type="quorum")

    async def echo(request: RequestEnvelope) -> dict[str, str]:
        return {}

    try:
        with pytest.raises(ConfigurationError, match="conflicts"):
            await server.serve(echo, service="typed", delivery_limit=20)
    finally:
        await raw_channel.queue_delete(queue)
