"""The publish seam (bus/_rabbitmq/_amqp.py) gives the same header bytes as aio_pika.Message.

The hand-built properties skip ``aio_pika.Message``; this fails the day aio-pika starts
sending something else for the same message (a new default property, another TTL rule).
A return coming back as aiormq's ``DeliveredMessage`` is proven on a real broker by the
chaos tier's ``test_nobody_serves_fails_at_once``, the re-arming of feed consumers after a
reconnect by ``tests/integration/test_feed_rabbitmq.py``, and the consuming side (every
field a ``Delivery`` reads equal to aio-pika's) by ``tests/integration/test_delivery_seam.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import aio_pika
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from agentbus.bus._rabbitmq._properties import Properties, message_properties

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


_SHORT = st.text(max_size=40) | st.text(alphabet="é€", min_size=80, max_size=200)
_PROPERTIES = st.fixed_dictionaries(
    {},
    optional={
        "content_type": _SHORT,
        "content_encoding": _SHORT,
        "headers": st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=10)),
        "delivery_mode": st.sampled_from([1, 2]),
        "priority": st.integers(0, 255),
        "correlation_id": _SHORT,
        "reply_to": _SHORT,
        "expiration": _SHORT,
        "message_id": _SHORT,
        "timestamp": st.datetimes(
            min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
        )
        | st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)),
        "message_type": _SHORT,
        "user_id": _SHORT,
        "app_id": _SHORT,
    },
)


@settings(max_examples=400, deadline=None)
@given(_PROPERTIES)
def test_properties_marshal_to_pamqps_bytes_or_fail_as_it_does(values: dict[str, Any]) -> None:
    """``Properties.marshal`` skips pamqp's generic walk: the same bytes for any values (a
    string too long for a short string, naive times taken as UTC), or pamqp's own error."""
    theirs: bytes | type[Exception]
    try:
        theirs = Basic.Properties(**values).marshal()
    except TypeError as exc:
        theirs = type(exc)
    if isinstance(theirs, bytes):
        assert Properties(**values).marshal() == theirs
    else:
        with pytest.raises(theirs):
            Properties(**values).marshal()


def test_properties_are_pamqps_to_every_reader() -> None:
    """pamqp reads ``__slots__`` as the properties' names (iteration, ``len``, equality),
    and aiormq puts default properties in place of falsy ones: ours are pamqp's to both."""
    ours = message_properties(
        app_id="agentbus", message_id="m-1", message_type="request", timestamp=SENT_AT,
        correlation_id=None, reply_to=None, persistent=True, ttl=None, user_id=None,
    )  # fmt: skip
    theirs = Basic.Properties(**dict(ours))
    assert ours
    assert len(ours) == len(theirs) == len(Basic.Properties.__slots__)
    assert dict(ours) == dict(theirs)
    assert ours == theirs
