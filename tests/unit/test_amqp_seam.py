"""The publish seam (bus/_amqp.py) against aio-pika: the same header bytes as aio_pika.Message.

The hand-built properties skip ``aio_pika.Message``; this fails the day aio-pika starts
sending something else for the same message (a new default property, another TTL rule).
A return coming back as aiormq's ``DeliveredMessage`` is proven on a real broker by the
chaos tier's ``test_nobody_serves_fails_at_once``, the re-arming of feed consumers after a
reconnect by ``tests/integration/test_feed_rabbitmq.py``, and the consuming side (every
field a ``Delivery`` reads equal to aio-pika's) by ``tests/integration/test_delivery_seam.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import aio_pika
import pytest
from pamqp.header import ContentHeader

from agentbus.bus._amqp import message_properties

SENT_AT = datetime(2026, 11, 24, 20, 12, 40, tzinfo=UTC)
BODY = b'{"hello": "world"}'

CASES = [
    pytest.param({}, id="plain"),
    pytest.param({"persistent": False}, id="transient"),
    pytest.param({"ttl": 2.5}, id="ttl"),
    pytest.param({"ttl": 3600.0}, id="hour-ttl"),
    pytest.param({"correlation_id": "m-0", "persistent": False}, id="reply"),
    pytest.param({"reply_to": "agentbus.instance.a-1"}, id="reply-to"),
    pytest.param({"user_id": "billing"}, id="user-id"),
]


def _ours(values: dict[str, object]) -> bytes:
    properties = message_properties(
        app_id="agentbus",
        message_id="m-1",
        message_type="request",
        timestamp=SENT_AT,
        correlation_id=values.get("correlation_id"),  # type: ignore[arg-type]
        reply_to=values.get("reply_to"),  # type: ignore[arg-type]
        persistent=bool(values.get("persistent", True)),
        ttl=values.get("ttl"),  # type: ignore[arg-type]
        user_id=values.get("user_id"),  # type: ignore[arg-type]
    )
    return ContentHeader(0, len(BODY), properties).marshal()


def _aio_pika(values: dict[str, object]) -> bytes:
    persistent = bool(values.get("persistent", True))
    message = aio_pika.Message(
        BODY,
        app_id="agentbus",
        content_type="application/json",
        message_id="m-1",
        type="request",
        timestamp=SENT_AT,
        correlation_id=values.get("correlation_id"),  # type: ignore[arg-type]
        reply_to=values.get("reply_to"),  # type: ignore[arg-type]
        delivery_mode=(
            aio_pika.DeliveryMode.PERSISTENT if persistent else aio_pika.DeliveryMode.NOT_PERSISTENT
        ),
        expiration=values.get("ttl"),  # type: ignore[arg-type]
        user_id=values.get("user_id"),  # type: ignore[arg-type]
    )
    return ContentHeader(0, len(BODY), message.properties).marshal()


@pytest.mark.parametrize("values", CASES)
def test_hand_built_properties_marshal_to_aio_pika_messages_bytes(
    values: dict[str, object],
) -> None:
    """The content header frame is byte for byte what aio_pika.Message would send."""
    assert _ours(values) == _aio_pika(values)


def test_a_ttl_under_a_millisecond_is_sent_as_one_millisecond_on_purpose() -> None:
    """By design: aio-pika would send "0" (expire unless deliverable at once)."""
    assert _ours({"ttl": 0.0001}) == _aio_pika({"ttl": 0.001})
