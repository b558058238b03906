"""The frames seam (bus/_rabbitmq/_frames.py) against aiormq's real channel and pamqp's bytes.

Each test here fails the day aiormq or pamqp changes what the seam leans on: the frames'
bytes, the channel lock aiormq numbers publishes under, where a confirm and a return are
looked up (``confirmations``, ``message_id_delivery_tag``), and the writer's frame type.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import aiormq.abc
import pamqp.frame
import pytest
from aiormq.exceptions import ChannelInvalidStateError
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import constants
from pamqp.body import ContentBody
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from agentbus.bus._rabbitmq import _frames
from agentbus.bus._rabbitmq._properties import message_properties
from support.wire import Published, Wire, wire

SENT_AT = datetime(2026, 11, 29, 19, 0, 0, tzinfo=UTC)
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
EXCHANGES = st.from_regex(constants.DOMAIN_REGEX["exchange-name"], fullmatch=True).filter(
    lambda name: len(name) <= 127
)


def properties(message_id: str = "m-1") -> Basic.Properties:
    return message_properties(
        app_id="agentbus",
        message_id=message_id,
        message_type="request",
        timestamp=SENT_AT,
        correlation_id=None,
        reply_to=None,
        persistent=True,
        ttl=None,
        user_id=None,
    )


async def publish(wired: Wire, **changes: Any) -> object:
    """Publish through the seam on ``wired``'s channel: a request to ``work`` unless changed."""
    options: dict[str, Any] = {
        "exchange": "x",
        "routing_key": "work",
        "mandatory": True,
        "properties": properties(),
        "body": b"{}",
        "timeout": 5.0,
    }
    return await _frames.publish(wired.channel, **(options | changes))


@settings(max_examples=200, deadline=None)
@given(
    channel=st.integers(1, 2047),
    exchange=EXCHANGES,
    routing_key=NAMES,
    mandatory=st.booleans(),
    body=st.binary(max_size=300),
    max_content=st.integers(1, 120),
)
def test_publish_frames_are_pamqps_bytes(
    channel: int, exchange: str, routing_key: str, mandatory: bool, body: bytes, max_content: int
) -> None:
    """Method, content header and body frames (split as aiormq splits) equal pamqp's."""
    props = properties()
    chunks = [body[i : i + max_content] for i in range(0, len(body), max_content)]
    expected = b"".join(
        pamqp.frame.marshal(frame, channel)
        for frame in (
            Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory),
            ContentHeader(0, len(body), props),
            *(ContentBody(chunk) for chunk in chunks),
        )
    )
    ours = _frames.publish_frames(
        channel,
        exchange=exchange,
        routing_key=routing_key,
        mandatory=mandatory,
        properties=props,
        body=body,
        max_content=max_content,
    )
    assert ours == expected


@given(channel=st.integers(1, 2047), tag=st.integers(0, 2**63 - 1), multiple=st.booleans())
def test_ack_frames_are_pamqps_bytes(channel: int, tag: int, multiple: bool) -> None:
    """A Basic.Ack frame equals pamqp's, for any tag pamqp takes (a signed long long)."""
    expected = pamqp.frame.marshal(Basic.Ack(delivery_tag=tag, multiple=multiple), channel)
    assert _frames.ack_frame(channel, tag, multiple=multiple) == expected


@pytest.mark.parametrize(
    ("exchange", "routing_key"),
    [("", "é" * 128), ("a*b", "work"), ("x" * 128, "work"), ("ünicode", "work")],
)
def test_what_pamqp_refuses_is_refused(exchange: str, routing_key: str) -> None:
    """A routing key over 255 bytes, or an exchange name pamqp's Basic.Publish refuses, is
    a ValueError before anything is queued, as it is through aiormq."""
    with pytest.raises((ValueError, TypeError)):
        Basic.Publish(exchange=exchange, routing_key=routing_key).marshal()
    with pytest.raises(ValueError, match=r"exchange name|255 bytes"):
        _frames.publish_frames(
            1,
            exchange=exchange,
            routing_key=routing_key,
            mandatory=False,
            properties=properties(),
            body=b"",
            max_content=100,
        )


async def test_publishes_mixed_with_aiormqs_own_find_their_confirms_and_returns() -> None:
    """Publishes through the seam and through aiormq's basic_publish, concurrently on one
    channel whose write queue is nearly always full, each get their own answer: the
    broker numbers them as written, so a numbering out of order would cross them."""

    def answer(published: Published) -> str:
        return "return" if published.routing_key == "nobody" else "ack"

    async with wire(room=2, answer=answer) as w:

        async def ours(i: int) -> object:
            return await publish(
                w,
                routing_key="nobody" if i % 3 == 0 else "work",
                properties=properties(f"ours-{i}"),
                body=f"ours-{i}".encode(),
            )

        async def theirs(i: int) -> object:
            return await w.channel.basic_publish(
                f"theirs-{i}".encode(),
                exchange="x",
                routing_key="nobody" if i % 4 == 0 else "work",
                mandatory=True,
                properties=properties(f"theirs-{i}"),
            )

        results = await asyncio.gather(*(f(i) for i in range(60) for f in (ours, theirs)))

        returned = sorted(
            r.body.decode() for r in results if isinstance(r, aiormq.abc.DeliveredMessage)
        )
        expected = sorted(
            [f"ours-{i}" for i in range(60) if i % 3 == 0]
            + [f"theirs-{i}" for i in range(60) if i % 4 == 0]
        )
        assert returned == expected
        assert len(w.published) == 120
        assert not w.channel.confirmations
        assert not w.channel.message_id_delivery_tag


async def test_a_publish_waits_while_aiormq_holds_its_channel_lock() -> None:
    """The seam numbers a publish only when aiormq's channel lock is free: held by aiormq
    (its ``lock``), the publish waits, and cancelled there it leaves nothing behind."""
    async with wire() as w:
        async with w.channel.lock:
            waiting = asyncio.create_task(publish(w))
            await asyncio.sleep(0)  # it runs up to the lock
            assert not waiting.done()
            assert w.channel.delivery_tag == 0
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        assert w.channel.delivery_tag == 0
        assert not w.channel.confirmations
        assert not w.channel.message_id_delivery_tag
        assert w.published == []


async def test_an_unconfirmed_publish_times_out_and_a_late_confirm_is_ignored() -> None:
    """No confirm in ``timeout``: TimeoutError; the confirm that comes later harms nothing."""
    async with wire(answer=lambda _: None) as w:
        with pytest.raises(TimeoutError):
            await publish(w, timeout=0.05)
        assert not w.channel.message_id_delivery_tag
        w.channel.frames.put_nowait((0, Basic.Ack(delivery_tag=1)))
        await w.channel.frames.join()
        assert not w.channel.confirmations
        assert not w.channel.is_closed


async def test_a_nack_raises_aiormqs_delivery_error() -> None:
    """A nacked publish raises what aiormq raises for it (the bus translates it)."""
    async with wire(answer=lambda _: "nack") as w:
        with pytest.raises(aiormq.exceptions.DeliveryError):
            await publish(w)


async def test_a_channel_without_confirms_waits_for_the_write() -> None:
    """Without confirms the publish returns None once the writer has written its frames,
    and numbers nothing."""
    async with wire(confirms=False) as w:
        result = await publish(
            w, exchange="", routing_key="amq.rabbitmq.reply-to.abc", mandatory=False
        )
        assert result is None
        [published] = w.published
        assert published.drained
        assert w.channel.delivery_tag == 0


async def test_a_large_body_goes_in_frames_of_the_connections_size() -> None:
    """A body over the frame size is split as aiormq splits it, and arrives whole."""
    async with wire(frame_max=4096) as w:
        body = bytes(range(256)) * 100
        await publish(w, mandatory=False, body=body)
        [published] = w.published
        assert published.body == body
        assert published.frames == -(-len(body) // w.channel.max_content_size)


async def test_a_publish_without_message_id_gets_one() -> None:
    """As aiormq does: a message_id is set where none is, so a return finds its publish."""
    async with wire(answer=lambda _: "return") as w:
        props = properties()
        props.message_id = None
        result = await publish(w, routing_key="nobody", properties=props)
        assert isinstance(result, aiormq.abc.DeliveredMessage)
        assert w.published[0].properties.message_id


async def test_acks_reach_the_writer_and_a_closed_channel_refuses() -> None:
    """An ack is queued for the writer as its Basic.Ack frame; on a closed channel it raises."""
    async with wire() as w:
        await _frames.ack(w.channel, 41)
        await _frames.ack(w.channel, 42, multiple=True)
        await w.channel.connection.write_queue.join()
        assert w.acks == [(41, False), (42, True)]
        await w.channel.close()
        with pytest.raises(ChannelInvalidStateError):
            await _frames.ack(w.channel, 43)
        with pytest.raises(ChannelInvalidStateError):
            await publish(w)
