"""The bus: one robust connection, the contract's topology, requests, events and serving."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, Self

import aiormq.exceptions
from aio_pika.abc import (
    AbstractQueue,
    AbstractRobustChannel,
    AbstractRobustConnection,
    ExchangeType,
)

from agentbus._config import Settings
from agentbus._exceptions import AgentBusError, BusClosed
from agentbus._logging import get_logger
from agentbus._metrics import Metrics
from agentbus.bus._base import BaseBus
from agentbus.bus._feed import SHARED_FEED_EXPIRES, Feed
from agentbus.bus._hooks import Journal
from agentbus.bus._lease import Lease
from agentbus.bus._rabbitmq._amqp import (
    DeliveryConsumer,
    DirectReplyTo,
    FeedConsumer,
)
from agentbus.bus._rabbitmq._artifact_stream import StreamArtifactStore
from agentbus.bus._rabbitmq._audit_stream import RabbitAuditStream
from agentbus.bus._rabbitmq._connection import open_connection
from agentbus.bus._rabbitmq._dead_letters import DeadLetters, declare_dead_letter_queue
from agentbus.bus._rabbitmq._errors import map_transport_errors, through_reconnects
from agentbus.bus._rabbitmq._journal import StreamJournal
from agentbus.bus._rabbitmq._lease import open_lease
from agentbus.bus._rabbitmq._presence import heard_from, served_here, unserved
from agentbus.bus._rabbitmq._publisher import Publisher
from agentbus.bus._rabbitmq._spare import SpareChannel
from agentbus.bus._stats import BusState
from agentbus.bus._stores._artifact_store import ArtifactStore
from agentbus.bus._stores._dedup import DedupStore, SharedDedupStore
from agentbus.security import AuditTrail, publisher_user_id

__all__ = ["Bus", "connect"]

_REPLY_PREFETCH: Final = 512
# A named reply queue (a plan's) outlives its consumer this long: the window in which
# another process can take over and find the answers that came meanwhile.
_REPLY_QUEUE_EXPIRES: Final = 600.0
_FEED_WINDOW: Final = 2000  # feed messages delivered and not yet acked, at most
_RECONNECT_WAIT: Final = 30.0  # s: how long opening a reply queue waits out a reconnect
_SHUTDOWN_STEP_TIMEOUT: Final = 2.0
_log = get_logger("agentbus.bus")


def connect(
    url: str | None = None,
    *,
    agent_id: str | None = None,
    exchange: str | None = None,
    settings: Settings | None = None,
    metrics: Metrics | None = None,
) -> Bus:
    """Return a bus for ``url``; open it with ``async with`` (or ``await bus.open()``).

    Args:
        url: The broker URL; default ``AGENTBUS_URL`` or ``amqp://guest:guest@localhost:5672/``.
        agent_id: This participant's id; default one its broker user owns, with
            ``client`` in it (``agentbus.security.default_id``).
        exchange: The topic exchange name; default ``AGENTBUS_EXCHANGE`` or ``agentbus``.
        settings: Settings to start from; ``url`` and ``exchange`` override them.
        metrics: Prometheus families to report to (see ``agentbus.Metrics``).
    """
    settings = settings or Settings()
    overrides = {k: v for k, v in (("url", url), ("exchange", exchange)) if v is not None}
    if overrides:
        settings = settings.model_copy(update=overrides)
    return Bus(settings, agent_id=agent_id, metrics=metrics)


class Bus(BaseBus):
    """A participant on the agent bus, over RabbitMQ.

    Every bus has an instance queue for replies, direct messages and the broadcasts
    it subscribes to. ``serve`` adds a service queue shared with the service's other
    instances. Use it as an async context manager::

        async with agentbus.connect(url) as bus:
            reply = await bus.request("summarizer", "summarize", {"text": "..."}, timeout=5)
            print(reply.result)
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        agent_id: str | None = None,
        app_id: str = "agentbus",
        metrics: Metrics | None = None,
        dedup: DedupStore | SharedDedupStore | None = None,
    ) -> None:
        super().__init__(settings, agent_id=agent_id, app_id=app_id, metrics=metrics, dedup=dedup)
        self._connection: AbstractRobustConnection | None = None
        self._audit: AuditTrail | None = None
        self._instance_queue: AbstractQueue | None = None
        self._service_consumers: list[DeliveryConsumer] = []
        self._spare = SpareChannel(partial(self._channel, prefetch=_REPLY_PREFETCH))

    async def open(self) -> Self:
        """Connect, declare the topology and start consuming the instance queue.

        Raises:
            BrokerUnavailable: the broker cannot be reached.
            ConfigurationError: a declaration conflicts with what the broker has.
        """
        if self._state is not BusState.NEW:
            raise BusClosed(f"{self!r} cannot be opened again")
        self._connection = await open_connection(
            self.settings, name=f"agentbus:{self.agent_id}", on_node=self._connected_to
        )
        try:
            with map_transport_errors():
                await self._declare()
        except BaseException:
            await self._connection.close()
            self._state = BusState.CLOSED
            raise
        self._state = BusState.OPEN
        _log.debug("bus open", agent_id=self.agent_id, node=self.stats.node)
        return self

    def dead_letters(self) -> DeadLetters:
        """Return this exchange's dead-letter queue, to browse, replay and discard its messages."""
        return DeadLetters(self._open_connection, self.topology)

    def _open_connection(self) -> AbstractRobustConnection:
        if self._connection is None or self._state is not BusState.OPEN:
            raise BusClosed(f"{self!r} is not open")
        return self._connection

    def _connected_to(self, node: str) -> None:
        self.stats.connections += 1
        self.stats.node = node
        if self.stats.connections > 1:
            _log.info(
                "reconnected", agent_id=self.agent_id, node=node, connections=self.stats.connections
            )

    async def _declare(self) -> None:
        topology = self.topology
        publish_channel = await self._channel()
        exchange = await publish_channel.declare_exchange(
            topology.exchange, ExchangeType.TOPIC, durable=True
        )
        await publish_channel.declare_exchange(
            topology.dead_letter_exchange, ExchangeType.FANOUT, durable=True
        )
        await self._declare_dead_letter_queue()
        assert self._connection is not None
        self._connection.reconnect_callbacks.add(self._on_reconnect)
        plain_channel = await self._connection.channel(publisher_confirms=False)
        publisher = Publisher(
            publish_channel,
            exchange,
            app_id=self._app_id,
            max_size=self.settings.max_message_size,
            default_timeout=self.settings.request_timeout,
            stats=self.stats,
            is_open=self._can_publish,
            user_id=publisher_user_id(self.settings, self.agent_id),
            site=self.settings.site,
            plain=plain_channel,
        )
        instance_channel = await self._channel(prefetch=_REPLY_PREFETCH)
        # Not exclusive: a reconnect must find the queue, and the replies in it, again.
        # x-expires removes it once this instance has been gone for a while.
        quorum = (self.settings.instance_queue_type or self.settings.queue_type) == "quorum"
        arguments: dict[str, Any] = {
            "x-expires": int(self.settings.instance_queue_expires * 1000),
            "x-dead-letter-exchange": topology.dead_letter_exchange,
        }
        if quorum:
            # Replicated: on a cluster, losing the node that led it loses no reply, and
            # replies published meanwhile are still routed (a classic queue is gone then).
            arguments["x-queue-type"] = "quorum"
        queue = await instance_channel.declare_queue(
            topology.instance_queue(self.agent_id), durable=quorum, arguments=arguments
        )
        await queue.bind(topology.exchange, routing_key=f"agent.{self.agent_id}.*")
        self._instance_queue = queue
        self._audit = self._open_audit()
        dispatcher = self._started(publisher, self._audit)
        # Never cancelled by itself: closing the connection ends it, without a round trip
        # that a stalled network would hold up.
        await DeliveryConsumer(instance_channel, queue.name, dispatcher.on_message).start()
        # Transient requests, on the channel without confirms, answered there: no queue.
        direct = DirectReplyTo(plain_channel, dispatcher.on_message, fallback=queue.name)
        await direct.start()
        publisher.direct = direct

    def _open_audit(self) -> AuditTrail | None:
        """Start the audit trail, per ``settings.audit`` (it finds its stream by itself)."""
        if self.settings.audit is False:
            return None
        assert self._connection is not None
        stream = RabbitAuditStream(
            self._connection,
            self.topology.audit_stream,
            create=bool(self.settings.audit),
            app_id=self._app_id,
            user_id=publisher_user_id(self.settings, self.agent_id),
        )
        trail = AuditTrail(stream)
        trail.start()
        return trail

    async def _channel(self, prefetch: int | None = None) -> AbstractRobustChannel:
        assert self._connection is not None
        channel = await self._connection.channel()
        if prefetch is not None:
            await channel.set_qos(prefetch_count=prefetch)
        return channel

    async def _declare_service(self, service: str, prefetch: int, delivery_limit: int) -> None:
        assert self._dispatcher is not None
        name = self.topology.service_queue(service)
        with map_transport_errors():
            channel = await self._channel(prefetch=prefetch)
            try:
                queue = await channel.declare_queue(
                    name, durable=True, arguments=self._service_args(delivery_limit)
                )
            except aiormq.exceptions.ChannelPreconditionFailed as exc:
                # Declared before with another delivery limit (an older default, or a
                # definitions file's): the broker keeps a queue's arguments, so it is served
                # as it is. Any other conflict (a queue type) stays an error.
                if "x-delivery-limit" not in str(exc):
                    raise
                _log.warning("service queue kept as declared before", queue=name, error=str(exc))
                with contextlib.suppress(aiormq.exceptions.AMQPError, ConnectionError):
                    await channel.close()
                channel = await self._channel(prefetch=prefetch)
                queue = await channel.declare_queue(name, passive=True)
            for kind in ("request", "event"):
                await queue.bind(self.topology.exchange, routing_key=f"agent.{service}.{kind}")
            consumer = DeliveryConsumer(channel, queue.name, self._dispatcher.on_service_message)
            await consumer.start()
        self._service_consumers.append(consumer)

    def _service_args(self, delivery_limit: int) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "x-dead-letter-exchange": self.topology.dead_letter_exchange,
        }
        if self.settings.queue_type == "quorum":
            # A request that keeps killing its consumer is dead-lettered (reason
            # delivery_limit) after this many redeliveries instead of looping forever.
            arguments["x-queue-type"] = "quorum"
            arguments["x-delivery-limit"] = delivery_limit
        return arguments

    async def _bind_instance(self, pattern: str) -> None:
        assert self._instance_queue is not None
        with map_transport_errors():
            await self._instance_queue.bind(self.topology.exchange, routing_key=pattern)

    async def _open_feed(self, feed: Feed, max_length: int) -> Callable[[], Awaitable[None]]:
        with map_transport_errors():
            channel = await self._channel(prefetch=_FEED_WINDOW)
            # Exclusive: gone with the connection; the robust channel declares it again.
            # Shared: the service's, gone a while after its last consumer.
            arguments: dict[str, Any] = {"x-max-length": max_length, "x-overflow": "drop-head"}
            if feed.shared:
                arguments["x-expires"] = int(SHARED_FEED_EXPIRES * 1000)
            queue = await channel.declare_queue(
                feed.queue, durable=False, exclusive=not feed.shared, arguments=arguments
            )
            await queue.bind(self.topology.exchange, routing_key=feed.pattern)
            consumer = FeedConsumer(channel, feed.queue, feed.take, batch=_FEED_WINDOW // 4)
            await consumer.start()
        return lambda: _bounded(consumer.aclose())

    async def _declare_dead_letter_queue(self) -> None:
        assert self._connection is not None
        quorum = self.settings.queue_type == "quorum"
        await declare_dead_letter_queue(self._connection, self.topology, quorum, self.agent_id)

    async def _on_reconnect(self, connection: object) -> None:
        try:
            with map_transport_errors():
                await self._declare_dead_letter_queue()
        except AgentBusError as exc:
            _log.info("dead-letter queue not declared again", error=str(exc))

    async def _open_journal(self, queue: str, max_age: str) -> Journal:
        assert self._connection is not None
        journal = StreamJournal(self._connection, queue)
        await journal.declare(max_age)
        return journal

    def _artifact_store(self) -> ArtifactStore:
        assert self._connection is not None
        user_id = publisher_user_id(self.settings, self.agent_id)
        return StreamArtifactStore.of(self._connection, self.settings, self._app_id, user_id)

    async def _open_lease(self, queue: str, lease: Lease) -> None:
        assert self._connection is not None
        quorum = self.settings.queue_type == "quorum"
        await open_lease(self._connection, queue, lease, quorum=quorum)

    async def _open_reply_queue(
        self, queue: str, *, hold: bool, exclusive: bool = False
    ) -> Callable[[bool], Awaitable[None]]:
        assert self._dispatcher is not None
        dispatcher = self._dispatcher
        take = partial(dispatcher.on_held_reply, queue=queue) if hold else dispatcher.on_message
        quorum = (self.settings.instance_queue_type or self.settings.queue_type) == "quorum"
        arguments: dict[str, Any] = {"x-expires": int(_REPLY_QUEUE_EXPIRES * 1000)}
        if quorum:
            arguments["x-queue-type"] = "quorum"

        async def open_() -> tuple[AbstractRobustChannel, AbstractQueue, DeliveryConsumer]:
            with map_transport_errors():
                channel = await self._spare.take()
                try:
                    declared = await channel.declare_queue(queue, durable=True, arguments=arguments)
                    consumer = DeliveryConsumer(channel, queue, take, exclusive=exclusive)
                    await consumer.start()
                except BaseException:
                    await _bounded(channel.close())
                    raise
                return channel, declared, consumer

        # Right after a reconnect (a plan taken over then) channels are still coming back.
        channel, declared, consumer = await through_reconnects(open_, seconds=_RECONNECT_WAIT)

        async def stop(delete: bool) -> None:
            await _bounded(consumer.cancel())
            if delete:
                await _bounded(declared.delete(if_unused=False, if_empty=False))
            await _bounded(channel.close())

        return stop

    async def _unserved(self, receiver: str) -> bool | None:
        assert self._connection is not None
        return await unserved(self._connection, self.topology, receiver)

    async def _served_here(self, receiver: str) -> bool:
        assert self._connection is not None
        return await served_here(self._connection, self.topology, receiver)

    async def _heard_from(self, site: str) -> bool | None:
        assert self._connection is not None
        return await heard_from(self._connection, self.topology, site)

    async def _stop_consuming(self, *, instance: bool) -> None:
        # The instance consumer ends with the connection (see _declare).
        consumers = list(self._service_consumers)
        self._service_consumers.clear()
        await asyncio.gather(*(_bounded(consumer.cancel()) for consumer in consumers))

    def _delivery_tasks(self) -> set[asyncio.Task[Any]]:
        # aiormq starts a task per delivery; the dispatcher tracks each once it runs.
        return set()

    async def _close_transport(self) -> None:
        self._spare.cancel()
        if self._audit is not None:
            await self._audit.aclose()
        if self._connection is not None:
            await _bounded(self._connection.close())


async def _bounded(operation: Awaitable[Any]) -> None:
    # Shutdown must not hang on a stalled network: each broker round trip gets a bound.
    # A CancelledError from aiormq's dead channel is not ours unless our task is cancelled.
    try:
        async with asyncio.timeout(_SHUTDOWN_STEP_TIMEOUT):
            await operation
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception as exc:  # the connection is going away anyway
        _log.debug("shutdown step failed", error=repr(exc))
