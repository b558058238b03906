"""The audit stream on RabbitMQ: writing the trail's records, and reading them back.

Records go to a RabbitMQ stream (``<exchange>.audit``, ``x-queue-type: stream``): a
durable, replicated, append-only log that any number of readers replay from any offset
or time (``agentbus audit``), kept as long as its retention policy says. The trail
(``agentbus.security.AuditTrail``) writes through ``RabbitAuditStream``: one message a
batch, published without confirms, with the recorder's AMQP ``user_id`` when senders
are verified.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, Final

import aiormq.exceptions
import orjson
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel, AbstractRobustConnection

from agentbus._config import Settings
from agentbus._exceptions import ConfigurationError
from agentbus._topology import Topology
from agentbus.bus._rabbitmq._amqp import basic_publish, scratch_channel
from agentbus.bus._rabbitmq._connection import open_connection
from agentbus.bus._rabbitmq._errors import map_transport_errors
from agentbus.bus._rabbitmq._properties import message_properties
from agentbus.security import AuditEntry, AuditPosition, StreamOffset, audit_entries

__all__ = ["RabbitAuditStream", "read_audit"]

_PREFETCH: Final = 256
_PUBLISH_TIMEOUT: Final = 5.0


class RabbitAuditStream:
    """The audit stream ``name`` on the bus's connection, as ``AuditTrail`` writes to it."""

    def __init__(
        self,
        connection: AbstractRobustConnection,
        name: str,
        *,
        create: bool,
        app_id: str,
        user_id: str | None,
    ) -> None:
        self.name = name
        self._connection = connection
        self._create = create
        self._app_id = app_id
        self._user_id = user_id
        self._channel: AbstractRobustChannel | None = None

    async def open(self) -> bool:
        """Find the stream (with ``create``, declare it), then open a channel to write on."""
        # Passive first: that needs no configure permission, which a service's broker user
        # has not on the stream an operator made. A missing stream closes only the probe.
        found = await self._declare(passive=True)
        if not found and not (self._create and await self._declare(passive=False)):
            return False
        self._channel = await self._connection.channel(publisher_confirms=False)
        return True

    async def _declare(self, *, passive: bool) -> bool:
        try:
            async with scratch_channel(self._connection) as probe:
                await probe.declare_queue(
                    self.name, durable=True, passive=passive, arguments={"x-queue-type": "stream"}
                )
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        except aiormq.exceptions.ChannelPreconditionFailed:
            pass  # there, declared otherwise (its own retention arguments): write to it
        return True

    async def write(self, batch: list[dict[str, Any]]) -> None:
        """Publish ``batch`` as one message (a JSON array) to the stream."""
        assert self._channel is not None
        properties = message_properties(
            app_id=self._app_id,
            message_id=batch[0]["message_id"] or "",
            message_type="audit",
            timestamp=datetime.now(UTC),
            correlation_id=None,
            reply_to=None,
            persistent=True,
            ttl=None,
            user_id=self._user_id,
        )
        await basic_publish(
            self._channel,
            exchange="",
            routing_key=self.name,
            body=orjson.dumps(batch),
            properties=properties,
            mandatory=False,
            timeout=_PUBLISH_TIMEOUT,
        )

    async def aclose(self) -> None:
        """Close the channel written on, if one was opened."""
        if self._channel is not None:
            with contextlib.suppress(Exception):
                await self._channel.close()


async def read_audit(
    settings: Settings,
    *,
    start: StreamOffset = "first",
    after: AuditPosition | None = None,
    limit: int | None = None,
    idle: float | None = 2.0,
) -> AsyncIterator[AuditEntry]:
    """Yield the audit stream's records from ``start``, in order.

    Args:
        settings: The broker (and TLS) settings and the exchange whose stream to read.
        start: Where to start (RabbitMQ's ``x-stream-offset``).
        after: Read on after this record (a reader's last ``position``), instead of
            ``start``: a reader that stops and starts again misses and repeats nothing.
        limit: Stop after this many records.
        idle: Stop when no record came for this many seconds; None: follow forever.

    Raises:
        BrokerUnavailable: the broker cannot be reached.
        AccessRefused: this user may not read the stream.
        ConfigurationError: the stream does not exist.
    """
    connection = await open_connection(settings)
    try:
        stream = Topology(settings.exchange).audit_stream
        arrived = await _consume(connection, stream, start if after is None else after[0])
        count = 0
        while limit is None or count < limit:
            message = await _next(arrived, idle)
            if message is None:
                return
            for entry in audit_entries(
                message.body, _offset(message), message.user_id, after=after
            ):
                if limit is not None and count >= limit:
                    return
                yield entry
                count += 1
                # A reconnect consumes from the origin again: what was read is skipped.
                after = entry.position
    finally:
        await connection.close()


async def _consume(
    connection: AbstractRobustConnection, stream: str, origin: StreamOffset
) -> asyncio.Queue[AbstractIncomingMessage]:
    """Consume ``stream`` from ``origin``; return the queue its messages arrive in."""
    arrived: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()

    async def take(message: AbstractIncomingMessage) -> None:
        # A stream is read with acks (they move the consumer's credit), never nacks:
        # what is prefetched and not read when the reader stops goes with the channel.
        await message.ack()
        arrived.put_nowait(message)

    with map_transport_errors():
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=_PREFETCH)
        try:
            queue = await channel.get_queue(stream)
        except aiormq.exceptions.ChannelNotFoundEntity as exc:
            raise ConfigurationError(
                f"there is no audit stream {stream!r}: import the definitions "
                "('agentbus definitions') or run agents with AGENTBUS_AUDIT=true"
            ) from exc
        await queue.consume(take, arguments={"x-stream-offset": origin})
    return arrived


async def _next(
    arrived: asyncio.Queue[AbstractIncomingMessage], idle: float | None
) -> AbstractIncomingMessage | None:
    """The next message, or None when none came for ``idle`` seconds."""
    try:
        async with asyncio.timeout(idle):
            return await arrived.get()
    except TimeoutError:
        return None


def _offset(message: AbstractIncomingMessage) -> int:
    found = (message.headers or {}).get("x-stream-offset")
    return found if isinstance(found, int) else -1
