"""Unit tests of the RabbitMQ Publisher against a fake channel: what goes on the wire."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, cast

import aio_pika
import aiormq.exceptions
import pytest
from aio_pika.abc import AbstractExchange, AbstractRobustChannel
from aiormq.abc import AbstractChannel, DeliveredMessage
from pamqp.commands import Basic
from pamqp.header import ContentHeader

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

SENT_AT = datetime(2024, 5, 1, 12, 30, 15, tzinfo=UTC)


class FakeUnderlay:
    """Records basic_publish calls and answers with ``result``."""

    publisher_confirms = True

    def __init__(self, result: object) -> None:
        self.result = result
        self.calls: list[dict[str, Any]] = []

    async def basic_publish(self, body: bytes, **kwargs: Any) -> object:
        self.calls.append({"body": body, **kwargs})
        return self.result


class FakeChannel:
    """The parts of a robust channel the publisher uses."""

    is_closed = False

    def __init__(self, underlay: FakeUnderlay) -> None:
        self.underlay = underlay

    async def get_underlay_channel(self) -> FakeUnderlay:
        return self.underlay


class FakeExchange:
    name = "agentbus-test"


def publisher(
    result: object = None, stats: BusStats | None = None, site: str | None = None
) -> tuple[Publisher, FakeUnderlay]:
    underlay = FakeUnderlay(Basic.Ack() if result is None else result)
    return (
        Publisher(
            cast(AbstractRobustChannel, FakeChannel(underlay)),
            cast(AbstractExchange, FakeExchange()),
            app_id="agentbus",
            max_size=1 << 20,
            default_timeout=5.0,
            stats=stats or BusStats(),
            is_open=lambda: True,
            site=site,
        ),
        underlay,
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
    pub, underlay = publisher()
    envelope = request()

    await pub.publish(envelope, reply_to="my-queue", ttl=2.5)

    [call] = underlay.calls
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
    assert call["body"] == expected.body
    assert slots(call["properties"]) == slots(expected.properties)
    assert call["exchange"] == "agentbus-test"
    assert call["routing_key"] == "agent.summarizer.request"
    assert call["mandatory"] is True
    assert call["wait"] is False  # on a confirm channel the confirm alone is awaited


async def test_a_broadcast_carries_its_site_and_nothing_else_does() -> None:
    """With a site (docs/sites.md), broadcasts say where they come from; requests do not."""
    pub, underlay = publisher(site="eu")
    beat = EventEnvelope(
        sender_id="worker-1",
        receiver_id=BROADCAST,
        payload=EventPayload(event_name="heartbeat", event_data={}),
    )
    await pub.publish(beat, mandatory=False)
    await pub.publish(request())
    headers = [call["properties"].headers for call in underlay.calls]
    assert headers == [{"agentbus-site": "eu"}, {}]
    plain, plain_calls = publisher()
    await plain.publish(beat, mandatory=False)
    assert plain_calls.calls[0]["properties"].headers == {}


async def test_reply_is_transient_and_correlated() -> None:
    """A response goes to reply_to on the default exchange, transient, with correlation_id."""
    pub, underlay = publisher()
    reply = request().response({"ok": True}, sender_id="summarizer")

    await pub.publish_reply(reply, "amq.rabbitmq.reply-to.abc")

    [call] = underlay.calls
    properties = call["properties"]
    assert (call["exchange"], call["routing_key"]) == ("", "amq.rabbitmq.reply-to.abc")
    assert call["mandatory"] is False  # direct reply-to bounces mandatory replies on 3.x
    assert properties.delivery_mode == 1
    assert properties.correlation_id == "m-1"
    assert properties.message_type == "response"
    assert properties.expiration is None


async def test_direct_reply_to_and_unconfirmed_publishes_go_on_the_plain_channel() -> None:
    """With a channel without confirms, replies to direct reply-to, requests naming it and
    publishes with ``confirm=False`` go on it; the rest stays on the confirm channel."""
    confirmed = FakeUnderlay(Basic.Ack())
    unconfirmed = FakeUnderlay(None)
    unconfirmed.publisher_confirms = False
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

    assert [c["routing_key"] for c in unconfirmed.calls] == [
        "amq.rabbitmq.reply-to.abc",
        "agent.summarizer.request",
        "agent.summarizer.request",
    ]
    assert [c["properties"].reply_to for c in unconfirmed.calls[1:]] == [
        "amq.rabbitmq.reply-to",
        None,
    ]
    # No confirm: the write is waited for, and nothing is mandatory (no return would come).
    assert all(c["wait"] is True and c["mandatory"] is False for c in unconfirmed.calls)
    assert [c["routing_key"] for c in confirmed.calls] == [
        "agentbus.agent.client-1",
        "agent.summarizer.request",
    ]
    assert [(c["wait"], c["mandatory"]) for c in confirmed.calls] == [(False, True)] * 2


async def test_a_tiny_ttl_still_expires_in_a_millisecond() -> None:
    """A TTL under a millisecond is sent as 1 ms, not as 0 (which means 'now or never')."""
    pub, underlay = publisher()

    await pub.publish(request(), ttl=0.0001)

    assert underlay.calls[0]["properties"].expiration == "1"


async def test_returned_message_raises_unroutable() -> None:
    """A mandatory publish the broker returns raises Unroutable, not counted as published."""
    returned = DeliveredMessage(
        delivery=Basic.Return(reply_code=312, reply_text="NO_ROUTE"),
        header=ContentHeader(),
        body=b"{}",
        channel=cast(AbstractChannel, None),
    )
    stats = BusStats()
    pub, _ = publisher(result=returned, stats=stats)

    with pytest.raises(Unroutable):
        await pub.publish(request())

    assert stats.published == 0


class NackingUnderlay(FakeUnderlay):
    """Nacks (as aiormq raises it) until its channel is reopened ``cure`` times."""

    def __init__(self, cure: int | None) -> None:
        super().__init__(Basic.Ack())
        self.cure = cure
        self.reopens = 0

    async def basic_publish(self, body: bytes, **kwargs: Any) -> object:
        self.calls.append({"body": body, **kwargs})
        if self.cure is None or self.reopens < self.cure:
            raise aiormq.exceptions.DeliveryError(None, Basic.Nack(delivery_tag=1))
        return self.result


class ReopeningChannel(FakeChannel):
    async def reopen(self) -> None:
        assert isinstance(self.underlay, NackingUnderlay)
        self.underlay.reopens += 1


def nacking_publisher(cure: int | None, timeout: float = 5.0) -> tuple[Publisher, NackingUnderlay]:
    underlay = NackingUnderlay(cure)
    pub = Publisher(
        cast(AbstractRobustChannel, ReopeningChannel(underlay)),
        cast(AbstractExchange, FakeExchange()),
        app_id="agentbus",
        max_size=1 << 20,
        default_timeout=timeout,
        stats=BusStats(),
        is_open=lambda: True,
    )
    return pub, underlay


async def test_a_nacked_publish_goes_again_on_a_fresh_channel() -> None:
    """RabbitMQ 3.10 keeps nacking a channel that met a quorum election: reopen, publish again."""
    pub, underlay = nacking_publisher(cure=1)

    await pub.publish(request())

    assert underlay.reopens == 1
    assert len(underlay.calls) == 2
    assert underlay.calls[0]["body"] == underlay.calls[1]["body"]  # the same message_id


async def test_concurrent_nacks_reopen_the_channel_once() -> None:
    """Publishes nacked together on one channel share one reopen."""
    pub, underlay = nacking_publisher(cure=1)

    await asyncio.gather(*(pub.publish(request()) for _ in range(5)))

    assert underlay.reopens == 1


async def test_a_publish_nacked_until_its_time_is_up_is_publish_failed() -> None:
    """A nack that will not clear ends as PublishFailed when the publish's time is up."""
    pub, underlay = nacking_publisher(cure=None)

    with pytest.raises(PublishFailed, match="nack"):
        await pub.publish(request(), timeout=0.3)
    assert underlay.reopens >= 1
