"""A lease on the in-memory broker: what a single active consumer's token is on RabbitMQ."""

from __future__ import annotations

from typing import Final

from agentbus._exceptions import ConnectionLost
from agentbus.bus import Lease
from agentbus.testing._consumer import ConsumerState, MemoryConsumer, MemoryDelivery
from agentbus.testing._memory_broker import DEFAULT_EXCHANGE, MemoryBroker
from agentbus.testing._message import MemoryMessage

__all__ = ["MemoryLease"]

_TOKEN: Final = MemoryMessage(b'{"token": true}', persistent=True)


class MemoryLease:
    """The lease's consumer on a queue with a single active consumer and one token."""

    def __init__(self, broker: MemoryBroker, queue: str, lease: Lease) -> None:
        self._broker = broker
        self._queue = queue
        self._lease = lease
        self._held: MemoryDelivery | None = None
        self._consumer: MemoryConsumer | None = None

    def start(self) -> None:
        """Declare the queue, put a token in, and wait in line for it."""
        self._broker.declare_queue(self._queue, dead_letter=False, max_length=1, single_active=True)
        self._put_token()
        self._lease._attach(self)
        self._consumer = self._broker.consume(self._queue, self._take, prefetch=1)

    async def confirm(self) -> None:
        """Raise unless this consumer is still there (the active one)."""
        if self._consumer is None or self._consumer.state is not ConsumerState.ACTIVE:
            raise ConnectionLost(f"the consumer of lease {self._lease.name!r} is gone")

    async def cycle(self) -> None:
        """Put a new token in, then acknowledge the one held."""
        held, self._held = self._held, None
        if held is not None:
            self._put_token()
            await held.ack()

    async def close(self) -> None:
        """Close the consumer (as its channel would be): the held token goes back."""
        if self._consumer is not None:
            self._consumer.close()
        self._held = None
        self._lease._revoke()

    def _put_token(self) -> None:
        self._broker.publish(_TOKEN, self._queue, exchange=DEFAULT_EXCHANGE)

    async def _take(self, delivery: MemoryDelivery) -> None:
        self._held = delivery
        self._lease._grant()
