"""Unit tests of the RabbitMQ Publisher against a fake channel: what goes on the wire."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import aio_pika
import pytest
from aio_pika.abc import AbstractExchange, AbstractRobustChannel
from aiormq.abc import AbstractChannel, DeliveredMessage
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from agentbus import Unroutable
from agentbus.bus._publisher import Publisher
from agentbus.bus._stats import BusStats
from agentbus.envelopes import RequestEnvelope, RequestPayload, encode

SENT_AT = datetime(2024, 5, 1, 12, 30, 15, tzinfo=UTC)


class FakeUnderlay:
    """Records basic_publish calls and answers with ``result``."""

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
    result: object = None, stats: BusStats | None = None
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
