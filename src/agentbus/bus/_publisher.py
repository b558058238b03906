"""Publish envelopes with confirms; turn returns and transport faults into agentbus errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aio_pika
import aiormq.abc
import structlog
from aio_pika.abc import AbstractExchange, AbstractRobustChannel

from agentbus._exceptions import AgentBusError, BusClosed, ConnectionLost, Unroutable
from agentbus.bus._errors import translate
from agentbus.bus._stats import BusStats
from agentbus.bus._topology import reply_routing_key, routing_key
from agentbus.envelopes import Envelope, ErrorEnvelope, ResponseEnvelope, encode

__all__ = ["DIRECT_REPLY_TO", "Publisher"]

DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"
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
            self._exchange,
            routing_key(envelope),
            self._message(envelope, body, reply_to=reply_to, persistent=persistent, ttl=ttl),
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
        message = self._message(reply, body, reply_to=None, persistent=False, ttl=None)
        if reply_to:
            # Direct reply-to on RabbitMQ 3.x returns a mandatory reply even when it was
            # delivered, so replies to it go without the mandatory flag.
            mandatory = not reply_to.startswith(DIRECT_REPLY_TO)
            exchange = self._channel.default_exchange
            await self._send(exchange, reply_to, message, mandatory=mandatory, timeout=None)
        else:
            key = reply_routing_key(reply.receiver_id)
            await self._send(self._exchange, key, message, mandatory=True, timeout=None)

    def _message(
        self,
        envelope: Envelope,
        body: bytes,
        *,
        reply_to: str | None,
        persistent: bool,
        ttl: float | None,
    ) -> aio_pika.Message:
        return aio_pika.Message(
            body,
            content_type="application/json",
            message_id=envelope.message_id,
            correlation_id=envelope.metadata.correlation_id,
            type=envelope.message_type,
            timestamp=envelope.timestamp,
            app_id=self._app_id,
            user_id=self._user_id,
            delivery_mode=(
                aio_pika.DeliveryMode.PERSISTENT
                if persistent
                else aio_pika.DeliveryMode.NOT_PERSISTENT
            ),
            expiration=max(ttl, 0.001) if ttl is not None else None,
            reply_to=reply_to,
        )

    async def _send(
        self,
        exchange: AbstractExchange,
        key: str,
        message: aio_pika.Message,
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
                # aiormq bounds the confirm wait itself; no second timer on the hot path.
                result = await exchange.publish(
                    message, key, mandatory=mandatory, timeout=max(deadline - loop.time(), 0.001)
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
            self._stats.published_by_type[message.type or "unknown"] += 1
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
