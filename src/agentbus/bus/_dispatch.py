"""Handle each delivery: decode, route to a handler or a waiting request, settle it once."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, TypeAlias

from agentbus._exceptions import AgentBusError, EnvelopeError, Unroutable
from agentbus._logging import bind_delivery_ids, get_logger
from agentbus._topology import topic_matches
from agentbus._tracing import child_trace, end_span, start_span
from agentbus.bus._dedup import DedupStore, completer
from agentbus.bus._delivery import IncomingMessage, Settle, settle
from agentbus.bus._pending import PendingRequests, ReplyOutcome
from agentbus.bus._poison import DeliveryLimit, Verdict, attempt_of
from agentbus.bus._stats import BusStats
from agentbus.bus._trace import bind_trace
from agentbus.envelopes import (
    Envelope,
    ErrorCode,
    ErrorEnvelope,
    ErrorPayload,
    EventEnvelope,
    Metadata,
    RequestEnvelope,
    ResponseEnvelope,
    decode,
    encode,
    is_valid_id,
    utcnow,
)
from agentbus.security import (
    AuditSink,
    Refusal,
    SenderRates,
    audit_record,
    envelope_fields,
    raw_fields,
    refusal,
)

__all__ = ["Dispatcher", "EventHandler", "ReplyPublisher", "RequestHandler"]

RequestHandler: TypeAlias = Callable[[RequestEnvelope], Awaitable[Any]]
"""Serves a request: returns the result (or a ready reply envelope), or raises."""

EventHandler: TypeAlias = Callable[[EventEnvelope], Awaitable[None]]
"""Receives an event."""

Reply: TypeAlias = ResponseEnvelope | ErrorEnvelope

_AMQP_MESSAGE_ID: Final = re.compile(r"^[\x21-\x7e]{1,255}$")
_NO_ANSWER_TYPES: Final = frozenset({"response", "error", "event"})
_log = get_logger("agentbus.bus")


class ReplyPublisher(Protocol):
    """Sends replies: the RabbitMQ ``Publisher``, or the in-memory bus's."""

    async def publish_reply(
        self, reply: Reply, reply_to: str | None, body: bytes | None = None
    ) -> None: ...

    async def republish(self, message: IncomingMessage, headers: Mapping[str, int]) -> None: ...


class Dispatcher:
    """Decodes deliveries and routes them; every delivery is settled exactly once."""

    def __init__(
        self,
        *,
        agent_id: str,
        publisher: ReplyPublisher,
        pending: PendingRequests,
        dedup: DedupStore,
        stats: BusStats,
        max_size: int,
        verify_sender: bool = False,
        delivery_limit: int | None = None,
    ) -> None:
        self.agent_id = agent_id
        self.service: str | None = None
        self.verify_sender = verify_sender
        self.broadcast_actions: set[str] = set()
        self.audit: AuditSink | None = None
        self.rates: SenderRates | None = None
        self.request_handler: RequestHandler | None = None
        self.acks_early: Callable[[RequestEnvelope], bool] | None = None
        self._acked_early: set[int] = set()  # id() of deliveries acked before their work
        self.event_handlers: list[tuple[str, EventHandler]] = []
        self._publisher = publisher
        self._pending = pending
        self._dedup = dedup
        self._complete = completer(dedup)
        self._stats = stats
        self._max_size = max_size
        # Set for classic service queues only: a quorum queue counts deliveries itself.
        self._limit = None if delivery_limit is None else DeliveryLimit(delivery_limit, publisher)
        self.inflight: set[asyncio.Task[Any]] = set()
        self.accepting = True
        # Requests running here, by message id; the event (made when a copy waits on the
        # run) is set when the run ends, answered or not.
        self._running: dict[str, asyncio.Event | None] = {}

    async def on_message(self, message: IncomingMessage) -> None:
        """Handle a delivery from this instance's own queue."""
        await self._track(message, shared=False)

    async def on_service_message(self, message: IncomingMessage) -> None:
        """Handle a delivery from a service queue shared with other instances."""
        await self._track(message, shared=True)

    async def _track(self, message: IncomingMessage, *, shared: bool) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.inflight.add(task)
        # Each delivery runs in its own task: ids bound here are on every log line it makes.
        bind_delivery_ids(self.agent_id, message.message_id, message.correlation_id)
        try:
            how = await self._dispatch(message, shared=shared)
        except asyncio.CancelledError:
            # Cancelled mid-way (a drain past its grace, a close): back to the queue.
            if id(message) not in self._acked_early:
                await asyncio.shield(settle(message, Settle.REQUEUE, self._stats))
            raise
        else:
            # The one place a delivery is settled: every path above returns how (long
            # work was acked when it started, the one exception).
            if id(message) not in self._acked_early:
                await settle(message, how, self._stats)
        finally:
            self._acked_early.discard(id(message))
            if self._limit is not None:
                # Settled, or given up on: a copy republished from it may run now.
                self._limit.settled(message)
            if task is not None:
                self.inflight.discard(task)

    async def _dispatch(self, message: IncomingMessage, *, shared: bool) -> Settle:
        self._stats.consumed += 1
        if self._limit is not None:
            await self._limit.wait_for_original(message)
        try:
            envelope = decode(
                message.body, max_size=self._max_size, message_id=_fallback_id(message)
            )
        except EnvelopeError as exc:
            self._stats.consumed_by[("invalid", exc.code)] += 1
            return await self._refuse(message, exc)
        reason = refusal(
            message,
            envelope,
            agent_id=self.agent_id,
            service=self.service,
            shared=shared,
            verify_sender=self.verify_sender,
            broadcast_actions=self.broadcast_actions,
        )
        if reason is not None:
            return await self._refuse_admission(message, envelope, reason)
        if message.redelivered and shared and self._limit is not None:
            counted = await self._count_return(message, envelope)
            if counted is not None:
                return counted
        if isinstance(envelope, RequestEnvelope):
            if self.rates is not None:
                wait = self.rates.allow(message.user_id or envelope.sender_id)
                if wait:
                    return await self._rate_limit(message, envelope, wait)
            if self.accepting:
                return await self._serve(message, envelope)
            self._stats.consumed_by[("request", "turned_away")] += 1
            return await self._turn_away(message, envelope, shared=shared)
        if isinstance(envelope, EventEnvelope):
            self._stats.consumed_by[("event", "delivered")] += 1
            return await self._deliver_event(message, envelope)
        self._deliver_reply(envelope)
        return Settle.ACK

    def _deliver_reply(self, reply: Reply) -> None:
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

    async def _deliver_event(self, message: IncomingMessage, event: EventEnvelope) -> Settle:
        key = message.routing_key or ""
        for pattern, handler in self.event_handlers:
            if not topic_matches(pattern, key):
                continue
            try:
                await handler(event)
            except Exception:
                self._stats.handler_errors += 1
                _log.exception("event handler failed", event_name=event.payload.event_name)
        return Settle.ACK

    async def _turn_away(
        self, message: IncomingMessage, request: RequestEnvelope, *, shared: bool
    ) -> Settle:
        # Draining: work from a shared queue goes back for another instance; work sent
        # to this instance alone is refused, since requeueing would bring it back here.
        if shared:
            return Settle.REQUEUE
        error = request.error(
            ErrorCode.AGENT_UNAVAILABLE,
            f"{self.agent_id} is shutting down",
            sender_id=self.agent_id,
        )
        await self._try_reply(error, message.reply_to)
        return Settle.ACK

    async def _serve(self, message: IncomingMessage, request: RequestEnvelope) -> Settle:
        seen = self._dedup.check_in(request.message_id)
        if (
            seen is not None
            and seen.reply is None
            and message.redelivered
            and request.message_id in self._running
        ):
            # The same request is running here on a delivery whose channel closed: a
            # reconnect brought it back before that run ended. Wait for the run: its
            # reply answers this copy, or, abandoned (cancelled), this copy serves it.
            ended = self._running[request.message_id] or asyncio.Event()
            self._running[request.message_id] = ended
            await ended.wait()
            return await self._serve(message, request)
        if seen is not None:
            # At-least-once delivery: the effect ran already. Answer it again from memory.
            self._stats.duplicates += 1
            self._stats.consumed_by[("request", "duplicate")] += 1
            if seen.reply is not None:
                await self._try_reply(seen.reply, seen.reply_to)
            if self.audit is not None:
                self._audit(request, message.user_id, "duplicate", None)
            return Settle.ACK
        if self.acks_early is not None and self.acks_early(request):
            # Long work: the broker's consumer timeout would take the delivery back.
            await settle(message, Settle.ACK, self._stats)
            self._acked_early.add(id(message))
        started = time.perf_counter()
        self._running[request.message_id] = None
        try:
            return await self._serve_once(message, request, started)
        finally:
            if (waited := self._running.pop(request.message_id)) is not None:
                waited.set()

    async def _serve_once(
        self, message: IncomingMessage, request: RequestEnvelope, started: float
    ) -> Settle:
        try:
            reply = await self._run(request)
        except asyncio.CancelledError:
            self._dedup.forget(request.message_id)
            self._stats.consumed_by[("request", "requeued")] += 1
            raise
        outcome = reply.payload.code if isinstance(reply, ErrorEnvelope) else "success"
        self._stats.consumed_by[("request", "served")] += 1
        if isinstance(reply, ErrorEnvelope):
            self._stats.errors_sent[outcome] += 1
        seconds = time.perf_counter() - started
        if self._stats.observer is not None:
            self._stats.observer.observe_handler(request.payload.action, outcome, seconds)
        try:
            return await self._answer(message, request, reply)
        finally:
            # After the answer, so the record's write never goes ahead of the reply.
            if self.audit is not None:
                self._audit(request, message.user_id, outcome, seconds)

    async def _answer(
        self, message: IncomingMessage, request: RequestEnvelope, reply: Reply
    ) -> Settle:
        reply_to = message.reply_to
        try:
            # Encoded once: the store keeps these bytes and the publisher sends them.
            reply, body = self._encoded(request, reply, reply_to)
            # The work is done: remember its reply before sending it. If the channel closes
            # now (this task is cancelled) the redelivered request is answered with it, not
            # acked without an answer as if the work were still running.
            self._complete(request.message_id, reply, reply_to, body)
            await self._publisher.publish_reply(reply, reply_to, body)
        except Unroutable:
            self._stats.replies_dropped += 1
            _log.info("reply dropped: the requester has gone", message_id=request.message_id)
        except AgentBusError as exc:
            # Not answered: leave it to be redelivered; the duplicate is answered from the store.
            _log.warning("reply not sent; request left for redelivery", error=str(exc))
            return Settle.REQUEUE
        self._stats.requests_served += 1
        return Settle.ACK

    def _encoded(
        self, request: RequestEnvelope, reply: Reply, reply_to: str | None
    ) -> tuple[Reply, bytes]:
        try:
            return reply, encode(reply, max_size=self._max_size)
        except EnvelopeError as exc:
            # The result cannot be sent (not JSON, or over the size cap): say so instead.
            # The request was fine, so this is a processing failure, not a bad envelope.
            self._stats.handler_errors += 1
            code = exc.code if exc.code == ErrorCode.PAYLOAD_TOO_LARGE else None
            error = request.error(
                code or ErrorCode.PROCESSING_FAILED,
                f"the result cannot be sent: {exc.message}",
                sender_id=self.agent_id,
            )
            try:
                return error, encode(error, max_size=self._max_size)
            except EnvelopeError:
                # Not even the error fits under the cap: remembered all the same, so the
                # redelivered request meets it (and its failed send is counted) instead of
                # running the work again.
                self._complete(request.message_id, error, reply_to, None)
                raise

    async def _rate_limit(
        self, message: IncomingMessage, request: RequestEnvelope, wait: float
    ) -> Settle:
        # Not run and not remembered: the same request sent again later is served.
        self._stats.rate_limited += 1
        self._stats.consumed_by[("request", "rate_limited")] += 1
        self._stats.errors_sent[ErrorCode.RATE_LIMITED] += 1
        if self.audit is not None:
            self.audit.append(
                audit_record(
                    kind="refusal",
                    recorder=self.agent_id,
                    user_id=message.user_id,
                    outcome=ErrorCode.RATE_LIMITED.value,
                    **envelope_fields(request),
                )
            )
        error = request.error(
            ErrorCode.RATE_LIMITED,
            "the sender is over its rate: retry later",
            sender_id=self.agent_id,
            details={"retry_after": round(wait, 3)},
        )
        await self._try_reply(error, message.reply_to)
        return Settle.ACK

    def _audit(
        self, request: RequestEnvelope, user_id: str | None, outcome: str, seconds: float | None
    ) -> None:
        assert self.audit is not None
        if self.audit.off:  # no stream to write to: do not build the record
            return
        self.audit.append(
            audit_record(
                kind="request",
                recorder=self.agent_id,
                user_id=user_id,
                outcome=outcome,
                seconds=seconds,
                **envelope_fields(request),
            )
        )

    async def _run(self, request: RequestEnvelope) -> Reply:
        deadline = request.metadata.deadline
        if deadline is not None and deadline <= utcnow():
            self._stats.expired_requests += 1
            return request.error(
                ErrorCode.TIMEOUT,
                "the request's deadline passed before it was served",
                sender_id=self.agent_id,
            )
        handler = self.request_handler
        if handler is None:
            return request.error(
                ErrorCode.AGENT_UNAVAILABLE,
                f"{self.agent_id} serves no requests",
                sender_id=self.agent_id,
            )
        trace = request.metadata.trace
        span = start_span(
            f"process {request.payload.action}",
            "consumer",
            trace,
            {"messaging.operation.type": "process", "messaging.message.id": request.message_id},
        )
        bind_trace(child_trace(span, trace))  # handed on to what the handler sends
        try:
            reply = await self._call(handler, request)
        except BaseException:
            end_span(span, "cancelled")
            raise
        end_span(span, reply.payload.code if isinstance(reply, ErrorEnvelope) else "success")
        return reply

    async def _call(self, handler: RequestHandler, request: RequestEnvelope) -> Reply:
        try:
            result = await handler(request)
        except AgentBusError as exc:
            return request.error(
                exc.code, exc.message, sender_id=self.agent_id, details=exc.details
            )
        except Exception as exc:
            self._stats.handler_errors += 1
            _log.exception("request handler failed", action=request.payload.action)
            return request.error(
                ErrorCode.PROCESSING_FAILED,
                f"{type(exc).__name__}: {exc}",
                sender_id=self.agent_id,
            )
        if isinstance(result, ResponseEnvelope | ErrorEnvelope):
            return result
        return request.response(result, sender_id=self.agent_id)

    async def _refuse(self, message: IncomingMessage, exc: EnvelopeError) -> Settle:
        raw = exc.raw or {}
        if self.audit is not None:
            self.audit.append(
                audit_record(
                    kind="refusal",
                    recorder=self.agent_id,
                    user_id=message.user_id,
                    outcome=exc.code,
                    **raw_fields(raw, message.message_id),
                )
            )
        _log.warning(
            "undecodable message dead-lettered",
            error=exc.message,
            code=exc.code,
            routing_key=message.routing_key,
            amqp_message_id=message.message_id,
        )
        message_type = raw.get("message_type", message.type)
        requester = raw.get("sender_id")
        requester = requester if is_valid_id(requester) else None
        # message_type may be any JSON value here (an object, an array): compare, not hash.
        answerable = not (isinstance(message_type, str) and message_type in _NO_ANSWER_TYPES)
        if answerable and (message.reply_to or requester):
            correlation = raw.get("message_id", message.message_id)
            valid = isinstance(correlation, str) and _AMQP_MESSAGE_ID.match(correlation)
            error = ErrorEnvelope(
                sender_id=self.agent_id,
                receiver_id=requester or "anonymous",
                payload=ErrorPayload(code=exc.code, message=exc.message, details=exc.details),
                metadata=Metadata(correlation_id=correlation if valid else None),
            )
            self._stats.errors_sent[exc.code] += 1
            await self._try_reply(error, message.reply_to)
        return Settle.DEAD_LETTER

    async def _refuse_admission(
        self, message: IncomingMessage, envelope: Envelope, reason: Refusal
    ) -> Settle:
        # No handler runs. A request is told why: at its reply_to, or at its sender's
        # reply key unless the sender's identity is what is in doubt.
        self._stats.refused += 1
        self._stats.refused_by[reason] += 1
        if self.audit is not None:
            self.audit.append(
                audit_record(
                    kind="refusal",
                    recorder=self.agent_id,
                    user_id=message.user_id,
                    outcome=reason.value,
                    **envelope_fields(envelope),
                )
            )
        self._stats.consumed_by[(envelope.message_type, "refused")] += 1
        _log.warning(
            "delivery refused",
            reason=reason.value,
            routing_key=message.routing_key,
            sender_id=envelope.sender_id,
            receiver_id=envelope.receiver_id,
            user_id=message.user_id,
        )
        if isinstance(envelope, RequestEnvelope) and (message.reply_to or not reason.is_identity):
            error = envelope.error(
                ErrorCode.UNAUTHORIZED,
                f"refused: {reason.explanation}",
                sender_id=self.agent_id,
                details={"reason": reason.value},
            )
            self._stats.errors_sent[ErrorCode.UNAUTHORIZED] += 1
            await self._try_reply(error, message.reply_to)
        return Settle.DEAD_LETTER

    async def _count_return(self, message: IncomingMessage, envelope: Envelope) -> Settle | None:
        # Return how to settle a redelivery from a classic service queue, or None to serve
        # it. A copy cannot carry another user's user_id (the broker refuses the publish).
        assert self._limit is not None
        if message.user_id is not None or isinstance(envelope, Reply):
            return None
        verdict = await self._limit.judge(message)
        if verdict is Verdict.REPUBLISHED:
            self._stats.consumed_by[(envelope.message_type, "republished")] += 1
            return Settle.ACK
        if verdict is Verdict.NOT_COUNTED:
            return Settle.REQUEUE
        failed = attempt_of(message)
        self._stats.poison_dead_lettered += 1
        self._stats.consumed_by[(envelope.message_type, "poison")] += 1
        if isinstance(envelope, RequestEnvelope):
            error = envelope.error(
                ErrorCode.PROCESSING_FAILED,
                f"gave up after {failed} deliveries: the request kept failing its consumer",
                sender_id=self.agent_id,
                details={"attempts": failed, "limit": self._limit.limit},
            )
            self._stats.errors_sent[ErrorCode.PROCESSING_FAILED] += 1
            await self._try_reply(error, message.reply_to)
        return Settle.DEAD_LETTER

    async def _try_reply(self, reply: Reply, reply_to: str | None) -> None:
        try:
            await self._publisher.publish_reply(reply, reply_to)
        except AgentBusError as exc:
            self._stats.replies_dropped += 1
            _log.info("reply not delivered", error=str(exc), correlation_id=reply.correlation_id)


def _fallback_id(message: IncomingMessage) -> str | None:
    # An envelope without message_id takes the AMQP message_id, else the AMQP
    # correlation_id (the classic RabbitMQ RPC client sets only that one).
    for candidate in (message.message_id, message.correlation_id):
        if candidate and _AMQP_MESSAGE_ID.match(candidate):
            return candidate
    return None
