"""Unit tests of the RabbitMQ Publisher on a miniature broker's channel: what goes on the wire."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, cast

import aio_pika
import aiormq
import pytest
from aio_pika.abc import AbstractExchange, AbstractRobustChannel
from pamqp.commands import Basic

from agentbus import PublishFailed, Unroutable
from agentbus.bus import BusStats
from agentbus.bus._rabbitmq._publisher import Publisher
from agentbus.envelopes import (
    BROADCAST,
    EventEnvelope,
    EventPayload,
    RequestEnvelope,
    RequestPayload,
    encode,
)
from support.wire import Answer, Published, Wire, wire

SENT_AT = datetime(2024, 5, 1, 12, 30, 15, tzinfo=UTC)


class FakeChannel:
    """The parts of a robust channel the publisher uses, over a miniature broker's channel."""

    is_closed = False

    def __init__(self, wired: Wire) -> None:
        self.wired = wired
        self.reopens = 0

    async def get_underlay_channel(self) -> aiormq.Channel:
        return self.wired.channel

    async def reopen(self) -> None:
        self.reopens += 1


class FakeExchange:
    name = "agentbus-test"


@contextlib.asynccontextmanager
async def publisher(
    answer: Callable[[Published], Answer] | None = None,
    stats: BusStats | None = None,
    site: str | None = None,
    timeout: float = 5.0,
) -> AsyncIterator[tuple[Publisher, FakeChannel]]:
    async with wire(answer=answer) as wired:
        channel = FakeChannel(wired)
        yield (
            Publisher(
                cast(AbstractRobustChannel, channel),
                cast(AbstractExchange, FakeExchange()),
                app_id="agentbus",
                max_size=1 << 20,
                default_timeout=timeout,
                stats=stats or BusStats(),
                is_open=lambda: True,
                site=site,
            ),
            channel,
        )


def request() -> RequestEnvelope:
    return RequestEnvelope(
        message_id="m-1",
        timestamp=SENT_AT,
        sender_id="client-1",
        receiver_id="summarizer",
        payload=RequestPayload(action="summarize", parameters={"text": "hi"}),
    )


def slots(properties: Basic.Properties) -> dict[str, object]:
    return {name: getattr(properties, name) for name in properties.__slots__}


async def test_publish_sends_the_properties_aio_pika_message_would() -> None:
    """A request goes out with the AMQP properties an aio_pika.Message of it would carry."""
    envelope = request()
    async with publisher() as (pub, channel):
        await pub.publish(envelope, reply_to="my-queue", ttl=2.5)

    [call] = channel.wired.published
    expected = aio_pika.Message(
        encode(envelope),
        content_type="application/json",
        message_id="m-1",
        type="request",
        timestamp=SENT_AT,
        app_id="agentbus",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        expiration=2.5,
        reply_to="my-queue",
    )
    assert call.body == expected.body
    assert slots(call.properties) == slots(expected.properties)
    assert call.exchange == "agentbus-test"
    assert call.routing_key == "agent.summarizer.request"
    assert call.mandatory is True
    assert call.drained is False  # on a confirm channel the confirm alone is awaited


async def test_a_broadcast_carries_its_site_and_nothing_else_does() -> None:
    """With a site (docs/sites.md), broadcasts say where they come from; requests do not."""
    beat = EventEnvelope(
        sender_id="worker-1",
        receiver_id=BROADCAST,
        payload=EventPayload(event_name="heartbeat", event_data={}),
    )
    async with publisher(site="eu") as (pub, channel):
        await pub.publish(beat, mandatory=False)
        await pub.publish(request())
    headers = [call.properties.headers for call in channel.wired.published]
    assert headers == [{"agentbus-site": "eu"}, {}]
    async with publisher() as (plain, plain_channel):
        await plain.publish(beat, mandatory=False)
    assert plain_channel.wired.published[0].properties.headers == {}


async def test_reply_is_transient_and_correlated() -> None:
    """A response goes to reply_to on the default exchange, transient, with correlation_id."""
    reply = request().response({"ok": True}, sender_id="summarizer")
    async with publisher() as (pub, channel):
        await pub.publish_reply(reply, "amq.rabbitmq.reply-to.abc")

    [call] = channel.wired.published
    properties = call.properties
    assert (call.exchange, call.routing_key) == ("", "amq.rabbitmq.reply-to.abc")
    assert call.mandatory is False  # direct reply-to bounces mandatory replies on 3.x
    assert properties.delivery_mode == 1
    assert properties.correlation_id == "m-1"
    assert properties.message_type == "response"
    assert properties.expiration is None


async def test_direct_reply_to_and_unconfirmed_publishes_go_on_the_plain_channel() -> None:
    """With a channel without confirms, replies to direct reply-to, requests naming it and
    publishes with ``confirm=False`` go on it; the rest stays on the confirm channel."""
    async with wire() as confirmed, wire(confirms=False) as unconfirmed:
        pub = Publisher(
            cast(AbstractRobustChannel, FakeChannel(confirmed)),
            cast(AbstractExchange, FakeExchange()),
            app_id="agentbus",
            max_size=1 << 20,
            default_timeout=5.0,
            stats=BusStats(),
            is_open=lambda: True,
            plain=cast(AbstractRobustChannel, FakeChannel(unconfirmed)),
        )
        reply = request().response({"ok": True}, sender_id="summarizer")

        await pub.publish_reply(reply, "amq.rabbitmq.reply-to.abc")
        await pub.publish_reply(reply, "agentbus.agent.client-1")
        await pub.publish(request())
        await pub.publish(request(), reply_to="amq.rabbitmq.reply-to", persistent=False)
        await pub.publish(request(), confirm=False)

    assert [c.routing_key for c in unconfirmed.published] == [
        "amq.rabbitmq.reply-to.abc",
        "agent.summarizer.request",
        "agent.summarizer.request",
    ]
    assert [c.properties.reply_to for c in unconfirmed.published[1:]] == [
        "amq.rabbitmq.reply-to",
        None,
    ]
    # No confirm: the write is waited for, and nothing is mandatory (no return would come).
    assert all(c.drained and not c.mandatory for c in unconfirmed.published)
    assert [c.routing_key for c in confirmed.published] == [
        "agentbus.agent.client-1",
        "agent.summarizer.request",
    ]
    assert [(c.drained, c.mandatory) for c in confirmed.published] == [(False, True)] * 2


async def test_a_tiny_ttl_still_expires_in_a_millisecond() -> None:
    """A TTL under a millisecond is sent as 1 ms, not as 0 (which means 'now or never')."""
    async with publisher() as (pub, channel):
        await pub.publish(request(), ttl=0.0001)

    assert channel.wired.published[0].properties.expiration == "1"


async def test_returned_message_raises_unroutable() -> None:
    """A mandatory publish the broker returns raises Unroutable, not counted as published."""
    stats = BusStats()
    async with publisher(answer=lambda _: "return", stats=stats) as (pub, _):
        with pytest.raises(Unroutable):
            await pub.publish(request())

    assert stats.published == 0


def nacking(cure: int | None, timeout: float = 5.0) -> Any:
    """A publisher whose broker nacks until its channel is reopened ``cure`` times."""
    channels: list[FakeChannel] = []

    def answer(_: Published) -> Answer:
        return "nack" if cure is None or channels[0].reopens < cure else "ack"

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[tuple[Publisher, FakeChannel]]:
        async with publisher(answer=answer, timeout=timeout) as (pub, channel):
            channels.append(channel)
            yield pub, channel

    return opened()


async def test_a_nacked_publish_goes_again_on_a_fresh_channel() -> None:
    """RabbitMQ 3.10 keeps nacking a channel that met a quorum election: reopen, publish again."""
    async with nacking(cure=1) as (pub, channel):
        await pub.publish(request())

    assert channel.reopens == 1
    first, again = channel.wired.published
    assert first.body == again.body  # the same message_id


async def test_concurrent_nacks_reopen_the_channel_once() -> None:
    """Publishes nacked together on one channel share one reopen."""
    async with nacking(cure=1) as (pub, channel):
        await asyncio.gather(*(pub.publish(request()) for _ in range(5)))

    assert channel.reopens == 1


async def test_a_publish_nacked_until_its_time_is_up_is_publish_failed() -> None:
    """A nack that will not clear ends as PublishFailed when the publish's time is up."""
    async with nacking(cure=None) as (pub, channel):
        with pytest.raises(PublishFailed, match="nack"):
            await pub.publish(request(), timeout=0.3)
    assert channel.reopens >= 1
