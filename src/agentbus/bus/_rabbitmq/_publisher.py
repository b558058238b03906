"""Publish envelopes with confirms; turn returns and transport faults into agentbus errors."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from typing import Unpack

from aio_pika.abc import AbstractExchange, AbstractRobustChannel
from pamqp.commands import Basic
from pamqp.common import FieldTable

from agentbus._exceptions import AgentBusError, BusClosed, ConnectionLost, Unroutable
from agentbus._logging import get_logger
from agentbus._topology import DIRECT_REPLY_TO, SITE_HEADER, reply_destination, routing_key
from agentbus.bus._delivery import IncomingMessage
from agentbus.bus._options import PublishOptions, publication
from agentbus.bus._rabbitmq._amqp import (
    Delivery,
    DirectReplyTo,
    basic_publish,
    is_cancelled_under_us,
    is_nack,
)
from agentbus.bus._rabbitmq._errors import translate
from agentbus.bus._rabbitmq._properties import message_properties
from agentbus.bus._stats import BusStats
from agentbus.envelopes import BROADCAST, Envelope, ErrorEnvelope, ResponseEnvelope, encode

__all__ = ["Publisher"]
_RETRY_BACKOFF = (0.05, 0.1, 0.2, 0.5)

_log = get_logger("agentbus.bus")


class Publisher:
    """Publishes on one confirm channel; retries a publish cut off by a reconnect.

    ``plain``, a channel without confirms, takes what a confirm says nothing useful of,
    each confirm costing a frame and a wake-up (about a tenth of a transient request's
    p50 on each side): replies to direct reply-to, which RabbitMQ hands straight to the
    requester's channel or drops (they are never mandatory); requests naming direct
    reply-to, transient (its consumer is on this channel, as RabbitMQ requires), whose
    answer a reconnect loses anyway; and what is published with ``confirm=False``.
    """

    def __init__(
        self,
        channel: AbstractRobustChannel,
        exchange: AbstractExchange,
        *,
        app_id: str,
        max_size: int,
        default_timeout: float,
        stats: BusStats,
        is_open: Callable[[], bool],
        user_id: str | None = None,
        site: str | None = None,
        plain: AbstractRobustChannel | None = None,
    ) -> None:
        self._channel = channel
        self._plain = plain
        # Broadcasts carry the site they come from: each site's beacons sort heartbeats by it.
        self._site_headers: FieldTable | None = {SITE_HEADER: site} if site else None
        self._user_id = user_id  # the broker checks it is this connection's user
        self._exchange = exchange
        self._app_id = app_id
        self._max_size = max_size
        self._default_timeout = default_timeout
        self._stats = stats
        self._is_open = is_open
        self._reopening = asyncio.Lock()
        self._channel_generation = 0
        self.direct: DirectReplyTo | None = None
        """Takes the replies to requests sent with ``reply_to`` direct reply-to."""

    @property
    def answers_direct(self) -> bool:
        """Whether a request may name direct reply-to: its consumer was started."""
        return self.direct is not None

    async def publish(self, envelope: Envelope, **options: Unpack[PublishOptions]) -> None:
        """Publish ``envelope`` on the topic exchange with its contract routing key.

        ``reply_to`` direct reply-to (``amq.rabbitmq.reply-to``) has the replies come to
        ``direct``, without a queue.
        """
        reply_to, persistent, ttl, timeout, mandatory, confirm = publication(options)
        body = encode(envelope, max_size=self._max_size)
        direct = reply_to == DIRECT_REPLY_TO
        plain = self._plain if direct or not confirm else None
        await self._send(
            options.get("exchange") or self._exchange.name,
            routing_key(envelope),
            body,
            self._properties(envelope, reply_to=reply_to, persistent=persistent, ttl=ttl),
            # aiormq drops a return on a channel without confirms (it logs an error).
            mandatory=mandatory and plain is None,
            timeout=timeout,
            direct=self.direct if direct else None,
            channel=plain,
        )

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
        properties = self._properties(reply, reply_to=None, persistent=False, ttl=None)
        exchange, key, mandatory = reply_destination(reply, reply_to, self._exchange.name)
        direct = self._plain is not None and key.startswith(DIRECT_REPLY_TO)
        await self._send(
            exchange,
            key,
            body,
            properties,
            mandatory=mandatory,
            timeout=None,
            channel=self._plain if direct else None,
        )

    async def republish(self, message: IncomingMessage, headers: Mapping[str, int]) -> None:
        """Publish a copy of a delivery, ``headers`` added, with its routing key again."""
        if not isinstance(message, Delivery):
            raise TypeError(f"not a delivery from RabbitMQ: {message!r}")
        properties = copy.copy(message.properties)
        properties.headers = {**(properties.headers or {}), **headers}
        key = message.routing_key or ""
        await self._send(
            self._exchange.name, key, message.body, properties, mandatory=True, timeout=None
        )

    def _properties(
        self,
        envelope: Envelope,
        *,
        reply_to: str | None,
        persistent: bool,
        ttl: float | None,
    ) -> Basic.Properties:
        return message_properties(
            app_id=self._app_id,
            message_id=envelope.message_id,
            message_type=envelope.message_type,
            timestamp=envelope.timestamp,
            correlation_id=envelope.metadata.correlation_id,
            reply_to=reply_to,
            persistent=persistent,
            ttl=ttl,
            user_id=self._user_id,
            headers=self._site_headers if envelope.receiver_id == BROADCAST else None,
        )

    async def _send(
        self,
        exchange: str,
        key: str,
        body: bytes,
        properties: Basic.Properties,
        *,
        mandatory: bool,
        timeout: float | None,
        direct: DirectReplyTo | None = None,
        channel: AbstractRobustChannel | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout if timeout is not None else self._default_timeout)
        attempt = 0
        while True:
            if not self._is_open():
                raise BusClosed("the bus is closed")
            generation = self._channel_generation
            try:
                returned = await basic_publish(
                    channel or self._channel,
                    exchange=exchange,
                    routing_key=key,
                    body=body,
                    properties=properties,
                    mandatory=mandatory,
                    timeout=max(deadline - loop.time(), 0.001),
                    direct=direct,
                )
            except TimeoutError as exc:
                raise ConnectionLost(f"publish to {key!r} not confirmed in time") from exc
            except AgentBusError:
                raise
            except (Exception, asyncio.CancelledError) as exc:
                delay = self._retry_delay(exc, attempt, deadline - loop.time())
                # The robust connection is restoring the channel: publish again. The same
                # message_id goes out, so a receiver that got the first copy drops this one.
                self._stats.publish_retries += 1
                attempt += 1
                _log.info("publish retry", routing_key=key, attempt=attempt, error=repr(exc))
                if is_nack(exc):
                    await self._fresh_channel(generation)
                await asyncio.sleep(delay)
                continue
            if returned:
                raise Unroutable(
                    f"no queue is bound for routing key {key!r}: nobody serves it",
                    details={"routing_key": key},
                )
            self._stats.published += 1
            self._stats.published_by_type[properties.message_type or "unknown"] += 1
            return

    async def _fresh_channel(self, generation: int) -> None:
        # RabbitMQ 3.10 nacks every later publish on a channel that published to a quorum
        # queue during its leader election (tests/cluster pins it): go on with a fresh one.
        # Publishes nacked together reopen it once.
        async with self._reopening:
            if generation == self._channel_generation:
                self._channel_generation += 1
                await self._channel.reopen()

    @staticmethod
    def _retry_delay(exc: BaseException, attempt: int, left: float) -> float:
        # How long to wait before publishing again; raise if the failure is not worth it.
        mapped: AgentBusError | None
        # A nack (a quorum queue without a leader, for one) is retried like a lost
        # connection, on a fresh channel, until the publish's time is up.
        if is_nack(exc):
            mapped = translate(exc)  # PublishFailed, once the time is up
            if left > 0:
                return min(_RETRY_BACKOFF[min(attempt, len(_RETRY_BACKOFF) - 1)], left)
        elif is_cancelled_under_us(exc):
            mapped = ConnectionLost(
                f"the connection to the broker was lost during a publish: {exc!r}"
            )
        else:
            mapped = translate(exc)
        if mapped is None:
            raise exc
        if not isinstance(mapped, ConnectionLost) or left <= 0:
            raise mapped from exc
        return min(_RETRY_BACKOFF[min(attempt, len(_RETRY_BACKOFF) - 1)], left)
