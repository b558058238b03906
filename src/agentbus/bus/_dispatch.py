"""Handle each delivery: decode, route to a handler or a waiting request, settle it once."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from agentbus._config import Settings
from agentbus._exceptions import EnvelopeError
from agentbus._logging import bind_delivery_ids, get_logger
from agentbus.bus._artifacts import Artifacts
from agentbus.bus._delivery import IncomingMessage, Settle, settle
from agentbus.bus._held import HeldAnswers
from agentbus.bus._pending import PendingRequests, ReplyOutcome
from agentbus.bus._poison import DeliveryLimit, attempt_of
from agentbus.bus._redelivery import bind_ack_gates, bind_redelivered, bind_reply_address
from agentbus.bus._refusals import AMQP_MESSAGE_ID, Refusals
from agentbus.bus._replies import Replier, Reply, ReplyPublisher
from agentbus.bus._routes import Routes
from agentbus.bus._serving import Server
from agentbus.bus._stats import BusStats
from agentbus.bus._stores._dedup import DedupStore, DedupWindow, SharedDedupStore, is_shared
from agentbus.envelopes import (
    Envelope,
    ErrorEnvelope,
    EventEnvelope,
    RequestEnvelope,
    ResponseEnvelope,
    decode,
)
from agentbus.security import AuditSink, SenderRates, refusal, verifies_sender

__all__ = ["Dispatcher", "dispatcher_for"]

_log = get_logger("agentbus.bus")


class Dispatcher:
    """Decodes deliveries and routes them; every delivery is settled exactly once.

    Each concern has one owner: admission says who may send what, ``Refusals`` answers
    what is not run, the ``Server`` runs and answers requests, the pending requests take
    replies, the routes' event handlers take events.
    """

    def __init__(
        self,
        *,
        agent_id: str,
        routes: Routes,
        server: Server,
        refusals: Refusals,
        pending: PendingRequests,
        stats: BusStats,
        max_size: int,
        verify_sender: bool,
        limit: DeliveryLimit | None,
        rates: SenderRates | None,
        held: HeldAnswers,
    ) -> None:
        self.agent_id = agent_id
        self.inflight: set[asyncio.Task[Any]] = set()
        self._routes = routes
        self._server = server
        self._refusals = refusals
        self._pending = pending
        self._stats = stats
        self._max_size = max_size
        self._verify_sender = verify_sender
        self._limit = limit
        self._rates = rates
        self._held = held

    @property
    def delivery_limit(self) -> int | None:
        """Returns counted here (classic service queues) before a request is poison."""
        return None if self._limit is None else self._limit.limit

    @delivery_limit.setter
    def delivery_limit(self, limit: int) -> None:
        if self._limit is not None:
            self._limit.limit = limit

    def __repr__(self) -> str:
        return f"<Dispatcher agent_id={self.agent_id!r} inflight={len(self.inflight)}>"

    async def on_message(self, message: IncomingMessage) -> None:
        """Handle a delivery from this instance's own queue."""
        await self._track(message, shared=False)

    async def on_service_message(self, message: IncomingMessage) -> None:
        """Handle a delivery from a service queue shared with other instances."""
        await self._track(message, shared=True)

    async def on_held_reply(self, message: IncomingMessage, *, queue: str) -> None:
        """Handle a delivery from reply queue ``queue``, whose answers are held."""
        await self._track(message, shared=False, holding=queue)

    async def _track(
        self, message: IncomingMessage, *, shared: bool, holding: str | None = None
    ) -> None:
        # A held answer is not work a drain waits for: it ends when let go, or with the
        # connection (then back on its queue, so never requeued here, to come back to us).
        task = asyncio.current_task() if holding is None else None
        if task is not None:
            self.inflight.add(task)
        # Each delivery runs in its own task: ids bound here are on every log line it makes.
        bind_delivery_ids(self.agent_id, message.message_id, message.correlation_id)
        # A classic queue's redelivery comes back as a fresh copy counting its attempt.
        bind_redelivered(bool(message.redelivered) or attempt_of(message) > 1)
        bind_reply_address(message.reply_to)
        bind_ack_gates()
        try:
            how = await self._dispatch(message, shared=shared, holding=holding)
        except asyncio.CancelledError:
            # Cancelled mid-way (a drain past its grace, a close): back to the queue.
            if holding is None and not self._server.acked_early(message):
                await asyncio.shield(settle(message, Settle.REQUEUE, self._stats))
            raise
        else:
            # The one place a delivery is settled: every path above returns how (long
            # work was acked when it started, the one exception).
            if not self._server.acked_early(message):
                await settle(message, how, self._stats)
        finally:
            self._server.forget(message)
            if self._limit is not None:
                # Settled, or given up on: a copy republished from it may run now.
                self._limit.settled(message)
            if task is not None:
                self.inflight.discard(task)

    async def _dispatch(
        self, message: IncomingMessage, *, shared: bool, holding: str | None
    ) -> Settle:
        self._stats.consumed += 1
        if self._limit is not None:
            await self._limit.wait_for_original(message)
        try:
            envelope = decode(
                message.body, max_size=self._max_size, message_id=_fallback_id(message)
            )
        except EnvelopeError as exc:
            return await self._refusals.undecodable(message, exc)
        reason = refusal(
            message,
            envelope,
            agent_id=self.agent_id,
            service=self._routes.service,
            shared=shared,
            verify_sender=self._verify_sender,
            broadcast_actions=self._routes.broadcast_actions,
        )
        if reason is not None:
            return await self._refusals.refused(message, envelope, reason)
        if message.redelivered and shared:
            counted = await self._refusals.counted_return(message, envelope)
            if counted is not None:
                return counted
        if holding is not None and isinstance(envelope, ResponseEnvelope | ErrorEnvelope):
            return await self._deliver_held(envelope, holding)
        return await self._route(message, envelope, shared=shared)

    async def _route(self, message: IncomingMessage, envelope: Envelope, *, shared: bool) -> Settle:
        if isinstance(envelope, RequestEnvelope):
            if self._rates is not None:
                wait = self._rates.allow(message.user_id or envelope.sender_id)
                if wait:
                    return await self._refusals.over_rate(message, envelope, wait)
            if self._routes.accepting:
                return await self._server.serve(message, envelope)
            return await self._refusals.turned_away(message, envelope, shared=shared)
        if isinstance(envelope, EventEnvelope):
            self._stats.consumed_by[("event", "delivered")] += 1
            return await self._deliver_event(message, envelope)
        self._deliver_reply(envelope)
        return Settle.ACK

    async def _deliver_held(self, reply: Reply, queue: str) -> Settle:
        # Held before the requester wakes, so its release always finds the gate.
        message_id = reply.metadata.correlation_id
        if message_id is None:
            self._deliver_reply(reply)
            return Settle.ACK
        earlier = self._held.held(message_id)
        if earlier is not None:  # its first delivery went with its channel: this one waits
            return await earlier
        gate = self._held.hold(queue, message_id)
        if self._deliver_reply(reply) is not ReplyOutcome.MATCHED:
            self._held.drop(message_id)  # progress, or an answer nobody waits for
            return Settle.ACK
        return await gate

    def _deliver_reply(self, reply: Reply) -> ReplyOutcome:
        outcome = self._pending.resolve(reply)
        self._stats.consumed_by[(reply.message_type, outcome.value)] += 1
        if outcome is ReplyOutcome.MATCHED:
            self._stats.replies_matched += 1
        elif outcome is ReplyOutcome.PROGRESS:
            self._stats.progress_replies += 1
        elif outcome is ReplyOutcome.LATE:
            self._stats.late_replies += 1
            _log.info("late reply dropped", correlation_id=reply.correlation_id)
        else:
            self._stats.unknown_replies += 1
            _log.debug("reply to an unknown request dropped", correlation_id=reply.correlation_id)
        return outcome

    async def _deliver_event(self, message: IncomingMessage, event: EventEnvelope) -> Settle:
        for handler in self._routes.event_handlers(message.routing_key or ""):
            try:
                await handler(event)
            except Exception:
                self._stats.handler_errors += 1
                _log.exception("event handler failed", event_name=event.payload.event_name)
        return Settle.ACK


def dispatcher_for(
    *,
    agent_id: str,
    settings: Settings,
    routes: Routes,
    publisher: ReplyPublisher,
    pending: PendingRequests,
    dedup: DedupStore | SharedDedupStore,
    stats: BusStats,
    held: HeldAnswers,
    audit: AuditSink | None = None,
    artifacts: Artifacts | None = None,
) -> Dispatcher:
    """Build a bus's dispatcher and the steps it hands deliveries to, as ``settings`` say.

    A shared ``dedup`` store gets an in-process window in front of it.
    """
    local: DedupStore
    shared: SharedDedupStore | None = None
    if is_shared(dedup):
        local, shared = DedupWindow(settings.dedup_window, settings.dedup_size), dedup
    else:
        local = cast(DedupStore, dedup)
    replier = Replier(publisher, stats)
    # Classic service queues only: a quorum queue counts deliveries itself.
    limit = (
        DeliveryLimit(settings.delivery_limit, publisher)
        if settings.queue_type == "classic"
        else None
    )
    rates = (
        None
        if settings.rate_limit is None
        else SenderRates(settings.rate_limit, settings.rate_burst)
    )
    return Dispatcher(
        agent_id=agent_id,
        routes=routes,
        server=Server(
            agent_id=agent_id,
            routes=routes,
            replier=replier,
            dedup=local,
            shared=shared,
            stats=stats,
            audit=audit,
            max_size=settings.max_message_size,
            artifacts=artifacts,
        ),
        refusals=Refusals(
            agent_id=agent_id, replier=replier, stats=stats, audit=audit, limit=limit
        ),
        pending=pending,
        stats=stats,
        max_size=settings.max_message_size,
        verify_sender=verifies_sender(settings),
        limit=limit,
        rates=rates,
        held=held,
    )


def _fallback_id(message: IncomingMessage) -> str | None:
    # An envelope without message_id takes the AMQP message_id, else the AMQP
    # correlation_id (the classic RabbitMQ RPC client sets only that one).
    for candidate in (message.message_id, message.correlation_id):
        if candidate and AMQP_MESSAGE_ID.match(candidate):
            return candidate
    return None
