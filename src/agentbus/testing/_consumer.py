"""Consumers of the in-memory broker's queues, and the deliveries they settle."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol, TypeAlias

from agentbus._exceptions import ConnectionLost
from agentbus._logging import get_logger
from agentbus.testing._message import DeadLetterReason, MemoryMessage, Queued

__all__ = ["ConsumerCallback", "ConsumerState", "MemoryConsumer", "MemoryDelivery"]

ConsumerCallback: TypeAlias = Callable[["MemoryDelivery"], Awaitable[Any]]
"""Receives one delivery; it runs in a task of its own."""

_log = get_logger("agentbus.testing")


class _Broker(Protocol):
    # What a consumer asks of the MemoryBroker that made it (no import: no cycle).
    def _next_tag(self) -> int: ...
    def _track(self, task: asyncio.Task[None]) -> None: ...
    def _detach(self, consumer: MemoryConsumer) -> None: ...
    def _requeue(self, name: str, queued: Queued) -> None: ...
    def _dead_letter(self, name: str, queued: Queued, reason: DeadLetterReason) -> None: ...
    def _schedule(self, name: str) -> None: ...


class ConsumerState(enum.Enum):
    """Where a consumer is in its life."""

    ACTIVE = "active"
    CANCELLED = "cancelled"
    CLOSED = "closed"


class MemoryDelivery:
    """One delivery of a message to a consumer; settle it once: ack, reject or nack."""

    def __init__(self, consumer: MemoryConsumer, queued: Queued, delivery_tag: int) -> None:
        self._consumer = consumer
        self._queued = queued
        self.delivery_tag = delivery_tag
        self._settled = False

    def __repr__(self) -> str:
        return (
            f"<MemoryDelivery queue={self.queue!r} routing_key={self.routing_key!r} "
            f"tag={self.delivery_tag} settled={self._settled}>"
        )

    @property
    def is_settled(self) -> bool:
        """Whether the delivery was acked, rejected, nacked or requeued by a close."""
        return self._settled

    @property
    def message(self) -> MemoryMessage:
        """The message delivered."""
        return self._queued.message

    @property
    def body(self) -> bytes:
        """The message body."""
        return self._queued.message.body

    @property
    def message_id(self) -> str | None:
        """The AMQP ``message_id`` property."""
        return self._queued.message.message_id

    @property
    def correlation_id(self) -> str | None:
        """The AMQP ``correlation_id`` property."""
        return self._queued.message.correlation_id

    @property
    def reply_to(self) -> str | None:
        """The AMQP ``reply_to`` property."""
        return self._queued.message.reply_to

    @property
    def type(self) -> str | None:
        """The AMQP ``type`` property."""
        return self._queued.message.type

    @property
    def headers(self) -> Mapping[str, object] | None:
        """The AMQP ``headers`` table."""
        return self._queued.message.headers

    @property
    def user_id(self) -> str | None:
        """The AMQP ``user_id`` property."""
        return self._queued.message.user_id

    @property
    def routing_key(self) -> str:
        """The routing key the message was published with."""
        return self._queued.routing_key

    @property
    def exchange(self) -> str:
        """The exchange the message was published to (``""``: the default exchange)."""
        return self._queued.exchange

    @property
    def redelivered(self) -> bool:
        """Whether the message was delivered before and requeued."""
        return self._queued.redelivered

    @property
    def queue(self) -> str:
        """The queue the message came from."""
        return self._consumer.queue

    async def ack(self) -> None:
        """Acknowledge the message: the queue forgets it."""
        self._consumer._settle(self, "ack")

    async def reject(self, requeue: bool = False) -> None:
        """Refuse the message: requeue it, or dead-letter it (dropped without a DLX)."""
        self._consumer._settle(self, "requeue" if requeue else "reject")

    async def nack(self, *, requeue: bool = True) -> None:
        """Refuse the message, requeued by default (as AMQP ``basic.nack``)."""
        self._consumer._settle(self, "requeue" if requeue else "reject")


class MemoryConsumer:
    """A consumer of one queue, holding at most ``prefetch`` unacked deliveries (0: no bound).

    ``cancel`` stops new deliveries and leaves the unacked ones to be settled, like
    ``basic.cancel``; ``close`` also requeues them, like closing the channel.
    """

    def __init__(
        self,
        broker: _Broker,
        queue: str,
        callback: ConsumerCallback,
        prefetch: int,
        *,
        no_ack: bool = False,
    ) -> None:
        self.queue = queue
        self.prefetch = prefetch
        self.no_ack = no_ack
        self._broker = broker
        self._callback = callback
        self._state = ConsumerState.ACTIVE
        self._unacked: dict[int, MemoryDelivery] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return (
            f"<MemoryConsumer queue={self.queue!r} state={self._state.value} "
            f"unacked={len(self._unacked)}/{self.prefetch}>"
        )

    @property
    def state(self) -> ConsumerState:
        """The consumer's lifecycle state."""
        return self._state

    @property
    def unacked(self) -> int:
        """How many deliveries this consumer holds unsettled."""
        return len(self._unacked)

    @property
    def has_capacity(self) -> bool:
        """Whether the queue may deliver another message to this consumer now."""
        if self._state is not ConsumerState.ACTIVE:
            return False
        return self.prefetch == 0 or len(self._unacked) < self.prefetch

    @property
    def tasks(self) -> frozenset[asyncio.Task[None]]:
        """The callback tasks still running, one per delivery."""
        return frozenset(self._tasks)

    def cancel(self) -> None:
        """Stop receiving new deliveries; the unacked ones can still be settled."""
        if self._state is ConsumerState.ACTIVE:
            self._state = ConsumerState.CANCELLED
            self._broker._detach(self)

    def close(self) -> None:
        """Cancel, and requeue every delivery still unacked (the channel closed)."""
        self.cancel()
        if self._state is ConsumerState.CLOSED:
            return
        self._state = ConsumerState.CLOSED
        unsettled = sorted(self._unacked.values(), key=lambda d: d.delivery_tag, reverse=True)
        self._unacked.clear()
        for delivery in unsettled:
            delivery._settled = True
            self._broker._requeue(self.queue, delivery._queued)

    def _deliver(self, queued: Queued) -> None:
        delivery = MemoryDelivery(self, queued, self._broker._next_tag())
        if self.no_ack:
            delivery._settled = True  # acknowledged by being delivered
        else:
            self._unacked[delivery.delivery_tag] = delivery
        # One task per delivery, as aio-pika runs consumer callbacks: never re-entrant.
        task = asyncio.get_running_loop().create_task(self._run(delivery))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._broker._track(task)

    async def _run(self, delivery: MemoryDelivery) -> None:
        if self.no_ack:
            if self._state is ConsumerState.CLOSED:
                return  # the channel closed: an unacknowledged message is lost with it
        elif delivery._settled:  # requeued by close() before the task started
            return
        try:
            await self._callback(delivery)
        except Exception:
            # As on a real channel: the delivery stays unacked until the consumer closes.
            _log.exception("consumer callback failed", queue=self.queue)

    def _settle(self, delivery: MemoryDelivery, how: Literal["ack", "reject", "requeue"]) -> None:
        if self._state is ConsumerState.CLOSED:
            raise ConnectionLost(f"the channel of {self!r} is closed; the message was requeued")
        if delivery._settled:
            raise RuntimeError(f"{delivery!r} is settled already")
        delivery._settled = True
        del self._unacked[delivery.delivery_tag]
        if how == "requeue":
            self._broker._requeue(self.queue, delivery._queued)
        elif how == "reject":
            self._broker._dead_letter(self.queue, delivery._queued, "rejected")
        self._broker._schedule(self.queue)
