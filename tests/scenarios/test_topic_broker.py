"""The topic table of ``support/topic_cases.py`` proven on RabbitMQ, held by the memory broker."""

from __future__ import annotations

import contextlib
import uuid

import aio_pika
import pytest

from agentbus.testing import MemoryBroker, MemoryDelivery, MemoryMessage
from support.topic_cases import TOPIC_CASES

PATTERNS = sorted({pattern for pattern, _, _ in TOPIC_CASES})
KEYS = sorted({key for _, key, _ in TOPIC_CASES})


def expected_routes() -> set[tuple[str, str]]:
    return {(pattern, key) for pattern, key, matches in TOPIC_CASES if matches}


def tabled_routes(got: set[tuple[str, str]]) -> set[tuple[str, str]]:
    # Only the (pattern, key) pairs the table speaks of: every key goes to every queue.
    tabled = {(pattern, key) for pattern, key, _ in TOPIC_CASES}
    return got & tabled


@pytest.mark.integration
async def test_rabbitmq_routes_exactly_as_the_table_says(broker_url: str) -> None:
    """A RabbitMQ topic exchange routes each tabled key to exactly the tabled patterns."""
    connection = await aio_pika.connect(broker_url)
    exchange_name = f"test-topic-{uuid.uuid4().hex[:10]}"
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.declare_exchange(exchange_name, aio_pika.ExchangeType.TOPIC)
        try:
            queues = {}
            for pattern in PATTERNS:
                queue = await channel.declare_queue(exclusive=True)
                await queue.bind(exchange, routing_key=pattern)
                queues[pattern] = queue
            for key in KEYS:
                # The key travels in the body too: an empty routing key must be told apart.
                await exchange.publish(aio_pika.Message(f"<{key}>".encode()), routing_key=key)
            got: set[tuple[str, str]] = set()
            for pattern, queue in queues.items():
                # Confirms are in: every routed copy already sits in its queue.
                while (message := await queue.get(no_ack=True, fail=False)) is not None:
                    got.add((pattern, message.body.decode()[1:-1]))
        finally:
            with contextlib.suppress(Exception):
                await channel.exchange_delete(exchange_name)

    assert tabled_routes(got) == expected_routes()


async def test_memory_broker_routes_as_the_table_says() -> None:
    """The memory broker routes each tabled key to the tabled patterns (known gaps aside)."""
    broker = MemoryBroker()
    got: set[tuple[str, str]] = set()
    for pattern in PATTERNS:
        name = f"q-{PATTERNS.index(pattern)}"
        broker.declare_queue(name, dead_letter=False)
        broker.bind(name, pattern, exchange="topic")

        async def collect(delivery: MemoryDelivery, pattern: str = pattern) -> None:
            got.add((pattern, delivery.routing_key))
            await delivery.ack()

        broker.consume(name, collect)
    for key in KEYS:
        broker.publish(MemoryMessage(b"{}"), key, exchange="topic")
    await broker.idle()

    assert tabled_routes(got) == expected_routes()
