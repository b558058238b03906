"""Publish envelopes to a ``MemoryBroker``: the in-memory twin of ``agentbus.bus``'s Publisher."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Unpack

from agentbus._exceptions import BusClosed
from agentbus._topology import reply_destination
from agentbus.bus import BusStats, PublishOptions, routing_key
from agentbus.bus.internal import IncomingMessage, publication
from agentbus.envelopes import Envelope, ErrorEnvelope, ResponseEnvelope, encode
from agentbus.testing._consumer import MemoryDelivery
from agentbus.testing._memory_broker import MemoryBroker
from agentbus.testing._message import MemoryMessage

__all__ = ["MemoryPublisher"]


class MemoryPublisher:
    """Publishes encoded envelopes to one topic exchange of a ``MemoryBroker``."""

    def __init__(
        self,
        broker: MemoryBroker,
        *,
        exchange: str,
        app_id: str,
        max_size: int,
        stats: BusStats,
        is_open: Callable[[], bool],
        user_id: str | None = None,
    ) -> None:
        self._broker = broker
        self._user_id = user_id
        self._exchange = exchange
        self._app_id = app_id
        self._max_size = max_size
        self._stats = stats
        self._is_open = is_open

    @property
    def answers_direct(self) -> bool:
        """Whether a request may name direct reply-to: not on the in-memory broker."""
        return False

    async def publish(self, envelope: Envelope, **options: Unpack[PublishOptions]) -> None:
        """Publish ``envelope`` on the topic exchange with its contract routing key."""
        # ``timeout`` bounds the wait for a publisher confirm; in memory the routing
        # decision is immediate, so there is nothing to wait on.
        reply_to, persistent, ttl, _, mandatory, _ = publication(options)
        body = encode(envelope, max_size=self._max_size)
        message = self._message(envelope, body, reply_to=reply_to, persistent=persistent, ttl=ttl)
        await self._send(self._exchange, routing_key(envelope), message, mandatory=mandatory)

    async def publish_reply(
        self,
        reply: ResponseEnvelope | ErrorEnvelope,
        reply_to: str | None,
        body: bytes | None = None,
    ) -> None:
        """Send a reply to the request's AMQP ``reply_to``, else to its sender's routing key.

        ``body``: the reply already encoded, when the caller has it.

        Raises:
            Unroutable: nobody is there to receive it (the requester has gone).
        """
        if body is None:
            body = encode(reply, max_size=self._max_size)
        message = self._message(reply, body, reply_to=None, persistent=False, ttl=None)
        exchange, key, mandatory = reply_destination(reply, reply_to, self._exchange)
        await self._send(exchange, key, message, mandatory=mandatory)

    async def republish(self, message: IncomingMessage, headers: Mapping[str, int]) -> None:
        """Publish a copy of a delivery, ``headers`` added, with its routing key again."""
        if not isinstance(message, MemoryDelivery):
            raise TypeError(f"not a delivery from a MemoryBroker: {message!r}")
        copy = replace(message.message, headers={**(message.headers or {}), **headers})
        await self._send(self._exchange, message.routing_key, copy, mandatory=True)

    def _message(
        self,
        envelope: Envelope,
        body: bytes,
        *,
        reply_to: str | None,
        persistent: bool,
        ttl: float | None,
    ) -> MemoryMessage:
        return MemoryMessage(
            body,
            message_id=envelope.message_id,
            correlation_id=envelope.metadata.correlation_id,
            reply_to=reply_to,
            type=envelope.message_type,
            content_type="application/json",
            app_id=self._app_id,
            timestamp=envelope.timestamp,
            persistent=persistent,
            expiration=max(ttl, 0.001) if ttl is not None else None,
            user_id=self._user_id,
        )

    async def _send(
        self, exchange: str, key: str, message: MemoryMessage, *, mandatory: bool
    ) -> None:
        if not self._is_open():
            raise BusClosed("the bus is closed")
        self._broker.publish(message, key, exchange=exchange, mandatory=mandatory)
        self._stats.published += 1
        self._stats.published_by_type[message.type or "unknown"] += 1
        # A real publish waits for the broker's confirm: yield to the loop as it would.
        await asyncio.sleep(0)
