"""The consuming seam (bus/_rabbitmq/_amqp.py's ``Delivery``) against aio-pika, on the real broker.

The bus reads deliveries straight off aiormq instead of through aio-pika's
``IncomingMessage``. This fails the day aiormq hands a consumer something else: every
field the dispatcher reads is compared with aio-pika's reading of the same message, and
each way of settling does what the broker says it does (ack, requeue, dead-letter).
Settling and confirmed publishing do not wait for the socket write (aiormq's ``wait``):
an ack queued just before the connection closes still reaches the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime

import aio_pika
import aiormq.abc
import aiormq.exceptions

from agentbus.bus._rabbitmq._amqp import (
    Delivery,
    DeliveryConsumer,
    basic_publish,
    scratch_channel,
)
from agentbus.bus._rabbitmq._failover import connect_to_nodes
from agentbus.bus._rabbitmq._properties import message_properties

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


async def _publish(
    channel: aio_pika.abc.AbstractChannel, key: str, body: bytes, timeout: float = 5
) -> bool:
    properties = message_properties(
        app_id="seam",
        message_id=uuid.uuid4().hex,
        message_type="request",
        timestamp=datetime.now(UTC),
        correlation_id=None,
        reply_to=None,
        persistent=False,
        ttl=None,
        user_id=None,
    )
    return await basic_publish(
        channel,  # type: ignore[arg-type]
        exchange="",
        routing_key=key,
        body=body,
        properties=properties,
        mandatory=True,
        timeout=timeout,
    )


async def test_settling_and_confirmed_publishes_do_not_wait_for_the_socket_and_lose_nothing(
    broker_url: str,
) -> None:
    # Delivery.ack queues its frame without waiting for the write, and basic_publish on a
    # confirm channel waits for the confirm alone: an ack queued just before the connection
    # closes must still reach the broker, and a confirm must still come back.
    connection = await aio_pika.connect_robust(broker_url)
    channel = await connection.channel(publisher_confirms=True)
    queue = await _queue(channel)
    n = 50
    returns = [await _publish(channel, queue.name, b'{"i": %d}' % i) for i in range(n)]
    unroutable = await _publish(channel, f"{queue.name}-nobody", b"{}")
    got: asyncio.Queue[Delivery] = asyncio.Queue()
    consumer = DeliveryConsumer(channel, queue.name, got.put)  # type: ignore[arg-type]
    await consumer.start()
    for _ in range(n):
        await (await asyncio.wait_for(got.get(), 5)).ack()
    await connection.close()  # right after the last ack was queued

    check = await aio_pika.connect_robust(broker_url)
    try:
        declared = await (await check.channel()).declare_queue(queue.name, passive=True)
        left = declared.declaration_result.message_count
        await declared.delete()
    finally:
        await check.close()
    assert returns == [False] * n
    assert unroutable is True
    assert left == 0


async def test_a_scratch_channel_the_broker_closed_is_not_reopened_behind_us(
    broker_url: str,
) -> None:
    # aio-pika reopens a robust channel the broker closed (a passive declare of a missing
    # queue) unless the program closes it too: a look per missing queue would leave one
    # channel open each, up to channel_max, when the broker closes the whole connection.
    connection = await aio_pika.connect_robust(broker_url)
    try:
        channels = connection.transport.connection.channels  # aiormq's open channels
        before = len(channels)
        for n in range(20):
            with contextlib.suppress(aiormq.exceptions.ChannelNotFoundEntity):
                async with scratch_channel(connection) as channel:
                    await channel.declare_queue(
                        f"seam-missing-{uuid.uuid4().hex}-{n}", passive=True
                    )
        left_by_scratch = len(channels) - before
        # What scratch_channel guards against: the same look without the close.
        bare = await connection.channel(publisher_confirms=False)
        with contextlib.suppress(aiormq.exceptions.ChannelNotFoundEntity):
            await bare.declare_queue(f"seam-missing-{uuid.uuid4().hex}", passive=True)
        async with asyncio.timeout(5):
            while bare.is_closed:  # noqa: ASYNC110 - aio-pika reopens it in the background
                await asyncio.sleep(0.01)
        left_bare = len(channels) - before
    finally:
        await connection.close()
    assert left_by_scratch == 0
    assert left_bare == 1


async def test_a_publish_waiting_for_room_is_released_when_its_connection_closes(
    broker_url: str,
) -> None:
    # aiormq's writer is gone once its connection closes. A publish that found the write
    # queue full (ten frames) waited there until its own timeout, holding its channel's
    # lock and every publish behind it (seen under load: twenty requests timed out after a
    # forced close). FailoverConnection empties the queue as the connection closes.
    connection = await connect_to_nodes([broker_url], timeout=10, reconnect_interval=0.2)
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await _queue(channel)
        assert connection.transport is not None
        underlay = connection.transport.connection
        writer = underlay._writer_task  # type: ignore[attr-defined]  # aiormq's writer
        writer.cancel()  # as a cut socket ends it; the connection closes after it
        await asyncio.gather(writer, return_exceptions=True)
        while not underlay.write_queue.full():
            underlay.write_queue.put_nowait(b"never written")
        outcome = (
            await asyncio.gather(
                _publish(channel, queue.name, b"x", timeout=60), return_exceptions=True
            )
        )[0]
    finally:
        await connection.close()
    # The close's error at once, not the publish's own timeout a minute later.
    assert isinstance(outcome, Exception), outcome
    assert not isinstance(outcome, TimeoutError)


async def test_the_seams_publishes_and_aio_pikas_interleave_on_one_channel(
    broker_url: str,
) -> None:
    """Publishes through the frames seam and through aio-pika's own, 400 at once on one
    confirm channel, each get their own answer from the real broker: returned exactly
    where nothing is bound, confirmed elsewhere. (The ordering under aiormq's lock, which
    a real broker rarely puts to the test, is pinned in tests/unit/test_frames_seam.py.)"""
    connection = await aio_pika.connect_robust(broker_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        queue = await _queue(channel)
        nobody = f"seam-nobody-{uuid.uuid4().hex[:10]}"

        def key(i: int) -> str:
            return nobody if i % 3 == 0 else queue.name

        async def ours(i: int) -> bool:
            return await _publish(channel, key(i), f"ours-{i}".encode())

        async def theirs(i: int) -> bool:
            message = aio_pika.Message(f"theirs-{i}".encode(), message_id=f"theirs-{i}")
            returned = await channel.default_exchange.publish(
                message, routing_key=key(i), mandatory=True
            )
            return isinstance(returned, aiormq.abc.DeliveredMessage)

        results = await asyncio.gather(*(f(i) for i in range(200) for f in (ours, theirs)))
        expected = [i % 3 == 0 for i in range(200) for _ in (ours, theirs)]
        assert results == expected
        # A confirm of a routed message says its queue has it: all are there now.
        declared = await queue.declare()
        assert declared.message_count == sum(not returned for returned in expected)
    finally:
        await connection.close()
