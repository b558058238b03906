"""What every bus shares, whatever carries it: requests, events, serving, drain and close."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, Self, cast

from agentbus._config import Settings, peer_sites
from agentbus._exceptions import (
    AgentBusError,
    BusClosed,
    ConfigurationError,
)
from agentbus._logging import get_logger
from agentbus._metrics import Metrics
from agentbus._topology import Topology
from agentbus._tracing import enable_tracing, tracing_enabled
from agentbus.bus._artifacts import Artifacts
from agentbus.bus._artifacts_across import fetch_across, send_artifact
from agentbus.bus._dispatch import Dispatcher, dispatcher_for
from agentbus.bus._feed import DEFAULT_FEED_LENGTH, Feed, FeedHandler
from agentbus.bus._held import HeldAnswers
from agentbus.bus._hooks import BrokerHooks
from agentbus.bus._keeping import Keeping, checked
from agentbus.bus._pending import PendingRequests
from agentbus.bus._protocol import EnvelopePublisher
from agentbus.bus._requests import Requester
from agentbus.bus._routes import EventHandler, RequestHandler, Routes
from agentbus.bus._sending import Sending
from agentbus.bus._sites import SiteRouter
from agentbus.bus._stats import BusState, BusStats
from agentbus.bus._stores._artifact_store import ArtifactStore
from agentbus.bus._stores._dedup import DedupStore, SharedDedupStore, is_shared
from agentbus.bus._stores._s3_artifacts import configured_store
from agentbus.bus._stores._sqlite_dedup import dedup_store
from agentbus.envelopes import (
    BROADCAST,
    READ_ARTIFACT,
    ErrorCode,
    RequestEnvelope,
    is_valid_id,
)
from agentbus.security import AuditSink, default_id, verifies_sender

__all__ = ["BaseBus"]

_log = get_logger("agentbus.bus")


class BaseBus(Sending, Keeping, BrokerHooks):
    """The bus's behaviour; a subclass supplies the broker: connect, declare, consume, close."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        agent_id: str | None = None,
        app_id: str = "agentbus",
        metrics: Metrics | None = None,
        dedup: DedupStore | SharedDedupStore | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.agent_id = agent_id or default_id(self.settings, "client")
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
        self._routes = Routes()
        self._held = HeldAnswers()
        # Backpressure: callers past the cap wait for a slot. Requests and publishes have
        # a cap each, so requests waiting on slow answers never hold up heartbeats.
        self._requests = Requester(
            self._pending,
            self.stats,
            self.settings.max_outstanding,
            presence=self._unserved,
            presence_after=self.settings.presence_check,
        )
        self._sites = SiteRouter(
            self.topology, peer_sites(self.settings), self._served_here, self._heard_from
        )
        self._publish_slots = asyncio.Semaphore(self.settings.max_outstanding)
        self._dedup = dedup if dedup is not None else dedup_store(self.settings)
        self._publisher: EnvelopePublisher | None = None
        # An object another site's stream holds is fetched across from the agent that stored it.
        across = functools.partial(fetch_across, self.request) if self._sites.active else None
        self._artifacts = Artifacts(
            self._open_artifacts, self.settings, owner=self.agent_id, across=across
        )
        if across is not None:  # what it stored, to a reader at another site, served or not
            self._routes.serve(self._at_home(None), None)
        self._dispatcher: Dispatcher | None = None
        self._draining: asyncio.Task[None] | None = None
        self._feeds: list[Feed] = []
        self.metrics = metrics
        if metrics is not None:
            self.stats.observer = metrics  # timings as they happen
            metrics.attach(self)  # counters at each scrape

    async def _served_here(self, receiver: str) -> bool:
        """Whether something at this site consumes ``receiver``'s queue (default: assume so)."""
        return True

    async def _heard_from(self, site: str) -> bool | None:
        """Whether a heartbeat from peer ``site`` was heard here lately (default: not known)."""
        return None

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

    @property
    def artifacts(self) -> Artifacts:
        """This bus's artifacts: store files and large payloads, read them back checked
        (once the bus is open)."""
        return self._artifacts

    def _open_artifacts(self) -> ArtifactStore:
        if not self._can_publish():
            raise BusClosed(f"{self!r} is not open")
        return configured_store(self.settings) or self._artifact_store()

    def _started(self, publisher: EnvelopePublisher, audit: AuditSink | None = None) -> Dispatcher:
        """Build the dispatcher, with everything it needs, once the broker's publisher is up."""
        self._publisher = publisher
        self._dispatcher = dispatcher_for(
            agent_id=self.agent_id,
            settings=self.settings,
            routes=self._routes,
            publisher=publisher,
            pending=self._pending,
            dedup=self._dedup,
            stats=self.stats,
            held=self._held,
            audit=audit,
            artifacts=self._artifacts if self.settings.artifact_by_reference else None,
        )
        return self._dispatcher

    def _can_publish(self) -> bool:
        return self._state in (BusState.OPEN, BusState.CLOSING)

    def _at_home(self, handler: RequestHandler | None) -> RequestHandler:
        # With peer sites, ``read_artifact`` is the bus's own: whatever it serves, a bus
        # sends what it stored to a reader at another site (its artifacts).
        async def serve(request: RequestEnvelope) -> Any:
            if request.payload.action == READ_ARTIFACT:
                return await send_artifact(self, request, self.agent_id)
            if handler is None:
                message = f"{self.agent_id} serves no requests"
                raise AgentBusError(message, code=ErrorCode.AGENT_UNAVAILABLE)
            return await handler(request)

        return serve

    async def serve(
        self,
        handler: RequestHandler,
        *,
        service: str | None = None,
        prefetch: int | None = None,
        broadcast_actions: Iterable[str] = (),
        acks_early: Callable[[RequestEnvelope], bool] | None = None,
        delivery_limit: int | None = None,
    ) -> None:
        """Answer requests with ``handler``.

        Requests to this instance's id are always served. With ``service``, the bus
        also consumes the service's shared queue, competing with its other instances,
        at most ``prefetch`` at a time. ``broadcast_actions`` are request actions
        received when broadcast to everyone. A request for which ``acks_early`` says
        true is acknowledged before the handler runs (long work, past the broker's
        consumer timeout); if this process dies meanwhile, it is not redelivered.
        ``delivery_limit`` (default: the setting's) is the returns of a request to the
        service's queue before it is dead-lettered.
        """
        self._require_open()
        self._routes.serve(self._at_home(handler) if self._sites.active else handler, acks_early)
        for action in broadcast_actions:
            # Admitted before it is bound: the first broadcast may come right after.
            self._routes.broadcast_actions.add(checked(action, "action"))
            await self._bind_instance(f"broadcast.request.{action}")
        if service is None:
            return
        if self.service is not None:
            raise ConfigurationError(f"{self!r} already serves {self.service!r}")
        checked(service, "service name")
        if service == self.agent_id:
            raise ConfigurationError("a service name must differ from the instance id")
        self._routes.service = service  # before consuming: admission checks requests against it
        limit = delivery_limit or self.settings.delivery_limit
        if self._dispatcher is not None:
            self._dispatcher.delivery_limit = limit
        await self._declare_service(service, prefetch or self.settings.prefetch, limit)
        self.service = service

    async def subscribe(self, pattern: str, handler: EventHandler) -> None:
        """Receive events whose routing key matches ``pattern`` (``*`` one word, ``#`` any).

        The pattern is bound to this instance's queue, e.g. ``broadcast.event.heartbeat``.
        """
        self._require_open()
        self._routes.subscribe(pattern, handler)
        await self._bind_instance(pattern)

    async def consume_feed(
        self,
        pattern: str,
        handler: FeedHandler,
        *,
        name: str,
        max_length: int = DEFAULT_FEED_LENGTH,
        group: str | None = None,
    ) -> Feed:
        """Consume messages whose routing key matches ``pattern`` as a feed.

        For high-rate messages that are soon stale and soon repeated (heartbeats): each
        goes, parsed but not validated, to ``handler`` in order, from an exclusive queue
        of this instance's that keeps at most ``max_length`` (the oldest are dropped).
        A message that is not a JSON object, or that admission refuses for how it was
        sent, is dropped and counted. At most a window of messages is delivered and not
        yet acknowledged (acked in batches): a handler that falls behind leaves the
        backlog in the queue, not in memory. The feed closes with the bus.

        ``group``: the queue is the group's (a service name), not this instance's: every
        bus that consumes the feed ``name`` of ``group`` takes a part of its messages (each
        message goes to one), and the queue outlives the last of them by a minute.

        Raises:
            ConfigurationError: ``name`` is not a valid id.
            BusClosed: the bus is not open.
        """
        self._require_open()
        feed = Feed(
            name=checked(name, "feed name"),
            pattern=pattern,
            queue=self.topology.feed_queue(
                self.agent_id if group is None else checked(group, "feed group"),
                checked(name, "feed name"),
            ),
            handler=handler,
            verify_sender=verifies_sender(self.settings),
            bus_stats=self.stats,
            shared=group is not None,
        )
        feed._started(await self._open_feed(feed, max_length))
        self._feeds.append(feed)
        return feed

    async def drain(self, grace: float | None = None) -> None:
        """Stop taking work and let in-flight work finish; replies and events still flow.

        The service queue is no longer consumed; requests not started yet go back to
        it for another instance. Handlers still running after ``grace`` seconds
        (default: the ``shutdown_grace`` setting) are cancelled and their requests
        requeued. The bus can still publish and make requests until ``aclose``.
        """
        if self._state is BusState.OPEN:
            self._state = BusState.CLOSING
            self._routes.accepting = False
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
        await self._held.acked()
        try:
            for feed in feeds:
                await feed.aclose()
            await self._stop_consuming(instance=True)
        finally:
            self._requests.close()
            self._pending.fail_all(BusClosed("the bus closed before the answer came"))
            try:
                await self._close_transport()
            finally:
                self._held.abandon()  # back on their queues with the connection
                await _close_store(self._dedup)
                await self._artifacts.aclose()
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


async def _close_store(store: DedupStore | SharedDedupStore) -> None:
    if is_shared(store):
        await store.aclose()
    else:
        cast(DedupStore, store).close()
