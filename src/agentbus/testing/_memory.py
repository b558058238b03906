"""The in-memory bus: ``agentbus.Bus``'s interface and behaviour on a ``MemoryBroker``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable
from datetime import timedelta
from types import TracebackType
from typing import Any, Final, Self

import structlog

from agentbus._config import Settings
from agentbus._exceptions import BusClosed, ConfigurationError, RemoteError, RequestTimeout
from agentbus.bus import (
    BusState,
    BusStats,
    EventHandler,
    ProgressCallback,
    RequestHandler,
    Topology,
)
from agentbus.bus._dedup import DedupWindow
from agentbus.bus._dispatch import Dispatcher
from agentbus.bus._pending import PendingRequests
from agentbus.envelopes import (
    BROADCAST,
    Envelope,
    ErrorEnvelope,
    EventEnvelope,
    EventPayload,
    Metadata,
    RequestEnvelope,
    RequestPayload,
    ResponseEnvelope,
    is_valid_id,
    utcnow,
)
from agentbus.testing._broker import MemoryBroker
from agentbus.testing._consumer import MemoryConsumer
from agentbus.testing._publisher import MemoryPublisher

__all__ = ["MemoryBus"]

_REPLY_PREFETCH: Final = 512  # the instance queue's prefetch on the real bus
_log = structlog.get_logger("agentbus.testing")


class MemoryBus:
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
    ) -> None:
        self.broker = broker
        self.settings = settings or Settings()
        self.agent_id = agent_id or f"client-{uuid.uuid4().hex[:12]}"
        if not is_valid_id(self.agent_id) or self.agent_id == BROADCAST:
            raise ConfigurationError(
                f"agent id {self.agent_id!r} is not valid: use 1 to 128 of [A-Za-z0-9_-]"
            )
        self.topology = Topology(self.settings.exchange)
        self.stats = BusStats()
        self.service: str | None = None
        self._app_id = app_id
        self._state = BusState.NEW
        self._pending = PendingRequests()
        self._dedup = DedupWindow(self.settings.dedup_window, self.settings.dedup_size)
        self._instance_queue: str | None = None
        self._consumers: list[MemoryConsumer] = []
        self._publisher: MemoryPublisher | None = None
        self._dispatcher: Dispatcher | None = None

    def __repr__(self) -> str:
        return f"<MemoryBus agent_id={self.agent_id!r} state={self._state.value}>"

    @property
    def state(self) -> BusState:
        """The bus's lifecycle state."""
        return self._state

    @property
    def is_open(self) -> bool:
        """Whether the bus is open for work."""
        return self._state is BusState.OPEN

    @property
    def in_flight(self) -> int:
        """How many requests this bus is waiting on."""
        return len(self._pending)

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def open(self) -> Self:
        """Declare this instance's queue and binding on the broker and start consuming it."""
        if self._state is not BusState.NEW:
            raise BusClosed(f"{self!r} cannot be opened again")
        self._publisher = MemoryPublisher(
            self.broker,
            exchange=self.topology.exchange,
            app_id=self._app_id,
            max_size=self.settings.max_message_size,
            stats=self.stats,
            is_open=lambda: self._state in (BusState.OPEN, BusState.CLOSING),
        )
        self._dispatcher = Dispatcher(
            agent_id=self.agent_id,
            publisher=self._publisher,
            pending=self._pending,
            dedup=self._dedup,
            stats=self.stats,
            max_size=self.settings.max_message_size,
        )
        queue = self.topology.instance_queue(self.agent_id)
        # As on RabbitMQ: the queue outlives a close by instance_queue_expires, so
        # replies and direct messages to a departed instance are routed, not refused.
        self.broker.declare_queue(
            queue, dead_letter=True, expires=self.settings.instance_queue_expires
        )
        self.broker.bind(queue, f"agent.{self.agent_id}.*", exchange=self.topology.exchange)
        self._instance_queue = queue
        self._consume(queue, _REPLY_PREFETCH)
        self._state = BusState.OPEN
        _log.info("bus open", agent_id=self.agent_id, broker="memory")
        return self

    def _consume(self, queue: str, prefetch: int) -> None:
        assert self._dispatcher is not None
        consumer = self.broker.consume(queue, self._dispatcher.on_message, prefetch=prefetch)
        self._consumers.append(consumer)

    async def serve(
        self,
        handler: RequestHandler,
        *,
        service: str | None = None,
        prefetch: int | None = None,
        broadcast_actions: Iterable[str] = (),
    ) -> None:
        """Answer requests with ``handler``.

        Requests to this instance's id are always served. With ``service``, the bus
        also consumes the service's shared queue, competing with its other instances,
        at most ``prefetch`` at a time. ``broadcast_actions`` are request actions
        received when broadcast to everyone.
        """
        dispatcher = self._require_open()
        dispatcher.request_handler = handler
        for action in broadcast_actions:
            self._bind_instance(f"broadcast.request.{_checked(action, 'action')}")
        if service is None:
            return
        if self.service is not None:
            raise ConfigurationError(f"{self!r} already serves {self.service!r}")
        _checked(service, "service name")
        if service == self.agent_id:
            raise ConfigurationError("a service name must differ from the instance id")
        queue = self.topology.service_queue(service)
        self.broker.declare_queue(queue, dead_letter=True)
        for kind in ("request", "event"):
            self.broker.bind(queue, f"agent.{service}.{kind}", exchange=self.topology.exchange)
        self.service = service
        self._consume(queue, prefetch or self.settings.prefetch)

    async def subscribe(self, pattern: str, handler: EventHandler) -> None:
        """Receive events whose routing key matches ``pattern`` (``*`` one word, ``#`` any).

        The pattern is bound to this instance's queue, e.g. ``broadcast.event.heartbeat``.
        """
        dispatcher = self._require_open()
        dispatcher.event_handlers.append((pattern, handler))
        self._bind_instance(pattern)

    def _bind_instance(self, pattern: str) -> None:
        assert self._instance_queue is not None
        self.broker.bind(self._instance_queue, pattern, exchange=self.topology.exchange)

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
        """Publish any envelope with the contract's routing key.

        With ``mandatory`` (the default) a message nobody is bound for raises
        ``Unroutable``; without it, such a message is dropped.

        Raises:
            Unroutable: no queue is bound for the receiver.
            PayloadTooLarge: the encoded envelope is over the size cap.
            BusClosed: the bus is not open.
        """
        publisher = self._require_publisher()
        await publisher.publish(
            envelope,
            reply_to=reply_to,
            persistent=persistent,
            ttl=ttl,
            timeout=timeout,
            mandatory=mandatory,
        )

    async def request(
        self,
        receiver: str,
        action: str,
        parameters: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ResponseEnvelope:
        """Send a request to an instance or service and wait for its response.

        Raises:
            RemoteError: the receiver answered with an error envelope.
            RequestTimeout: no answer within ``timeout`` seconds.
            Unroutable: nobody serves ``receiver``.
        """
        timeout = timeout if timeout is not None else self.settings.request_timeout
        meta = Metadata.model_validate(metadata or {})
        meta.deadline = utcnow() + timedelta(seconds=timeout)
        envelope = RequestEnvelope(
            sender_id=self.agent_id,
            receiver_id=receiver,
            payload=RequestPayload(action=action, parameters=parameters or {}),
            metadata=meta,
        )
        return await self.send_request(envelope, timeout=timeout)

    async def send_request(
        self,
        envelope: RequestEnvelope,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> ResponseEnvelope:
        """Publish a built request and wait for the response correlated to it.

        ``on_progress`` is called with every ``in_progress`` response that comes first.
        """
        self._require_open()  # replies need the instance consumer, gone once draining
        publisher = self._require_publisher()
        timeout = timeout if timeout is not None else self.settings.request_timeout
        message_id = envelope.message_id
        future = self._pending.add(message_id, on_progress)
        try:
            async with asyncio.timeout(timeout):
                await publisher.publish(envelope, ttl=timeout, timeout=timeout)
                reply = await future
        except TimeoutError as exc:
            raise RequestTimeout(
                f"no answer from {envelope.receiver_id!r} to {envelope.payload.action!r} "
                f"within {timeout:g} s",
                details={"receiver": envelope.receiver_id, "timeout": timeout},
            ) from exc
        finally:
            self._pending.discard(message_id)
        if isinstance(reply, ErrorEnvelope):
            raise RemoteError(reply)
        return reply

    async def emit(
        self,
        event_name: str,
        data: dict[str, Any] | None = None,
        *,
        receiver: str = BROADCAST,
        persistent: bool = True,
        ttl: float | None = None,
        mandatory: bool = True,
    ) -> EventEnvelope:
        """Publish an event, to everyone by default; return the envelope sent.

        Raises:
            Unroutable: ``mandatory`` and nobody receives it (no subscriber bound).
        """
        envelope = EventEnvelope(
            sender_id=self.agent_id,
            receiver_id=receiver,
            payload=EventPayload(event_name=event_name, event_data=data or {}),
        )
        await self.publish(envelope, persistent=persistent, ttl=ttl, mandatory=mandatory)
        return envelope

    async def drain(self, grace: float | None = None) -> None:
        """Stop consuming and let in-flight work finish; the bus can still publish.

        Handlers still running after ``grace`` seconds (default: the
        ``shutdown_grace`` setting) are cancelled and their requests requeued.
        """
        if self._state is not BusState.OPEN:
            return
        self._state = BusState.CLOSING
        for consumer in self._consumers:
            consumer.cancel()
        await self._drain(self.settings.shutdown_grace if grace is None else grace)

    async def aclose(self) -> None:
        """Drain (see ``drain``), fail requests still waiting, and close."""
        if self._state is BusState.CLOSED:
            return
        if self._state is BusState.NEW:
            self._state = BusState.CLOSED
            return
        await self.drain()
        self._pending.fail_all(BusClosed("the bus closed before the answer came"))
        self._state = BusState.CLOSED
        # Closing the channels: whatever is still unacked goes back to its queue.
        for consumer in self._consumers:
            consumer.close()
        self._consumers.clear()
        _log.info("bus closed", agent_id=self.agent_id)

    async def _drain(self, grace: float) -> None:
        assert self._dispatcher is not None
        current = asyncio.current_task()
        # Every delivery task counts, including one created but not started yet:
        # the dispatcher only learns of a task once it runs.
        started = {task for consumer in self._consumers for task in consumer.tasks}
        tasks = {task for task in started | self._dispatcher.inflight if task is not current}
        if not tasks:
            return
        _, unfinished = await asyncio.wait(tasks, timeout=grace)
        for task in unfinished:
            task.cancel()
        if unfinished:
            # Cancelled handlers requeue their deliveries before they end.
            await asyncio.wait(unfinished, timeout=5)

    def _require_open(self) -> Dispatcher:
        if self._state is not BusState.OPEN or self._dispatcher is None:
            raise BusClosed(f"{self!r} is not open")
        return self._dispatcher

    def _require_publisher(self) -> MemoryPublisher:
        if self._state not in (BusState.OPEN, BusState.CLOSING) or self._publisher is None:
            raise BusClosed(f"{self!r} is not open")
        return self._publisher


def _checked(value: str, what: str) -> str:
    if not is_valid_id(value):
        raise ConfigurationError(f"{what} {value!r} is not valid: use 1 to 128 of [A-Za-z0-9_-]")
    return value
