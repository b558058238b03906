"""Where the registry hears heartbeats: a no-ack queue of its own on RabbitMQ.

A heartbeat is transient and expires after a few intervals anyway; losing one is
harmless, and the next one a second later says the same. So beats skip the bus's
general path (a task per delivery, a full envelope validation, an ack frame each)
and come raw, unacknowledged, from a queue that only the registry reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import aio_pika
import structlog
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection, ExchangeType
from aiormq.abc import DeliveredMessage

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError
from agentbus.agents import HEARTBEAT

__all__ = ["HEARTBEAT_KEY", "HeartbeatFeed"]

HEARTBEAT_KEY: Final = f"broadcast.event.{HEARTBEAT}"
# Beats waiting longer than this many are stale anyway: the oldest are dropped first.
_MAX_WAITING: Final = 100_000

_log = structlog.get_logger("agentbus.registry")


class HeartbeatFeed:
    """Consumes heartbeat bodies from the registry's own queue, without acks.

    ``on_body`` runs synchronously for each message, in the order they came, with the
    message's AMQP ``user_id`` (``None`` if it has none).
    """

    def __init__(
        self, settings: Settings, agent_id: str, on_body: Callable[[bytes, str | None], None]
    ) -> None:
        self._settings = settings
        self._agent_id = agent_id
        self._on_body = on_body
        self._connection: AbstractRobustConnection | None = None
        self._channel: AbstractRobustChannel | None = None
        self.queue_name = f"{settings.exchange}.heartbeats.{agent_id}"

    def __repr__(self) -> str:
        state = "open" if self._connection is not None else "closed"
        return f"<HeartbeatFeed queue={self.queue_name!r} {state}>"

    async def open(self) -> None:
        """Connect, declare and bind the queue, and start consuming it."""
        settings = self._settings
        try:
            self._connection = await aio_pika.connect_robust(
                settings.url,
                timeout=settings.connect_timeout,
                reconnect_interval=settings.reconnect_interval,
                heartbeat=settings.heartbeat,
                client_properties={"connection_name": f"agentbus:{self._agent_id}:heartbeats"},
            )
            channel = self._channel = await self._connection.channel()
            exchange = await channel.declare_exchange(
                settings.exchange, ExchangeType.TOPIC, durable=True
            )
            # Exclusive: gone with the connection; the robust channel declares it again.
            queue = await channel.declare_queue(
                self.queue_name,
                durable=False,
                exclusive=True,
                arguments={"x-max-length": _MAX_WAITING, "x-overflow": "drop-head"},
            )
            await queue.bind(exchange, routing_key=HEARTBEAT_KEY)
            channel.reopen_callbacks.add(self._consume_again)
            await self._consume()
        except Exception as exc:
            await self.aclose()
            raise AgentBusError(f"the heartbeat queue could not be consumed: {exc!r}") from exc

    async def aclose(self) -> None:
        """Close the connection; the queue goes with it."""
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None:
            try:
                await connection.close()
            except Exception as exc:  # the connection is going away anyway
                _log.debug("heartbeat connection close failed", error=repr(exc))

    async def _consume(self) -> None:
        assert self._channel is not None
        # aiormq's channel, not aio-pika's queue.consume: no IncomingMessage and no
        # second task per beat, which is most of what a beat costs.
        channel = await self._channel.get_underlay_channel()
        await channel.basic_consume(self.queue_name, self._deliver, no_ack=True)

    async def _consume_again(self, *_: Any) -> None:
        # The robust channel restored the queue and its binding after a reconnect,
        # but only consumers started through aio-pika: this one is started again here.
        await self._consume()

    async def _deliver(self, message: DeliveredMessage) -> None:
        try:
            self._on_body(message.body, message.header.properties.user_id)
        except Exception:
            _log.exception("heartbeat not handled")
