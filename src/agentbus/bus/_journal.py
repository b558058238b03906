"""Journals: append-only logs every process can read back, kept by the broker.

On RabbitMQ a journal is a stream (``x-queue-type: stream``): replicated on a cluster,
kept for ``max_age``, readable from any point by any number of readers without taking
anything away. In memory it is a list on the ``MemoryBroker``.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any, Final, Protocol

import aio_pika
import orjson
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection

from agentbus.bus._errors import map_transport_errors, through_reconnects

__all__ = ["Journal", "StreamJournal"]

_FENCE: Final = "_fence"
_READ_PREFETCH: Final = 500  # a stream consumer must have one
_READ_TIMEOUT: Final = 30.0
_RECONNECT_WAIT: Final = 30.0  # s: how long a journal call waits out a reconnect


class Journal(Protocol):
    """An append-only log of JSON records, kept by the broker."""

    async def append(self, record: dict[str, Any]) -> None:
        """Add ``record`` at the end, once the broker has it (confirmed)."""
        ...

    async def read(self, since: datetime) -> list[dict[str, Any]]:
        """Return, in order, the records appended from about ``since`` up to now."""
        ...


class StreamJournal:
    """A journal on a RabbitMQ stream."""

    def __init__(self, connection: AbstractRobustConnection, queue: str) -> None:
        self._connection = connection
        self._queue = queue
        self._channel: aio_pika.abc.AbstractChannel | None = None
        self._lock = asyncio.Lock()

    async def declare(self, max_age: str) -> None:
        """Declare the stream (``max_age`` like ``7D`` or ``12h``) and a channel to append.

        On a cluster whose nodes are coming back (the stream's leader not elected yet) the
        broker answers NOT_FOUND for a while: that is waited out like a reconnect.
        """
        await through_reconnects(lambda: self._declare(max_age), seconds=_RECONNECT_WAIT)

    async def _declare(self, max_age: str) -> None:
        with map_transport_errors():
            channel = await self._connection.channel(publisher_confirms=True)
            try:
                await channel.declare_queue(
                    self._queue,
                    durable=True,
                    arguments={"x-queue-type": "stream", "x-max-age": max_age},
                )
            except BaseException:
                if not channel.is_closed:
                    await channel.close()
                raise
            self._channel = channel

    async def append(self, record: dict[str, Any]) -> None:
        """Add ``record`` at the end, once the broker has it (confirmed).

        Through a reconnect the record is sent again: a record may be in twice.
        """
        body = orjson.dumps(record)
        await through_reconnects(lambda: self._append(body), seconds=_RECONNECT_WAIT)

    async def read(self, since: datetime) -> list[dict[str, Any]]:
        """Return, in order, the records appended from about ``since`` up to now.

        A fence record goes in first; reading stops when it comes back, so everything
        appended before the call is read, and nothing waits on a silent stream.
        """
        return await through_reconnects(lambda: self._read(since), seconds=_RECONNECT_WAIT)

    async def _append(self, body: bytes) -> None:
        assert self._channel is not None
        message = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        with map_transport_errors():
            await self._channel.default_exchange.publish(message, routing_key=self._queue)

    async def _read(self, since: datetime) -> list[dict[str, Any]]:
        fence = uuid.uuid4().hex
        await self._append(orjson.dumps({_FENCE: fence}))
        found: list[dict[str, Any]] = []
        done = asyncio.get_running_loop().create_future()

        async def take(message: AbstractIncomingMessage) -> None:
            await message.ack()
            record = orjson.loads(message.body)
            if record.get(_FENCE) == fence:
                if not done.done():
                    done.set_result(None)
            elif _FENCE not in record:
                found.append(record)

        async with self._lock:
            with map_transport_errors():
                channel = await self._connection.channel()
                try:
                    await channel.set_qos(prefetch_count=_READ_PREFETCH)
                    queue = await channel.get_queue(self._queue, ensure=False)
                    tag = await queue.consume(take, arguments={"x-stream-offset": since})
                    async with asyncio.timeout(_READ_TIMEOUT):
                        await done
                    await queue.cancel(tag)
                finally:
                    await channel.close()
        return found
