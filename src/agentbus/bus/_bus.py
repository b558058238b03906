"""The bus: one robust connection, the contract's topology, requests, events and serving."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterable
from datetime import timedelta
from types import TracebackType
from typing import Any, Final, Self

import aio_pika
import structlog
from aio_pika.abc import (
    AbstractQueue,
    AbstractRobustChannel,
    AbstractRobustConnection,
    ExchangeType,
)

from agentbus._config import Settings, mask_url
from agentbus._exceptions import (
    BusClosed,
    ConfigurationError,
    RemoteError,
    RequestTimeout,
)
from agentbus.bus._dedup import DedupWindow
from agentbus.bus._dispatch import Dispatcher, EventHandler, RequestHandler
from agentbus.bus._errors import map_connect_errors, map_transport_errors
from agentbus.bus._pending import PendingRequests, ProgressCallback
from agentbus.bus._publisher import Publisher
from agentbus.bus._stats import BusState, BusStats
from agentbus.bus._topology import Topology
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

__all__ = ["Bus", "connect"]

_REPLY_PREFETCH: Final = 512
_DEAD_LETTER_MAX_LENGTH: Final = 100_000
_log = structlog.get_logger("agentbus.bus")


def connect(
    url: str | None = None,
    *,
    agent_id: str | None = None,
    exchange: str | None = None,
    settings: Settings | None = None,
) -> Bus:
    """Return a bus for ``url``; open it with ``async with`` (or ``await bus.open()``).

    Args:
        url: The broker URL; default ``AGENTBUS_URL`` or ``amqp://guest:guest@localhost:5672/``.
        agent_id: This participant's id; default ``client-`` plus a random suffix.
        exchange: The topic exchange name; default ``AGENTBUS_EXCHANGE`` or ``agentbus``.
        settings: Settings to start from; ``url`` and ``exchange`` override them.
    """
    settings = settings or Settings()
    overrides = {k: v for k, v in (("url", url), ("exchange", exchange)) if v is not None}
    if overrides:
        settings = settings.model_copy(update=overrides)
    return Bus(settings, agent_id=agent_id)


class Bus:
    """A participant on the agent bus.

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
    ) -> None:
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
        self._connection: AbstractRobustConnection | None = None
        self._instance_queue: AbstractQueue | None = None
        self._consumers: list[tuple[AbstractQueue, str]] = []
        self._publisher: Publisher | None = None
        self._dispatcher: Dispatcher | None = None
        self._channels: list[AbstractRobustChannel] = []

    def __repr__(self) -> str:
        return f"<Bus agent_id={self.agent_id!r} state={self._state.value}>"

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
        """Connect, declare the topology and start consuming the instance queue.

        Raises:
            BrokerUnavailable: the broker cannot be reached.
            ConfigurationError: a declaration conflicts with what the broker has.
        """
        if self._state is not BusState.NEW:
            raise BusClosed(f"{self!r} cannot be opened again")
        settings = self.settings
        with map_connect_errors(mask_url(settings.url)):
            self._connection = await aio_pika.connect_robust(
                settings.url,
                timeout=settings.connect_timeout,
                reconnect_interval=settings.reconnect_interval,
                heartbeat=settings.heartbeat,
                client_properties={"connection_name": f"agentbus:{self.agent_id}"},
            )
        try:
            with map_transport_errors():
                await self._declare()
        except BaseException:
            await self._connection.close()
            self._state = BusState.CLOSED
            raise
        self._state = BusState.OPEN
        _log.debug("bus open", agent_id=self.agent_id, url=mask_url(settings.url))
        return self

    async def _declare(self) -> None:
        assert self._connection is not None
        topology = self.topology
        publish_channel = await self._channel()
        exchange = await publish_channel.declare_exchange(
            topology.exchange, ExchangeType.TOPIC, durable=True
        )
        dlx = await publish_channel.declare_exchange(
            topology.dead_letter_exchange, ExchangeType.FANOUT, durable=True
        )
        dlq = await publish_channel.declare_queue(
            topology.dead_letter_queue,
            durable=True,
            arguments={"x-max-length": _DEAD_LETTER_MAX_LENGTH, "x-overflow": "drop-head"},
        )
        await dlq.bind(dlx, routing_key="")
        self._publisher = Publisher(
            publish_channel,
            exchange,
            app_id=self._app_id,
            max_size=self.settings.max_message_size,
            default_timeout=self.settings.request_timeout,
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
        instance_channel = await self._channel(prefetch=_REPLY_PREFETCH)
        # Not exclusive: a reconnect must find the queue, and the replies in it, again.
        # x-expires removes it once this instance has been gone for a while.
        queue = await instance_channel.declare_queue(
            topology.instance_queue(self.agent_id),
            durable=False,
            arguments={
                "x-expires": int(self.settings.instance_queue_expires * 1000),
                "x-dead-letter-exchange": topology.dead_letter_exchange,
            },
        )
        await queue.bind(topology.exchange, routing_key=f"agent.{self.agent_id}.*")
        self._instance_queue = queue
        await self._consume(queue)

    async def _channel(self, prefetch: int | None = None) -> AbstractRobustChannel:
        assert self._connection is not None
        channel = await self._connection.channel()
        if prefetch is not None:
            await channel.set_qos(prefetch_count=prefetch)
        self._channels.append(channel)
        return channel

    async def _consume(self, queue: AbstractQueue) -> None:
        assert self._dispatcher is not None
        tag = await queue.consume(self._dispatcher.on_message, no_ack=False)
        self._consumers.append((queue, tag))

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
        with map_transport_errors():
            for action in broadcast_actions:
                await self._bind_instance(f"broadcast.request.{_checked(action, 'action')}")
            if service is None:
                return
            if self.service is not None:
                raise ConfigurationError(f"{self!r} already serves {self.service!r}")
            _checked(service, "service name")
            if service == self.agent_id:
                raise ConfigurationError("a service name must differ from the instance id")
            channel = await self._channel(prefetch=prefetch or self.settings.prefetch)
            queue = await channel.declare_queue(
                self.topology.service_queue(service),
                durable=True,
                arguments={"x-dead-letter-exchange": self.topology.dead_letter_exchange},
            )
            for kind in ("request", "event"):
                await queue.bind(self.topology.exchange, routing_key=f"agent.{service}.{kind}")
            self.service = service
            await self._consume(queue)

    async def subscribe(self, pattern: str, handler: EventHandler) -> None:
        """Receive events whose routing key matches ``pattern`` (``*`` one word, ``#`` any).

        The pattern is bound to this instance's queue, e.g. ``broadcast.event.heartbeat``.
        """
        dispatcher = self._require_open()
        dispatcher.event_handlers.append((pattern, handler))
        with map_transport_errors():
            await self._bind_instance(pattern)

    async def _bind_instance(self, pattern: str) -> None:
        assert self._instance_queue is not None
        await self._instance_queue.bind(self.topology.exchange, routing_key=pattern)

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
        """Publish any envelope with the contract's routing key, and wait for the confirm.

        With ``mandatory`` (the default) a message nobody is bound for raises
        ``Unroutable``; without it, such a message is dropped by the broker.

        Raises:
            Unroutable: no queue is bound for the receiver.
            ConnectionLost: the broker could not be reached in time.
            PublishFailed: the broker refused the message.
            PayloadTooLarge: the encoded envelope is over the size cap.
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
        for queue, tag in self._consumers:
            with contextlib.suppress(Exception):
                await queue.cancel(tag)
        self._consumers.clear()
        await self._drain(self.settings.shutdown_grace if grace is None else grace)

    async def aclose(self) -> None:
        """Drain (see ``drain``), fail requests still waiting, and close the connection."""
        if self._state is BusState.CLOSED:
            return
        if self._state is BusState.NEW:
            self._state = BusState.CLOSED
            return
        await self.drain()
        self._pending.fail_all(BusClosed("the bus closed before the answer came"))
        self._state = BusState.CLOSED
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()
        _log.debug("bus closed", agent_id=self.agent_id)

    async def _drain(self, grace: float) -> None:
        assert self._dispatcher is not None
        current = asyncio.current_task()
        tasks = {task for task in self._dispatcher.inflight if task is not current}
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

    def _require_publisher(self) -> Publisher:
        if self._state not in (BusState.OPEN, BusState.CLOSING) or self._publisher is None:
            raise BusClosed(f"{self!r} is not open")
        return self._publisher


def _checked(value: str, what: str) -> str:
    if not is_valid_id(value):
        raise ConfigurationError(f"{what} {value!r} is not valid: use 1 to 128 of [A-Za-z0-9_-]")
    return value
