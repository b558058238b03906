"""Leases on RabbitMQ: a queue's single active consumer, and one token message held.

The queue (durable; quorum where the bus's queues are) has ``x-single-active-consumer``:
the broker delivers to its first consumer alone, and to the next one once that one goes.
``x-max-length: 1`` (``drop-head``) keeps one token waiting, however many were put in:
every bus asking puts one in (a lost token is so put back), the holder cycles its own.
The holder's prefetch of 1 leaves the waiting token where it is until the held one goes.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

import aio_pika
import aiormq.abc
import aiormq.exceptions
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection
from pamqp.commands import Basic

from agentbus._exceptions import ConnectionLost
from agentbus._topology import lease_arguments
from agentbus.bus._lease import Lease
from agentbus.bus._rabbitmq._errors import map_transport_errors

__all__ = ["open_lease"]

_TOKEN: Final = b'{"token": true}'


async def open_lease(
    connection: AbstractRobustConnection, queue: str, lease: Lease, *, quorum: bool
) -> None:
    """Declare ``queue``, put a token in, and consume it for ``lease``."""
    arguments = lease_arguments(quorum=quorum)
    with map_transport_errors():
        channel = await connection.channel(publisher_confirms=True)
        await channel.set_qos(prefetch_count=1)
        await channel.declare_queue(queue, durable=True, arguments=arguments)
        holder = _Holder(channel, queue, lease)
        lease._attach(holder)
        await holder.start()


class _Holder:
    """The lease's consumer: the token's delivery grants the lease, its channel's close
    revokes it; after a reconnect it consumes again, in line behind the active one."""

    def __init__(self, channel: AbstractRobustChannel, queue: str, lease: Lease) -> None:
        self._channel = channel
        self._queue = queue
        self._lease = lease
        self._held: aiormq.abc.DeliveredMessage | None = None
        self._underlay: aiormq.abc.AbstractChannel | None = None

    async def start(self) -> None:
        await self._put_token()
        self._channel.reopen_callbacks.add(self._reopened)
        await self._consume()

    async def confirm(self) -> None:
        # Active is what counts (the broker delivers to nobody else while this consumer
        # is there), not the token in hand: between a cycle's ack and the new token's
        # delivery there is none.
        underlay = self._underlay
        if underlay is None or underlay.is_closed:
            raise ConnectionLost(f"the channel of lease {self._lease.name!r} is closed")
        with map_transport_errors():
            await underlay.basic_qos(prefetch_count=1)  # a round trip on its channel

    async def cycle(self) -> None:
        held = self._held
        if held is None:
            return
        with map_transport_errors():
            await self._put_token()
            assert isinstance(held.delivery, Basic.Deliver)
            self._held = None
            await held.channel.basic_ack(held.delivery.delivery_tag or 0)

    async def close(self) -> None:
        self._channel.reopen_callbacks.discard(self._reopened)
        with contextlib.suppress(aiormq.exceptions.AMQPError, ConnectionError):
            # Closing the channel puts the held token back, for the next consumer.
            await self._channel.close()
        self._held = None

    async def _put_token(self) -> None:
        message = aio_pika.Message(_TOKEN, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        await self._channel.default_exchange.publish(message, routing_key=self._queue)

    async def _consume(self) -> None:
        underlay = await self._channel.get_underlay_channel()
        underlay.closing.add_done_callback(lambda _: self._lease._revoke())
        self._underlay = underlay
        await underlay.basic_consume(self._queue, self._take)

    async def _reopened(self, *_: Any) -> None:
        # The robust channel is back (a reconnect): in line again, and a token put in
        # should the broker have lost its own (a classic queue's node, say).
        await self._put_token()
        await self._consume()

    async def _take(self, message: aiormq.abc.DeliveredMessage) -> None:
        self._held = message
        self._lease._grant()
