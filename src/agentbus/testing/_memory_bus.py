"""The in-memory bus: ``agentbus.Bus``'s interface and behaviour on a ``MemoryBroker``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, Self

from agentbus._config import Settings
from agentbus._exceptions import BusClosed
from agentbus._logging import get_logger
from agentbus._metrics import Metrics
from agentbus.bus import BusState, Feed, Journal, Lease
from agentbus.bus.internal import ArtifactStore, BaseBus
from agentbus.envelopes import utcnow
from agentbus.security import publisher_user_id
from agentbus.testing._consumer import MemoryConsumer, MemoryDelivery
from agentbus.testing._memory_artifacts import MemoryArtifactStore
from agentbus.testing._memory_broker import MemoryBroker
from agentbus.testing._memory_journal import MemoryJournal
from agentbus.testing._memory_lease import MemoryLease
from agentbus.testing._publisher import MemoryPublisher

__all__ = ["MemoryBus"]

_REPLY_PREFETCH: Final = 512  # the instance queue's prefetch on the real bus
_REPLY_QUEUE_EXPIRES: Final = 600.0  # a named reply queue outlives its consumer, as there
_log = get_logger("agentbus.testing")


_NODE: Final = "memory://"
"""The node a memory bus reports it is connected to."""


class MemoryBus(BaseBus):
    """A participant on a ``MemoryBroker``, behaving as ``agentbus.Bus`` does on RabbitMQ.

    Same queues and bindings, same routing keys, same envelopes encoded to bytes,
    the same de-duplication, deadlines, error replies, counters and exceptions;
    only the broker is in-process. Share one broker between the buses of a test::

        broker = MemoryBroker()
        async with MemoryBus(broker, agent_id="echo-1") as server:
            await server.serve(handler, service="echo")
            async with MemoryBus(broker) as client:
                reply = await client.request("echo", "say", {"text": "hi"}, timeout=1)
    """

    def __init__(
        self,
        broker: MemoryBroker,
        settings: Settings | None = None,
        *,
        agent_id: str | None = None,
        app_id: str = "agentbus",
        metrics: Metrics | None = None,
    ) -> None:
        super().__init__(settings, agent_id=agent_id, app_id=app_id, metrics=metrics)
        self.broker = broker
        self._instance_queue: str | None = None
        self._instance_consumer: MemoryConsumer | None = None
        self._service_consumers: list[MemoryConsumer] = []
        self._closed_consumers: list[MemoryConsumer] = []
        self._reply_consumers: set[MemoryConsumer] = set()  # of reply queues, as channels
        self._leases: list[MemoryLease] = []

    async def open(self) -> Self:
        """Declare this instance's queue and binding on the broker and start consuming it."""
        if self._state is not BusState.NEW:
            raise BusClosed(f"{self!r} cannot be opened again")
        self.stats.connections, self.stats.node = 1, _NODE
        dispatcher = self._started(
            MemoryPublisher(
                self.broker,
                exchange=self.topology.exchange,
                app_id=self._app_id,
                max_size=self.settings.max_message_size,
                stats=self.stats,
                is_open=self._can_publish,
                user_id=publisher_user_id(self.settings, self.agent_id),
            )
        )
        queue = self.topology.instance_queue(self.agent_id)
        # As on RabbitMQ: the queue outlives a close by instance_queue_expires, so
        # replies and direct messages to a departed instance are routed, not refused.
        self.broker.declare_queue(
            queue, dead_letter=True, expires=self.settings.instance_queue_expires
        )
        self.broker.bind(queue, f"agent.{self.agent_id}.*", exchange=self.topology.exchange)
        self._instance_queue = queue
        self._instance_consumer = self.broker.consume(
            queue, dispatcher.on_message, prefetch=_REPLY_PREFETCH
        )
        self._state = BusState.OPEN
        _log.debug("bus open", agent_id=self.agent_id, broker="memory")
        return self

    async def _declare_service(self, service: str, prefetch: int, delivery_limit: int) -> None:
        assert self._dispatcher is not None
        queue = self.topology.service_queue(service)
        self.broker.declare_queue(queue, dead_letter=True)
        for kind in ("request", "event"):
            self.broker.bind(queue, f"agent.{service}.{kind}", exchange=self.topology.exchange)
        consumer = self.broker.consume(
            queue, self._dispatcher.on_service_message, prefetch=prefetch
        )
        self._service_consumers.append(consumer)

    async def _open_feed(self, feed: Feed, max_length: int) -> Callable[[], Awaitable[None]]:
        # As on RabbitMQ: an exclusive queue, gone when the bus closes, bounded, no acks.
        self.broker.declare_queue(feed.queue, dead_letter=False, max_length=max_length)
        self.broker.bind(feed.queue, feed.pattern, exchange=self.topology.exchange)

        async def take(delivery: MemoryDelivery) -> None:
            feed.take(delivery.body, delivery.headers, delivery.user_id)

        consumer = self.broker.consume(feed.queue, take, no_ack=True)

        async def stop() -> None:
            consumer.close()
            if not feed.shared:
                self.broker.delete_queue(feed.queue)

        return stop

    async def _open_journal(self, queue: str, max_age: str) -> Journal:
        return MemoryJournal(self.broker.journals.setdefault(queue, []), utcnow)

    def _artifact_store(self) -> ArtifactStore:
        return MemoryArtifactStore(
            self.broker.artifacts, chunk_size=self.settings.artifact_chunk_size
        )

    async def _open_lease(self, queue: str, lease: Lease) -> None:
        holder = MemoryLease(self.broker, queue, lease)
        holder.start()
        self._leases.append(holder)

    async def _open_reply_queue(
        self, queue: str, *, hold: bool, exclusive: bool = False
    ) -> Callable[[bool], Awaitable[None]]:
        assert self._dispatcher is not None
        dispatcher = self._dispatcher
        take = partial(dispatcher.on_held_reply, queue=queue) if hold else dispatcher.on_message
        self.broker.declare_queue(queue, dead_letter=False, expires=_REPLY_QUEUE_EXPIRES)
        consumer = self.broker.consume(queue, take, prefetch=_REPLY_PREFETCH, exclusive=exclusive)
        self._reply_consumers.add(consumer)

        async def stop(delete: bool) -> None:
            self._reply_consumers.discard(consumer)
            consumer.close()
            if delete:
                self.broker.delete_queue(queue)

        return stop

    async def _bind_instance(self, pattern: str) -> None:
        assert self._instance_queue is not None
        self.broker.bind(self._instance_queue, pattern, exchange=self.topology.exchange)

    async def _unserved(self, receiver: str) -> bool | None:
        topology = self.topology
        broker = self.broker
        for queue in (topology.service_queue(receiver), topology.instance_queue(receiver)):
            count = broker.consumer_count(queue)
            if count is not None:
                return count == 0 and broker.message_count(queue) > 0
        return None

    async def _stop_consuming(self, *, instance: bool) -> None:
        stopping = list(self._service_consumers)
        self._service_consumers.clear()
        if instance and self._instance_consumer is not None:
            stopping.append(self._instance_consumer)
            self._instance_consumer = None
        for consumer in stopping:
            consumer.cancel()
        self._closed_consumers.extend(stopping)

    def _delivery_tasks(self) -> set[asyncio.Task[Any]]:
        # Every delivery task counts, including one created but not started yet:
        # the dispatcher only learns of a task once it runs.
        consumers = [*self._service_consumers, *self._closed_consumers]
        if self._instance_consumer is not None:
            consumers.append(self._instance_consumer)
        return {task for consumer in consumers for task in consumer.tasks}

    async def _close_transport(self) -> None:
        # Closing the channels: whatever is still unacked goes back to its queue.
        for consumer in [*self._closed_consumers, *self._reply_consumers]:
            consumer.close()
        self._closed_consumers.clear()
        self._reply_consumers.clear()
        for lease in self._leases:  # its channel closes: its token goes to the next
            await lease.close()
        self._leases.clear()
        _log.debug("bus closed", agent_id=self.agent_id, broker="memory")
