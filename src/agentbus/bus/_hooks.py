"""What a broker supplies to the bus: connect, declare, consume, close; and its journals."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol, Self

from agentbus.bus._feed import Feed
from agentbus.bus._lease import Lease
from agentbus.bus._stores._artifact_store import ArtifactStore

__all__ = ["BrokerHooks", "Journal"]


class Journal(Protocol):
    """An append-only log of JSON records every process can read back, kept by the broker.

    On RabbitMQ a stream (``bus/_rabbitmq/_journal.py``); in memory a list on the
    ``MemoryBroker``.
    """

    async def append(self, record: dict[str, Any]) -> None:
        """Add ``record`` at the end, once the broker has it (confirmed)."""
        ...

    async def read(self, since: datetime) -> list[dict[str, Any]]:
        """Return, in order, the records appended from about ``since`` up to now."""
        ...


class BrokerHooks(abc.ABC):
    """The operations a bus needs from its broker: RabbitMQ's, or the in-memory one."""

    @abc.abstractmethod
    async def open(self) -> Self:
        """Connect, declare the instance queue and start consuming it."""

    @abc.abstractmethod
    async def _declare_service(self, service: str, prefetch: int, delivery_limit: int) -> None:
        """Declare and bind the service's shared queue, and consume it."""

    @abc.abstractmethod
    async def _bind_instance(self, pattern: str) -> None:
        """Bind ``pattern`` to this instance's queue."""

    @abc.abstractmethod
    async def _open_feed(self, feed: Feed, max_length: int) -> Callable[[], Awaitable[None]]:
        """Declare ``feed``'s exclusive bounded queue, bind it, consume it (acks in batches).

        Return what stops consuming it.
        """

    @abc.abstractmethod
    async def _open_journal(self, queue: str, max_age: str) -> Journal:
        """Declare the journal's stream (or find it again) and return it."""

    @abc.abstractmethod
    def _artifact_store(self) -> ArtifactStore:
        """The broker's own artifact store (on RabbitMQ, its streams), once connected."""

    @abc.abstractmethod
    async def _open_lease(self, queue: str, lease: Lease) -> None:
        """Declare the lease's queue (a single active consumer's), put a token in, and
        consume it: the token's delivery grants ``lease``, its channel's close revokes it."""

    @abc.abstractmethod
    async def _open_reply_queue(
        self, queue: str, *, hold: bool, exclusive: bool = False
    ) -> Callable[[bool], Awaitable[None]]:
        """Declare a durable reply queue and take its replies (``hold``: by the dispatcher's
        ``on_held_reply``; ``exclusive``: alone, or raise ``QueueInUse``); return what
        stops that (and deletes the queue, when told to)."""

    @abc.abstractmethod
    async def _unserved(self, receiver: str) -> bool | None:
        """Whether ``receiver``'s queue (service, else instance) holds work nobody consumes;
        None: ``receiver`` has no queue."""

    @abc.abstractmethod
    async def _stop_consuming(self, *, instance: bool) -> None:
        """Cancel the service consumers; with ``instance``, the instance consumer too."""

    @abc.abstractmethod
    def _delivery_tasks(self) -> set[asyncio.Task[Any]]:
        """Deliveries being handled, including ones not started yet."""

    @abc.abstractmethod
    async def _close_transport(self) -> None:
        """Close the connection; unacked deliveries go back to their queues."""
