"""The consuming seam (bus/_amqp.py's ``Delivery``) against aio-pika, on the real broker.

The bus reads deliveries straight off aiormq instead of through aio-pika's
``IncomingMessage``. This fails the day aiormq hands a consumer something else: every
field the dispatcher reads is compared with aio-pika's reading of the same message, and
each way of settling does what the broker says it does (ack, requeue, dead-letter).
"""

from __future__ import annotations

import asyncio
import uuid

import aio_pika

from agentbus.bus._amqp import Delivery, DeliveryConsumer

FIELDS = ("body", "message_id", "correlation_id", "reply_to", "type", "headers", "user_id")


async def _queue(channel: aio_pika.abc.AbstractChannel) -> aio_pika.abc.AbstractQueue:
    # Not auto-delete: cancelling the one consumer would delete it.
    return await channel.declare_queue(
        f"seam-{uuid.uuid4().hex[:10]}", arguments={"x-expires": 60_000}
    )


async def test_a_delivery_reads_what_aio_pika_reads_and_settles_as_the_broker_says(
    broker_url: str,
) -> None:
    connection = await aio_pika.connect_robust(broker_url)
    try:
        channel = await connection.channel()
        queue = await _queue(channel)
        message = aio_pika.Message(
            b'{"a": 1}',
            message_id="m-1",
            correlation_id="c-1",
            reply_to="somewhere",
            type="request",
            headers={"x-agentbus-attempt": 2},
            user_id="guest",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        await channel.default_exchange.publish(message, routing_key=queue.name)
        theirs = await queue.get(timeout=5)
        expected = {field: getattr(theirs, field) for field in FIELDS}
        await theirs.nack(requeue=True)

        got: asyncio.Queue[Delivery] = asyncio.Queue()
        consumer = DeliveryConsumer(channel, queue.name, got.put)  # type: ignore[arg-type]
        await consumer.start()
        first = await asyncio.wait_for(got.get(), 5)
        read = {field: getattr(first, field) for field in FIELDS}
        await first.nack(requeue=True)  # back at the head, to the same consumer
        second = await asyncio.wait_for(got.get(), 5)
        await second.ack()
        await consumer.cancel()
        await channel.default_exchange.publish(message, routing_key=queue.name)
        left = await queue.get(timeout=5)  # the consumer is gone: the message waits
        await left.ack()
        await queue.delete()
    finally:
        await connection.close()

    assert read == expected
    assert (first.routing_key, first.redelivered) == (queue.name, True)
    assert second.redelivered is True
    assert first.properties.delivery_mode == 2
