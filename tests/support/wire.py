"""A real aiormq ``Channel`` on a connection of the tests' making: a broker in miniature.

What the channel writes is read back off the connection's write queue with pamqp and
recorded as ``Published`` or acks; each confirmed publish is numbered in the order it was
written, as RabbitMQ numbers it, and answered through the channel's own reader (an ack, a
nack, or a return followed by its ack). So the publish seam (``bus/_rabbitmq/_frames.py``)
runs against aiormq's real bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Literal

import aiormq
import aiormq.abc
import pamqp.frame
from aiormq.base import Base
from pamqp.body import ContentBody
from pamqp.commands import Basic
from pamqp.header import ContentHeader

Answer = Literal["ack", "nack", "return"] | None
"""How the miniature broker answers a confirmed publish; ``None``: never."""


@dataclass
class Published:
    """A publish as it reached the broker."""

    exchange: str
    routing_key: str
    mandatory: bool
    properties: Basic.Properties
    body: bytes
    drained: bool
    """Whether the publisher waits for the write (a channel without confirms)."""
    frames: int = 0
    """Body frames it came in."""


class _Connection(Base):
    def __init__(self, loop: asyncio.AbstractEventLoop, frame_max: int, room: int) -> None:
        super().__init__(loop=loop)
        self.publisher_confirms = True
        self.connection_tune = SimpleNamespace(frame_max=frame_max)
        self.write_queue: asyncio.Queue[aiormq.abc.ChannelFrame] = asyncio.Queue(maxsize=room)

    def __str__(self) -> str:
        return "miniature"

    async def _on_close(self, exc: BaseException | None = None) -> None:
        return None


@dataclass
class Wire:
    """The miniature broker's record: publishes in the order written, and acks."""

    channel: aiormq.Channel
    published: list[Published] = field(default_factory=list)
    acks: list[tuple[int, bool]] = field(default_factory=list)
    payloads: list[bytes] = field(default_factory=list)
    answer: Callable[[Published], Answer] = lambda _: "ack"


@contextlib.asynccontextmanager
async def wire(
    *,
    confirms: bool = True,
    frame_max: int = 131_072,
    room: int = 10,
    answer: Callable[[Published], Answer] | None = None,
) -> AsyncIterator[Wire]:
    """A channel (numbered 1) and the broker reading what it writes, for one test."""
    loop = asyncio.get_running_loop()
    connection = _Connection(loop, frame_max, room)
    # As aio-pika opens it: a returned message is the confirm's result, not raised.
    channel = aiormq.Channel(
        connection,  # type: ignore[arg-type]
        1,
        publisher_confirms=confirms,
        on_return_raises=False,
    )
    record = Wire(channel)
    if answer is not None:
        record.answer = answer
    broker = asyncio.create_task(_broker(connection.write_queue, record))
    try:
        yield record
    finally:
        broker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await broker
        await channel.close()


async def _broker(queue: asyncio.Queue[aiormq.abc.ChannelFrame], record: Wire) -> None:
    numbered = 0
    while True:
        written = await queue.get()
        queue.task_done()
        record.payloads.append(written.payload)
        frames = _frames(written.payload)
        written.drain()
        while frames:
            frame = frames.pop(0)
            if isinstance(frame, Basic.Ack):
                record.acks.append((frame.delivery_tag, frame.multiple))
                continue
            assert isinstance(frame, Basic.Publish), frame
            header = frames.pop(0)
            assert isinstance(header, ContentHeader)
            body, parts = b"", 0
            while len(body) < header.body_size:
                part = frames.pop(0)
                assert isinstance(part, ContentBody)
                body, parts = body + part.value, parts + 1
            published = Published(
                frame.exchange,
                frame.routing_key,
                frame.mandatory,
                header.properties,
                body,
                drained=written.drain_future is not None,
                frames=parts,
            )
            record.published.append(published)
            if record.channel.publisher_confirms:
                numbered += 1
                _answer(record, numbered, published, header)


def _answer(record: Wire, tag: int, published: Published, header: ContentHeader) -> None:
    how = record.answer(published)
    put = record.channel.frames.put_nowait
    if how == "return":
        put((0, Basic.Return(reply_code=312, reply_text="NO_ROUTE", exchange="", routing_key="")))
        put((0, header))
        put((0, ContentBody(published.body)))
    if how in ("ack", "return"):
        put((0, Basic.Ack(delivery_tag=tag)))
    elif how == "nack":
        put((0, Basic.Nack(delivery_tag=tag)))


def _frames(payload: bytes) -> list[object]:
    frames = []
    while payload:
        used, _, frame = pamqp.frame.unmarshal(payload)
        frames.append(frame)
        payload = payload[used:]
    return frames
