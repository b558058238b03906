"""Publishes and acks written straight onto aiormq's connection write queue.

aiormq's ``Channel.basic_publish`` spends more on its own bookkeeping than on the frames: a
``Countdown``, an ``asyncio.timeout``, two async context managers (the channel lock and
its close guard), pamqp's generic frame walk and a ``BytesIO`` per message. Its
``basic_ack`` marshals the same 21 bytes through pamqp each time. Here the frames are
packed by hand (the bytes equal pamqp's) and queued for aiormq's writer, with the
confirm registered where aiormq's own reader resolves it (``Channel.confirmations``, and
``message_id_delivery_tag`` for a returned message).

Ordering is what makes a confirm find its publish: the broker numbers publishes in the
order it reads them, and aiormq numbers them under its channel lock, queueing before it
lets go. The fast path numbers and queues in one step with no await between, and only
while that lock is free and the queue has room; otherwise it takes the lock itself and
waits for room as aiormq does. So aiormq's own publishes on the same channel interleave
safely with these.

``tests/unit/test_frames_seam.py`` pins every assumption made here of aiormq and pamqp.
"""

from __future__ import annotations

import asyncio
import functools
import struct
import uuid
from typing import cast

import aiormq
import aiormq.abc
from aiormq.exceptions import ChannelInvalidStateError
from pamqp import constants
from pamqp.commands import Basic

__all__ = ["ack", "ack_frame", "publish", "publish_frames"]

_FRAME_END = b"\xce"
_FRAME_HEADER = struct.Struct(">BHI").pack
_PUBLISH_METHOD = struct.Struct(">HHH").pack(60, 40, 0)  # Basic.Publish, reserved ticket 0
_CONTENT_HEADER = struct.Struct(">HHQ").pack  # class 60, weight 0, body size
_ACK = struct.Struct(">BHIHHQBc").pack  # a whole Basic.Ack method frame
_LENGTH = struct.Struct(">B").pack
_METHOD, _HEADER, _BODY = 1, 2, 3
_EXCHANGE_NAME = constants.DOMAIN_REGEX["exchange-name"]


def _short_string(value: str) -> bytes:
    data = value.encode()
    if len(data) > 255:
        raise ValueError(f"{value[:40]!r}...: longer than 255 bytes")
    return _LENGTH(len(data)) + data


@functools.lru_cache(maxsize=256)
def _exchange(name: str) -> bytes:
    # pamqp's own check of Basic.Publish (a bad name would otherwise close the channel).
    if len(name) > 127 or not _EXCHANGE_NAME.fullmatch(name):
        raise ValueError(f"{name!r}: not a valid exchange name")
    return _short_string(name)


def publish_frames(
    channel: int,
    *,
    exchange: str,
    routing_key: str,
    mandatory: bool,
    properties: Basic.Properties,
    body: bytes,
    max_content: int,
) -> bytes:
    """Return a publish's method, content header and body frames as pamqp marshals them.

    ``max_content``: the most body bytes a frame carries (aiormq's ``max_content_size``).
    """
    method = (
        _PUBLISH_METHOD
        + _exchange(exchange)
        + _short_string(routing_key)
        + (b"\x01" if mandatory else b"\x00")
    )
    header = _CONTENT_HEADER(60, 0, len(body)) + properties.marshal()
    parts: list[bytes | memoryview] = [
        _FRAME_HEADER(_METHOD, channel, len(method)),
        method,
        _FRAME_END,
        _FRAME_HEADER(_HEADER, channel, len(header)),
        header,
        _FRAME_END,
    ]
    if len(body) <= max_content:
        if body:
            parts += (_FRAME_HEADER(_BODY, channel, len(body)), body, _FRAME_END)
        return b"".join(parts)
    view = memoryview(body)  # a large body is copied once, into the payload
    for start in range(0, len(body), max_content):
        chunk = view[start : start + max_content]
        parts += (_FRAME_HEADER(_BODY, channel, len(chunk)), chunk, _FRAME_END)
    return b"".join(parts)


def ack_frame(channel: int, delivery_tag: int, *, multiple: bool = False) -> bytes:
    """Return a ``Basic.Ack`` method frame as pamqp marshals it."""
    return _ACK(_METHOD, channel, 13, 60, 80, delivery_tag, multiple, _FRAME_END)


def _lock(channel: aiormq.Channel) -> asyncio.Lock:
    # The lock aiormq's basic_publish numbers and queues under (its ``lock`` property
    # wraps it in an async context manager that costs more than the rest of a publish).
    return cast(asyncio.Lock, channel._Channel__lock)  # type: ignore[attr-defined]


def _frame(payload: bytes, drain: asyncio.Future[object] | None) -> aiormq.abc.ChannelFrame:
    return aiormq.abc.ChannelFrame(payload=payload, should_close=False, drain_future=drain)


async def publish(
    channel: aiormq.Channel,
    *,
    exchange: str,
    routing_key: str,
    mandatory: bool,
    properties: Basic.Properties,
    body: bytes,
    timeout: float | None,
) -> object:
    """Publish on ``channel``; return the confirm (a returned message's ``DeliveredMessage``
    where it came back), or ``None`` on a channel without confirms once the frames are written.

    Raises:
        TimeoutError: no confirm within ``timeout`` seconds.
        ChannelInvalidStateError: the channel is closed.
    """
    if channel.is_closed:
        raise ChannelInvalidStateError(f"{channel!r} closed")
    message_id = properties.message_id
    if not message_id:  # as aiormq does: a returned message is matched by its message_id
        message_id = properties.message_id = uuid.uuid4().hex
    payload = publish_frames(
        channel.number,
        exchange=exchange,
        routing_key=routing_key,
        mandatory=mandatory,
        properties=properties,
        body=body,
        max_content=channel.max_content_size,
    )
    # What the publish waits for: the broker's confirm, or on a channel without
    # confirms the writer having written the frames.
    confirms = channel.publisher_confirms
    waited: asyncio.Future[object] = channel.create_future()
    frame = _frame(payload, None if confirms else waited)
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    try:
        tag = await _queued(channel, frame, waited if confirms else None, message_id, deadline)
    except BaseException:
        waited.cancel()
        raise
    try:
        result = await _waited(waited, deadline, loop)
        return result if confirms else None
    finally:
        if tag is not None and channel.message_id_delivery_tag.get(message_id) == tag:
            del channel.message_id_delivery_tag[message_id]


async def _queued(
    channel: aiormq.Channel,
    frame: aiormq.abc.ChannelFrame,
    confirmation: asyncio.Future[object] | None,
    message_id: str,
    deadline: float | None,
) -> int | None:
    # Queued and numbered with no await between: the broker numbers them as written.
    lock = _lock(channel)
    if not (lock.locked() or channel.write_queue.full()):
        channel.write_queue.put_nowait(frame)
        return _numbered(channel, confirmation, message_id)
    async with asyncio.timeout_at(deadline), lock:
        await channel.write_queue.put(frame)
        return _numbered(channel, confirmation, message_id)


def _numbered(
    channel: aiormq.Channel, confirmation: asyncio.Future[object] | None, message_id: str
) -> int | None:
    if confirmation is None:  # a channel without confirms numbers nothing
        return None
    channel.delivery_tag += 1
    tag = channel.delivery_tag
    channel.confirmations[tag] = confirmation
    channel.message_id_delivery_tag[message_id] = tag
    return tag


async def _waited(
    future: asyncio.Future[object], deadline: float | None, loop: asyncio.AbstractEventLoop
) -> object:
    # One timer, not an ``asyncio.timeout`` (a context object, a reschedule and an
    # uncancel on every publish): it cancels the future, and the time tells why.
    if deadline is None:
        return await future
    timer = loop.call_at(deadline, future.cancel)
    try:
        return await future
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if loop.time() >= deadline and task is not None and not task.cancelling():
            raise TimeoutError("publish not confirmed in time") from None
        raise
    finally:
        timer.cancel()


async def ack(channel: aiormq.Channel, delivery_tag: int, *, multiple: bool = False) -> None:
    """Acknowledge ``delivery_tag`` on ``channel`` (queued for the writer, not waited for).

    Raises:
        ChannelInvalidStateError: the channel is closed.
    """
    if channel.is_closed:
        raise ChannelInvalidStateError(f"{channel!r} closed")
    frame = ack_frame(channel.number, delivery_tag, multiple=multiple)
    await channel.write_queue.put(_frame(frame, None))
