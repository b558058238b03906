"""What every bus shares, whatever carries it: requests, events, serving, drain and close."""

from __future__ import annotations

import abc
import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

from agentbus._config import Settings
from agentbus._exceptions import (
    BusClosed,
    ConfigurationError,
)
from agentbus._logging import get_logger
from agentbus._metrics import Metrics
from agentbus._topology import DIRECT_REPLY_TO, Topology
from agentbus._tracing import enable_tracing, tracing_enabled
from agentbus.bus._dedup import DedupStore, DedupWindow
from agentbus.bus._dispatch import Dispatcher, EventHandler, RequestHandler
from agentbus.bus._feed import DEFAULT_FEED_LENGTH, Feed, FeedHandler
from agentbus.bus._journal import Journal
from agentbus.bus._pending import PendingRequests, ProgressCallback
from agentbus.bus._protocol import EnvelopePublisher
from agentbus.bus._requests import Requester
from agentbus.bus._sqlite_dedup import SqliteDedupStore
from agentbus.bus._stats import BusState, BusStats
from agentbus.bus._trace import current_trace
from agentbus.envelopes import (
    BROADCAST,
    Envelope,
    EventEnvelope,
    EventPayload,
    Metadata,
    RequestEnvelope,
    ResponseEnvelope,
    is_valid_id,
    utcnow,
)
from agentbus.security import SenderRates, verifies_sender

__all__ = ["BaseBus"]

_log = get_logger("agentbus.bus")


class BaseBus(abc.ABC):
    """The bus's behaviour; a subclass supplies the broker: connect, declare, consume, close."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        agent_id: str | None = None,
        app_id: str = "agentbus",
        metrics: Metrics | None = None,
        dedup: DedupStore | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.agent_id = agent_id or f"client-{uuid.uuid4().hex[:12]}"
        if not is_valid_id(self.agent_id) or self.agent_id == BROADCAST:
            raise ConfigurationError(
                f"agent id {self.agent_id!r} is not valid: use 1 to 128 of [A-Za-z0-9_-]"
            )
        self.topology = Topology(self.settings.exchange)
        if self.settings.tracing and not tracing_enabled():
            enable_tracing(trace_file=self.settings.trace_file)
        self.stats = BusStats()
        self.service: str | None = None
        self._app_id = app_id
        self._state = BusState.NEW
        self._pending = PendingRequests()
        # Backpressure: callers past the cap wait for a slot. Requests and publishes have
        # a cap each, so requests waiting on slow answers never hold up heartbeats.
        self._requests = Requester(
            self._pending,
            self.stats,
            self.settings.max_outstanding,
            presence=self._unserved,
            presence_after=self.settings.presence_check,
        )
        self._publish_slots = asyncio.Semaphore(self.settings.max_outstanding)
        self._dedup = dedup if dedup is not None else _dedup_store(self.settings)
        self._publisher: EnvelopePublisher | None = None
        self._dispatcher: Dispatcher | None = None
        self._draining: asyncio.Task[None] | None = None
        self._feeds: list[Feed] = []
        self.metrics = metrics
        if metrics is not None:
            self.stats.observer = metrics  # timings as they happen
            metrics.attach(self)  # counters at each scrape

    def __repr__(self) -> str:
        return f"<{type(self).__name__} agent_id={self.agent_id!r} state={self._state.value}>"

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

    @property
    def outstanding(self) -> int:
        """How many requests are out (sent or being sent), at most ``max_outstanding``.

        Unlike ``in_flight``, callers still waiting for a slot are not counted.
        """
        return self._requests.slots.taken

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @abc.abstractmethod
    async def open(self) -> Self:
        """Connect, declare the instance queue and start consuming it."""

    @abc.abstractmethod
    async def _declare_service(self, service: str, prefetch: int) -> None:
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
    async def _open_reply_queue(self, queue: str) -> Callable[[bool], Awaitable[None]]:
        """Declare a durable reply queue and take its replies; return what stops that
        (and deletes the queue, when told to)."""

    @abc.abstractmethod
    async def _unserved(self, receiver: str) -> bool:
        """Whether ``receiver``'s queue (service, else instance) holds work nobody consumes."""

    @abc.abstractmethod
    async def _stop_consuming(self, *, instance: bool) -> None:
        """Cancel the service consumers; with ``instance``, the instance consumer too."""

    @abc.abstractmethod
    def _delivery_tasks(self) -> set[asyncio.Task[Any]]:
        """Deliveries being handled, including ones not started yet."""

    @abc.abstractmethod
    async def _close_transport(self) -> None:
        """Close the connection; unacked deliveries go back to their queues."""

    def _started(self, publisher: EnvelopePublisher) -> Dispatcher:
        self._publisher = publisher
        self._dispatcher = Dispatcher(
            agent_id=self.agent_id,
            publisher=publisher,
            pending=self._pending,
            dedup=self._dedup,
            stats=self.stats,
            max_size=self.settings.max_message_size,
            verify_sender=verifies_sender(self.settings),
            delivery_limit=(
                self.settings.delivery_limit if self.settings.queue_type == "classic" else None
            ),
        )
        if self.settings.rate_limit is not None:
            self._dispatcher.rates = SenderRates(self.settings.rate_limit, self.settings.rate_burst)
        return self._dispatcher

    def _can_publish(self) -> bool:
        return self._state in (BusState.OPEN, BusState.CLOSING)

    async def serve(
        self,
        handler: RequestHandler,
        *,
        service: str | None = None,
        prefetch: int | None = None,
        broadcast_actions: Iterable[str] = (),
        acks_early: Callable[[RequestEnvelope], bool] | None = None,
    ) -> None:
        """Answer requests with ``handler``.

        Requests to this instance's id are always served. With ``service``, the bus
        also consumes the service's shared queue, competing with its other instances,
        at most ``prefetch`` at a time. ``broadcast_actions`` are request actions
        received when broadcast to everyone. A request for which ``acks_early`` says
        true is acknowledged before the handler runs (long work, past the broker's
        consumer timeout); if this process dies meanwhile, it is not redelivered.
        """
        dispatcher = self._require_open()
        dispatcher.request_handler = handler
        dispatcher.acks_early = acks_early
        for action in broadcast_actions:
            # Admitted before it is bound: the first broadcast may come right after.
            dispatcher.broadcast_actions.add(_checked(action, "action"))
            await self._bind_instance(f"broadcast.request.{action}")
        if service is None:
            return
        if self.service is not None:
            raise ConfigurationError(f"{self!r} already serves {self.service!r}")
        _checked(service, "service name")
        if service == self.agent_id:
            raise ConfigurationError("a service name must differ from the instance id")
        dispatcher.service = service  # before consuming: admission checks requests against it
        await self._declare_service(service, prefetch or self.settings.prefetch)
        self.service = service

    async def subscribe(self, pattern: str, handler: EventHandler) -> None:
        """Receive events whose routing key matches ``pattern`` (``*`` one word, ``#`` any).

        The pattern is bound to this instance's queue, e.g. ``broadcast.event.heartbeat``.
        """
        dispatcher = self._require_open()
        dispatcher.event_handlers.append((pattern, handler))
        await self._bind_instance(pattern)

    async def consume_feed(
        self,
        pattern: str,
        handler: FeedHandler,
        *,
        name: str,
        max_length: int = DEFAULT_FEED_LENGTH,
    ) -> Feed:
        """Consume messages whose routing key matches ``pattern`` as a feed.

        For high-rate messages that are soon stale and soon repeated (heartbeats): each
        goes, parsed but not validated, to ``handler`` in order, from an exclusive queue
        of this instance's that keeps at most ``max_length`` (the oldest are dropped).
        A message that is not a JSON object, or that admission refuses for how it was
        sent, is dropped and counted. At most a window of messages is delivered and not
        yet acknowledged (acked in batches): a handler that falls behind leaves the
        backlog in the queue, not in memory. The feed closes with the bus.

        Raises:
            ConfigurationError: ``name`` is not a valid id.
            BusClosed: the bus is not open.
        """
        self._require_open()
        feed = Feed(
            name=_checked(name, "feed name"),
            pattern=pattern,
            queue=self.topology.feed_queue(self.agent_id, name),
            handler=handler,
            verify_sender=verifies_sender(self.settings),
            bus_stats=self.stats,
        )
        feed._started(await self._open_feed(feed, max_length))
        self._feeds.append(feed)
        return feed

    async def journal(self, name: str, *, max_age: str = "7D") -> Journal:
        """Open the journal ``name``: an append-only log every process reads back.

        On RabbitMQ a stream, kept ``max_age`` (``7D``, ``12h``: the stream's
        ``x-max-age``) and replicated on a cluster.

        Raises:
            ConfigurationError: ``name`` is not a valid id.
            BusClosed: the bus is not open.
        """
        self._require_open()
        queue = self.topology.journal_queue(_checked(name, "journal name"))
        return await self._open_journal(queue, max_age)

    async def reply_queue(
        self, name: str, *, expect: Iterable[str] = ()
    ) -> Callable[[bool], Awaitable[None]]:
        """Declare the durable reply queue ``name`` and take the replies that reach it.

        A request sent with ``reply_to=`` that queue is answered there; a bus that opens
        the same queue later (another process, after this one died) gets the answers that
        came meanwhile. ``expect``: ids of requests sent before whose answers may wait
        there already; each is kept for this bus's ``send_request`` under that id.
        Returns what stops taking them: ``await stop(True)`` also deletes the queue.

        Raises:
            ConfigurationError: ``name`` is not a valid id.
            BusClosed: the bus is not open.
        """
        self._require_open()
        queue = self.topology.reply_queue(_checked(name, "name"))
        for message_id in expect:
            self._pending.add(message_id)
        return await self._open_reply_queue(queue)

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
        async with self._publish_slots:
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
        on_progress: ProgressCallback | None = None,
        persistent: bool = True,
    ) -> ResponseEnvelope:
        """Send a request to an instance or service and wait for its response.

        ``persistent=False`` sends it transient: not written to disk by the broker, so
        quicker, and lost if the broker restarts before it is served; on RabbitMQ its
        answer comes by direct reply-to (no reply queue, no acks; without ``on_progress``),
        lost if this bus's connection drops meanwhile. For calls whose timeout is short,
        where surviving a broker restart or a reconnect buys nothing.

        ``on_progress`` is called with every ``in_progress`` response that comes first:
        the skill's start, its progress and its partial results, in order.

        Raises:
            RemoteError: the receiver answered with an error envelope.
            RequestTimeout: no answer within ``timeout`` seconds.
            Unroutable: nobody serves ``receiver``.
            NoInstance: ``receiver``'s queue holds requests and no instance consumes it
                (checked once, after the ``presence_check`` setting's seconds without an
                answer; a request already taken by an instance that then stops consuming,
                as one draining does, is waited for).
        """
        timeout = timeout if timeout is not None else self.settings.request_timeout
        deadline: dict[str, Any] = {"deadline": utcnow() + timedelta(seconds=timeout)}
        trace = current_trace()
        if trace is not None and not (metadata and "trace" in metadata):
            deadline["trace"] = trace
        # One validation of plain dicts: cheaper than building the three models one by one.
        envelope = RequestEnvelope.model_validate(
            {
                "sender_id": self.agent_id,
                "receiver_id": receiver,
                "payload": {"action": action, "parameters": parameters or {}},
                "metadata": metadata | deadline if metadata else deadline,
            }
        )
        return await self.send_request(
            envelope, timeout=timeout, on_progress=on_progress, persistent=persistent
        )

    async def send_request(
        self,
        envelope: RequestEnvelope,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        reply_to: str | None = None,
        sent: bool = False,
        persistent: bool = True,
    ) -> ResponseEnvelope:
        """Publish a built request and wait for the response correlated to it.

        ``on_progress`` is called with every ``in_progress`` response that comes first.
        ``reply_to`` names a queue of ``reply_queue`` for the answer (default: this
        instance's). ``sent``: the request went out before (from this process or one
        that died) to that reply queue; only wait for its answer.
        Works while the bus drains, so a handler can finish work that needs requests.
        """
        publisher = self._require_publisher()
        if reply_to is None:
            # Replies come straight to this instance's queue (the default exchange), not
            # through the topic exchange's bindings: one less routing step. A transient
            # request's, by direct reply-to where the broker has it: no queue at all. Not
            # one that waits for progress: that comes by the instance queue, and only one
            # path keeps it in order before the answer.
            direct = publisher.answers_direct and not persistent and on_progress is None
            reply_to = DIRECT_REPLY_TO if direct else self.topology.instance_queue(self.agent_id)
        return await self._requests.send(
            None if sent else publisher,
            envelope,
            reply_to=reply_to,
            timeout=timeout if timeout is not None else self.settings.request_timeout,
            on_progress=on_progress,
            persistent=persistent,
        )

    async def emit(
        self,
        event_name: str,
        data: dict[str, Any] | None = None,
        *,
        receiver: str = BROADCAST,
        persistent: bool = True,
        ttl: float | None = None,
        mandatory: bool = False,
    ) -> EventEnvelope:
        """Publish an event, to everyone by default; return the envelope sent.

        An event nobody subscribes to is dropped, as pub/sub goes; with ``mandatory``,
        it is an error instead.

        Raises:
            Unroutable: ``mandatory`` and nobody receives it (no subscriber bound).
        """
        envelope = EventEnvelope(
            sender_id=self.agent_id,
            receiver_id=receiver,
            payload=EventPayload(event_name=event_name, event_data=data or {}),
            metadata=Metadata(trace=current_trace()),
        )
        await self.publish(envelope, persistent=persistent, ttl=ttl, mandatory=mandatory)
        return envelope

    async def drain(self, grace: float | None = None) -> None:
        """Stop taking work and let in-flight work finish; replies and events still flow.

        The service queue is no longer consumed; requests not started yet go back to
        it for another instance. Handlers still running after ``grace`` seconds
        (default: the ``shutdown_grace`` setting) are cancelled and their requests
        requeued. The bus can still publish and make requests until ``aclose``.
        """
        if self._state is BusState.OPEN:
            self._state = BusState.CLOSING
            assert self._dispatcher is not None
            self._dispatcher.accepting = False
            self._draining = asyncio.create_task(
                self._drain(self.settings.shutdown_grace if grace is None else grace)
            )
        if self._draining is not None:
            # A second caller (an aclose during a drain) waits for the same drain.
            await asyncio.shield(self._draining)

    async def aclose(self) -> None:
        """Drain (see ``drain``), fail requests still waiting, and close."""
        if self._state is BusState.CLOSED:
            return
        if self._state is BusState.NEW:
            self._state = BusState.CLOSED
            return
        await self.drain()
        if self.state is BusState.CLOSED:  # another aclose finished during the drain
            return
        self._state = BusState.CLOSED
        feeds, self._feeds = self._feeds, []
        try:
            for feed in feeds:
                await feed.aclose()
            await self._stop_consuming(instance=True)
        finally:
            self._pending.fail_all(BusClosed("the bus closed before the answer came"))
            try:
                await self._close_transport()
            finally:
                self._dedup.close()
                if self.metrics is not None:
                    self.metrics.detach(self)
        _log.debug("bus closed", agent_id=self.agent_id)

    async def _drain(self, grace: float) -> None:
        await self._stop_consuming(instance=False)
        assert self._dispatcher is not None
        current = asyncio.current_task()
        waiting = {task for task in self._delivery_tasks() if task is not current}
        tasks = {t for t in waiting | self._dispatcher.inflight if t is not current}
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

    def _require_publisher(self) -> EnvelopePublisher:
        if not self._can_publish() or self._publisher is None:
            raise BusClosed(f"{self!r} is not open")
        return self._publisher


def _dedup_store(settings: Settings) -> DedupStore:
    if settings.dedup_path:
        return SqliteDedupStore(settings.dedup_path, settings.dedup_window)
    return DedupWindow(settings.dedup_window, settings.dedup_size)


def _checked(value: str, what: str) -> str:
    if not is_valid_id(value):
        raise ConfigurationError(f"{what} {value!r} is not valid: use 1 to 128 of [A-Za-z0-9_-]")
    return value
