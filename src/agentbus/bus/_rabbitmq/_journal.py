"""Journals on RabbitMQ: each a stream (``x-queue-type: stream``).

Replicated on a cluster, kept for ``max_age``, readable from any point by any number of
readers without taking anything away. The seam it fills is ``Journal`` (``bus/_hooks.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import datetime
from typing import Any, Final

import aio_pika
import aiormq.exceptions
import orjson
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustConnection

from agentbus._exceptions import ConnectionLost
from agentbus.bus._rabbitmq._amqp import scratch_channel
from agentbus.bus._rabbitmq._errors import map_transport_errors, through_reconnects

__all__ = ["StreamJournal"]

_FENCE: Final = "_fence"
_READ_PREFETCH: Final = 500  # a stream consumer must have one
_READ_TIMEOUT: Final = 30.0
_RECONNECT_WAIT: Final = 30.0  # s: how long a journal call waits out a reconnect


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
            # Declared on a channel closed at once, not on the channel that appends: a
            # robust channel declares its queues again at every reconnect, and while the
            # stream's home node is down (a cluster coming back) that declare fails the
            # whole reconnect. The attempt has restored the consumers before it fails, so
            # every request they took meanwhile (a leader's run_plan) goes back, counted
            # towards its queue's x-delivery-limit, once per attempt: 0.5 s apart.
            async with scratch_channel(self._connection) as scratch:
                await scratch.declare_queue(
                    self._queue,
                    durable=True,
                    arguments={"x-queue-type": "stream", "x-max-age": max_age},
                )
            if self._channel is None:
                self._channel = await self._connection.channel(publisher_confirms=True)

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
        message = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        with map_transport_errors():
            if self._channel is None:
                self._channel = await self._connection.channel(publisher_confirms=True)
            channel = self._channel
            try:
                await channel.default_exchange.publish(message, routing_key=self._queue)
            except aiormq.exceptions.DeliveryError as exc:
                # Nacked while the stream's leader is being elected (a cluster coming
                # back): RabbitMQ 3.10 goes on nacking on that channel, so the next try
                # takes a new one.
                self._channel = None
                with contextlib.suppress(Exception):
                    await channel.close()
                raise ConnectionLost(
                    f"the journal's write was refused, to try again: {exc}"
                ) from exc

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
