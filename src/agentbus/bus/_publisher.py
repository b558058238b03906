"""Publish envelopes with confirms; turn returns and transport faults into agentbus errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import aiormq.abc
import aiormq.exceptions
import structlog
from aio_pika.abc import AbstractExchange, AbstractIncomingMessage, AbstractRobustChannel
from pamqp.commands import Basic

from agentbus._exceptions import AgentBusError, BusClosed, ConnectionLost, Unroutable
from agentbus.bus._dispatch import IncomingMessage
from agentbus.bus._errors import translate
from agentbus.bus._stats import BusStats
from agentbus.bus._topology import reply_routing_key, routing_key
from agentbus.envelopes import Envelope, ErrorEnvelope, ResponseEnvelope, encode

__all__ = ["DIRECT_REPLY_TO", "Publisher"]

DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"
_DEFAULT_EXCHANGE = ""
_RETRY_BACKOFF = (0.05, 0.1, 0.2, 0.5)

_log = structlog.get_logger("agentbus.bus")


class Publisher:
    """Publishes on one confirm channel; retries a publish cut off by a reconnect."""

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
    ) -> None:
        self._channel = channel
        self._user_id = user_id  # the broker checks it is this connection's user
        self._exchange = exchange
        self._app_id = app_id
        self._max_size = max_size
        self._default_timeout = default_timeout
        self._stats = stats
        self._is_open = is_open

    async def publish(
        self,
        envelope: Envelope,
        *,
        reply_to: str | None = None,
        persistent: bool = True,
        ttl: float | None = None,
        timeout: float | None = None,
        mandatory: bool = True,
    ) -> None:
        """Publish ``envelope`` on the topic exchange with its contract routing key."""
        body = encode(envelope, max_size=self._max_size)
        await self._send(
            self._exchange.name,
            routing_key(envelope),
            body,
            self._properties(envelope, reply_to=reply_to, persistent=persistent, ttl=ttl),
            mandatory=mandatory,
            timeout=timeout,
        )

    async def publish_reply(
        self, reply: ResponseEnvelope | ErrorEnvelope, reply_to: str | None
    ) -> None:
        """Send a reply to the request's AMQP ``reply_to``, else to its sender's routing key.

        Raises:
            Unroutable: nobody is there to receive it (the requester has gone).
        """
        body = encode(reply, max_size=self._max_size)
        properties = self._properties(reply, reply_to=None, persistent=False, ttl=None)
        if reply_to:
            # Direct reply-to on RabbitMQ 3.x returns a mandatory reply even when it was
            # delivered, so replies to it go without the mandatory flag.
            mandatory = not reply_to.startswith(DIRECT_REPLY_TO)
            await self._send(
                _DEFAULT_EXCHANGE, reply_to, body, properties, mandatory=mandatory, timeout=None
            )
        else:
            key = reply_routing_key(reply.receiver_id)
            await self._send(
                self._exchange.name, key, body, properties, mandatory=True, timeout=None
            )

    async def republish(self, message: IncomingMessage, headers: Mapping[str, int]) -> None:
        """Publish a copy of a delivery, ``headers`` added, with its routing key again."""
        if not isinstance(message, AbstractIncomingMessage):
            raise TypeError(f"not a delivery from RabbitMQ: {message!r}")
        properties = message.properties
        properties.headers = {**(message.headers or {}), **headers}
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
        # The AMQP properties aio_pika.Message would make, built directly: a Message costs
        # about ten times as much (every attribute set goes through a lock check).
        return Basic.Properties(
            app_id=self._app_id,
            content_type="application/json",
            correlation_id=envelope.metadata.correlation_id,
            delivery_mode=2 if persistent else 1,
            expiration=None if ttl is None else str(int(max(ttl, 0.001) * 1000)),
            headers={},
            message_id=envelope.message_id,
            message_type=envelope.message_type,
            priority=0,
            reply_to=reply_to,
            timestamp=envelope.timestamp,
            user_id=self._user_id,
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
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout if timeout is not None else self._default_timeout)
        attempt = 0
        while True:
            if not self._is_open():
                raise BusClosed("the bus is closed")
            try:
                # What aio-pika's Exchange.publish does, without its Message object.
                if self._channel.is_closed:
                    raise aiormq.exceptions.ChannelInvalidStateError(f"{self._channel!r} is closed")
                channel = await self._channel.get_underlay_channel()
                # aiormq bounds the confirm wait itself; no second timer on the hot path.
                result = await channel.basic_publish(
                    body,
                    exchange=exchange,
                    routing_key=key,
                    properties=properties,
                    mandatory=mandatory,
                    timeout=max(deadline - loop.time(), 0.001),
                )
            except TimeoutError as exc:
                raise ConnectionLost(f"publish to {key!r} not confirmed in time") from exc
            except AgentBusError:
                raise
            except (Exception, asyncio.CancelledError) as exc:
                mapped = _lost_under_us(exc) or translate(exc)
                if mapped is None:
                    raise
                if not isinstance(mapped, ConnectionLost) or loop.time() >= deadline:
                    raise mapped from exc
                # The robust connection is restoring the channel: publish again. The same
                # message_id goes out, so a receiver that got the first copy drops this one.
                self._stats.publish_retries += 1
                delay = _RETRY_BACKOFF[min(attempt, len(_RETRY_BACKOFF) - 1)]
                attempt += 1
                _log.info("publish retry", routing_key=key, attempt=attempt, error=str(mapped))
                await asyncio.sleep(min(delay, max(deadline - loop.time(), 0)))
                continue
            if isinstance(result, aiormq.abc.DeliveredMessage):
                raise Unroutable(
                    f"no queue is bound for routing key {key!r}: nobody serves it",
                    details={"routing_key": key},
                )
            self._stats.published += 1
            self._stats.published_by_type[properties.message_type or "unknown"] += 1
            return


def _lost_under_us(exc: BaseException) -> ConnectionLost | None:
    # aiormq cancels the confirm future of a connection that dies under a publish: the
    # CancelledError is not ours (this task is not being cancelled), the connection is lost.
    if not isinstance(exc, asyncio.CancelledError):
        return None
    task = asyncio.current_task()
    if task is None or task.cancelling():
        return None
    return ConnectionLost(f"the connection to the broker was lost during a publish: {exc!r}")
