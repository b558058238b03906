"""Feeds on the real broker: raw, unacknowledged, bounded, admitted, and back after a reconnect."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import aiormq.exceptions
from helpers import BusFactory, force_close

from agentbus.bus import FeedState, Topology
from agentbus.envelopes import BROADCAST, EventEnvelope, EventPayload, encode
from support.waiting import wait_until


def _event(n: int, sender_id: str = "beater") -> bytes:
    payload = EventPayload(event_name="tick", event_data={"n": n})
    return encode(EventEnvelope(sender_id=sender_id, receiver_id=BROADCAST, payload=payload))


async def test_a_feed_hands_over_json_objects_in_order_and_drops_what_is_not_one(
    make_bus: BusFactory, exchange_name: str, raw_channel: aio_pika.abc.AbstractChannel
) -> None:
    """Each message's JSON object comes in order; a body that is not one is counted, not fatal."""
    taken: list[dict[str, Any]] = []
    bus = await make_bus(f"feeder-{exchange_name}")
    feed = await bus.consume_feed("broadcast.event.tick", taken.append, name="ticks")
    exchange = await raw_channel.get_exchange(exchange_name)

    for body in [_event(0), b"not json", b"[1, 2]", _event(1)]:
        await exchange.publish(aio_pika.Message(body), routing_key="broadcast.event.tick")
    await wait_until(lambda: feed.stats.received == 4, timeout=10)

    assert [item["payload"]["event_data"]["n"] for item in taken] == [0, 1]
    assert feed.stats.invalid == 2
    assert feed.queue == Topology(exchange_name).feed_queue(bus.agent_id, "ticks")


async def test_a_feed_comes_back_after_the_broker_closes_the_connection(
    make_bus: BusFactory, exchange_name: str, raw_channel: aio_pika.abc.AbstractChannel
) -> None:
    """The exclusive queue, its binding and the no-ack consumer are restored by the bus."""
    taken: list[dict[str, Any]] = []
    bus = await make_bus(f"feeder-{exchange_name}", reconnect_interval=0.2)
    feed = await bus.consume_feed("broadcast.event.tick", taken.append, name="ticks")
    exchange = await raw_channel.get_exchange(exchange_name)
    await exchange.publish(aio_pika.Message(_event(0)), routing_key="broadcast.event.tick")
    await wait_until(lambda: len(taken) == 1, timeout=10)

    assert await force_close(f"agentbus:feeder-{exchange_name}") == 1
    # Publish until one arrives: the queue is gone until the robust channel declares it again.
    n = 0
    async with asyncio.timeout(20):
        while len(taken) < 2:
            n += 1
            message = aio_pika.Message(_event(n))
            await exchange.publish(message, routing_key="broadcast.event.tick")
            await asyncio.sleep(0.1)
    assert taken[-1]["payload"]["event_data"]["n"] >= 1
    assert feed.state is FeedState.OPEN


async def _queue_exists(url: str, name: str) -> bool:
    # A passive declare answers at once (list_queues lags): another connection's
    # exclusive queue is "locked", a missing one "not found".
    async with await aio_pika.connect(url) as connection:
        channel = await connection.channel()
        try:
            await channel.declare_queue(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        except aiormq.exceptions.ChannelLockedResource:
            return True
        return True


async def test_closing_the_bus_closes_its_feeds_and_their_queues(
    make_bus: BusFactory, exchange_name: str, broker_url: str
) -> None:
    """A feed's queue is exclusive: it goes with the bus."""
    bus = await make_bus(f"feeder-{exchange_name}")
    feed = await bus.consume_feed("broadcast.event.tick", lambda _: None, name="ticks")
    assert await _queue_exists(broker_url, feed.queue)

    await bus.aclose()

    assert feed.state is FeedState.CLOSED
    assert not await _queue_exists(broker_url, feed.queue)
